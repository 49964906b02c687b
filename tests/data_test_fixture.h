// The data tests' shared fixture: the installed fortunes' records, a corpus built from them and
// prepared once per test binary (fortune file, paragraph file, skipped files, non-ASCII text), and
// a check that a batch row is a given window of a split.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/prepare.h"
#include "test_util.h"

namespace bcd::datatest {

namespace fs = std::filesystem;
using test::TempDir;

constexpr const char* kFortunes = "/usr/share/games/fortunes/fortunes";

// Records of the installed fortunes file, trimmed, without blank lines inside (so the same text
// is one document both as a fortune record and as a paragraph).
inline std::vector<std::string> fortune_records() {
  std::vector<std::string> out;
  std::string text = test::read_text(kFortunes);  // Debian package fortunes-min
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n%\n", pos);
    std::string rec = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 3;
    size_t b = rec.find_first_not_of(" \t\r\n"), e = rec.find_last_not_of(" \t\r\n");
    if (b == std::string::npos) continue;
    rec = rec.substr(b, e - b + 1);
    if (rec.find("\n\n") != std::string::npos || rec.find("\n \n") != std::string::npos) continue;
    out.push_back(rec);
  }
  return out;
}


// ---- Shared corpus and dataset (built once per process) ----

struct Shared {
  TempDir tmp{"bcd-data"};
  std::string corpus_dir, extra_file, out_dir;
  std::vector<std::string> expected_docs;  // every document prepare should find
  PrepareReport report;
  PrepareOptions opt;
};

inline const Shared& shared() {
  // destroyed at exit, which removes the temporary directory
  static std::unique_ptr<Shared> s = [] {
    auto s = std::make_unique<Shared>();
    std::vector<std::string> recs = fortune_records();
    if (recs.size() < 220) throw std::runtime_error("too few records in " + std::string(kFortunes));
    s->corpus_dir = s->tmp.file("corpus");
    fs::create_directories(s->corpus_dir);

    // Fortune file: records split on "%" lines, one empty record that must be skipped.
    std::string fortunes;
    for (size_t i = 0; i < 150; ++i) {
      fortunes += recs[i] + "\n%\n";
      if (i == 10) fortunes += "   \n%\n";
      s->expected_docs.push_back(recs[i]);
    }
    test::write_text(s->corpus_dir + "/a_fortunes", fortunes);
    // Plain file: paragraphs split on blank (or whitespace-only) lines, surrounding space trimmed.
    std::string plain = "\n\n";
    for (size_t i = 150; i < 220; ++i) {
      plain += "  " + recs[i] + (i % 3 == 0 ? "\n \t\n\n" : "\n\n");
      s->expected_docs.push_back(recs[i]);
    }
    test::write_text(s->corpus_dir + "/b_plain.txt", plain);
    // Skipped: hidden files, fortune indexes, symlinks.
    for (const char* name : {".hidden", "c.dat", "d.u8"}) {
      test::write_text(s->corpus_dir + "/" + name, "SKIPPED FILE TEXT\n%\nSKIPPED FILE TEXT 2\n");
    }
    fs::create_symlink(s->corpus_dir + "/a_fortunes", s->corpus_dir + "/e_link");
    // A file given directly, with non-ASCII text.
    s->extra_file = s->tmp.file("extra.txt");
    test::write_text(s->extra_file,
                     "Un café au lait, s'il vous plaît.\n\nNaïve résumé — 日本語.\n");
    s->expected_docs.push_back("Un café au lait, s'il vous plaît.");
    s->expected_docs.push_back("Naïve résumé — 日本語.");

    s->out_dir = s->tmp.file("ds");
    s->opt.inputs = {s->corpus_dir, s->extra_file};
    s->opt.out_dir = s->out_dir;
    s->opt.vocab_size = 400;
    s->opt.val_fraction = 0.2;
    s->opt.seed = 99;
    s->report = prepare_dataset(s->opt);
    return s;
  }();
  return *s;
}


inline const TokenDataset& shared_dataset() {
  static TokenDataset ds = TokenDataset::open(shared().out_dir);
  return ds;
}

// Does row r of `batch` equal tokens[start, start + T + 1)?
inline bool row_is_window(const torch::Tensor& batch, int64_t r, const std::vector<int32_t>& tokens,
                   int64_t start) {
  const int64_t len = batch.size(1);
  if (start < 0 || start + len > static_cast<int64_t>(tokens.size())) return false;
  const int64_t* row = batch.data_ptr<int64_t>() + r * len;
  return std::equal(row, row + len, tokens.begin() + start);
}

}  // namespace bcd::datatest
