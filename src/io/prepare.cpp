// Token datasets: text files -> documents -> train/val split -> token ids in <dir>/tokens.h5,
// written through a temporary directory and a rename; and TokenDataset::open, which checks
// everything the loader later relies on (offsets, id range) so bad files fail at startup.
#include "io/prepare.h"

#include <H5Cpp.h>
#include <tbb/parallel_for.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>
#include <system_error>

#include "io/chat.h"
#include "io/h5_util.h"
#include "io/tokenizer.h"
#include "base/bytes.h"
#include "base/files.h"
#include "base/error.h"
#include "base/progress.h"

namespace bcd {

namespace fs = std::filesystem;

namespace {

using h5::kFormatVersion;
using h5::kTokenizerFile;
using h5::kTokensFile;
using h5::quiet_hdf5;
using h5::rethrow_hdf5;
using h5::write_attr;

// ---- Reading inputs ----

// Directories contribute their plain files, sorted by name; fortune-style indexes (.dat, .u8),
// hidden files and symlinks are skipped so `/usr/share/games/fortunes` works as is.
std::vector<fs::path> list_input_files(const std::vector<std::string>& inputs) {
  if (inputs.empty()) user_error("prepare: no inputs given (expected files or directories)");
  std::vector<fs::path> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(input, ec);
    if (!fs::exists(st))
      user_error("input {} does not exist (expected a file or directory)", input);
    if (fs::is_regular_file(st)) {
      files.emplace_back(input);
      continue;
    }
    if (!fs::is_directory(st)) {
      user_error("input {} is neither a regular file nor a directory", input);
    }
    std::vector<fs::path> found;
    for (const fs::directory_entry& e : fs::directory_iterator(input, ec)) {
      std::string name = e.path().filename().string();
      if (name.empty() || name[0] == '.') continue;
      auto ends_with = [&](std::string_view suffix) {
        return name.size() >= suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
      };
      if (ends_with(".dat") || ends_with(".u8")) continue;
      std::error_code ec2;
      if (e.is_symlink(ec2) || !e.is_regular_file(ec2)) continue;
      found.push_back(e.path());
    }
    if (ec) user_error("cannot list input directory {}: {}", input, ec.message());
    std::sort(found.begin(), found.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty()) {
    user_error(
        "prepare: the inputs hold no plain files (hidden, .dat, .u8 and symlinked files "
        "in directories are skipped)");
  }
  return files;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

// Lines of `text` as views, without their '\n'.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    lines.push_back(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
  return lines;
}

bool is_percent_line(std::string_view line) { return line == "%" || line == "%\r"; }

// Documents of one file, trimmed, empty ones dropped. A line holding only "%" anywhere makes
// it a fortune file (records between such lines); otherwise blank lines separate paragraphs.
void split_documents(std::string_view text, std::vector<std::string>* docs) {
  std::vector<std::string_view> lines = split_lines(text);
  const bool fortune = std::any_of(lines.begin(), lines.end(), is_percent_line);
  auto is_separator = [&](std::string_view line) {
    return fortune ? is_percent_line(line) : trim(line).empty();
  };
  const char* begin = nullptr;  // start of the current document within `text`
  const char* end = nullptr;    // end of its last line
  auto flush = [&] {
    if (begin) {
      std::string_view doc = trim(std::string_view(begin, static_cast<size_t>(end - begin)));
      if (!doc.empty()) docs->emplace_back(doc);
    }
    begin = end = nullptr;
  };
  for (std::string_view line : lines) {
    if (is_separator(line)) {
      flush();
    } else {
      if (!begin) begin = line.data();
      end = line.data() + line.size();
    }
  }
  flush();
}

// A document: plain text (no pieces: all of it, and its EOS, are targets) or an instruction
// record as its chat template lays it out (the pieces end with an EOS).
struct Document {
  std::string text;               // what trains a tokenizer (and decides the split of plain text)
  std::vector<ChatPiece> pieces;  // instruction records only
  // Instruction records: what decides the split, the record's roles and contents, so a record
  // is held out or trained on whichever template lays it out.
  std::string split_key;
};

// ---- Train/validation split ----

// Uniform in [0, 1) from the document text: the split depends on content only, so duplicates
// land together and re-running prepare (or adding files) never moves a document across.
double split_key(const std::string& doc, uint64_t seed) {
  return static_cast<double>(XXH64(doc.data(), doc.size(), seed) >> 11) * 0x1.0p-53;
}

// Sets is_val[i]; guarantees both splits non-empty by moving the extreme documents over.
std::vector<char> assign_splits(const std::vector<Document>& docs, double val_fraction,
                                uint64_t seed) {
  std::vector<double> key(docs.size());
  tbb::parallel_for(size_t{0}, docs.size(), [&](size_t i) { key[i] = split_key(docs[i].pieces.empty() ? docs[i].text : docs[i].split_key, seed); });
  std::vector<char> is_val(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) is_val[i] = key[i] < val_fraction;
  size_t n_val = static_cast<size_t>(std::count(is_val.begin(), is_val.end(), 1));
  if (n_val == 0) {
    double lo = *std::min_element(key.begin(), key.end());
    for (size_t i = 0; i < docs.size(); ++i) is_val[i] |= key[i] == lo;
  } else if (n_val == docs.size()) {
    double hi = *std::max_element(key.begin(), key.end());
    for (size_t i = 0; i < docs.size(); ++i) is_val[i] &= key[i] != hi;
  }
  n_val = static_cast<size_t>(std::count(is_val.begin(), is_val.end(), 1));
  if (n_val == 0 || n_val == docs.size()) {
    user_error(
        "prepare: the {} documents are all identical, so they cannot be split into "
        "train and validation (expected at least 2 distinct documents)",
        docs.size());
  }
  return is_val;
}

// ---- Tokenizing ----

struct SplitTokens {
  std::vector<uint32_t> tokens;       // documents concatenated, each ended by EOS
  std::vector<uint64_t> doc_offsets;  // [n_docs + 1]
  std::vector<uint8_t> mask;          // per token, instruction data only (else empty)
};

// `masked`: the dataset stores loss masks (some input was instruction data).
SplitTokens encode_split(const Tokenizer& tok, const std::vector<const Document*>& docs, int eos_id, bool masked,
                         Progress& progress) {
  std::vector<MaskedTokens> enc(docs.size());
  tbb::parallel_for(size_t{0}, docs.size(), [&](size_t i) {
    const Document& d = *docs[i];
    if (!d.pieces.empty()) {
      enc[i] = tokenize_chat(d.pieces, tok);
    } else {
      enc[i].ids = tok.encode(d.text);
      enc[i].ids.push_back(eos_id);
      if (masked) enc[i].target.assign(enc[i].ids.size(), 1);
    }
    progress.add();  // an atomic count, from tbb's threads
  });
  SplitTokens out;
  out.doc_offsets.reserve(docs.size() + 1);
  out.doc_offsets.push_back(0);
  size_t total = 0;
  for (const MaskedTokens& e : enc) total += e.ids.size();
  out.tokens.reserve(total);
  if (masked) out.mask.reserve(total);
  for (const MaskedTokens& e : enc) {
    out.tokens.insert(out.tokens.end(), e.ids.begin(), e.ids.end());
    if (masked) out.mask.insert(out.mask.end(), e.target.begin(), e.target.end());
    out.doc_offsets.push_back(out.tokens.size());
  }
  return out;
}

int64_t count_targets(const SplitTokens& s) {
  return s.mask.empty() ? static_cast<int64_t>(s.tokens.size()) : std::count(s.mask.begin(), s.mask.end(), uint8_t{1});
}

// Add-one smoothed unigram fit on train, mean NLL (nats/token) on val: the loss a model that
// learned only token frequencies would reach; a real run's val loss should get well below it.
// Instruction data: over the targets the loss counts, on both sides.
double unigram_loss(const SplitTokens& train, const SplitTokens& val, int vocab_size) {
  std::vector<uint64_t> count_train(static_cast<size_t>(vocab_size)), count_val(count_train);
  for (size_t i = 0; i < train.tokens.size(); ++i)
    if (train.mask.empty() || train.mask[i]) ++count_train[train.tokens[i]];
  for (size_t i = 0; i < val.tokens.size(); ++i)
    if (val.mask.empty() || val.mask[i]) ++count_val[val.tokens[i]];
  const auto n_train = static_cast<double>(count_targets(train));
  const auto n_val = static_cast<double>(count_targets(val));
  const double log_denom = std::log(n_train + vocab_size);
  double nll = 0;
  for (size_t t = 0; t < count_val.size(); ++t) {
    if (count_val[t]) {
      nll += static_cast<double>(count_val[t]) *
             (log_denom - std::log(static_cast<double>(count_train[t]) + 1.0));
    }
  }
  return n_val == 0 ? 0.0 : nll / n_val;
}

// ---- HDF5 ----


void write_split(H5::H5File& file, Split s, const SplitTokens& st, bool wide) {
  H5::Group g = file.createGroup(std::string("/") + split_name(s));
  hsize_t n_tok = st.tokens.size(), n_off = st.doc_offsets.size();
  // every split holds >= 1 document and so >= 1 token (its EOS): no zero-size datasets
  BCD_CHECK(n_tok > 0 && n_off > 1);
  if (wide) {
    g.createDataSet("tokens", H5::PredType::STD_U32LE, H5::DataSpace(1, &n_tok))
        .write(st.tokens.data(), H5::PredType::NATIVE_UINT32);
  } else {
    std::vector<uint16_t> narrow(st.tokens.begin(), st.tokens.end());
    g.createDataSet("tokens", H5::PredType::STD_U16LE, H5::DataSpace(1, &n_tok))
        .write(narrow.data(), H5::PredType::NATIVE_UINT16);
  }
  g.createDataSet("doc_offsets", H5::PredType::STD_U64LE, H5::DataSpace(1, &n_off))
      .write(st.doc_offsets.data(), H5::PredType::NATIVE_UINT64);
  if (!st.mask.empty()) {
    BCD_CHECK(st.mask.size() == st.tokens.size());
    g.createDataSet("loss_mask", H5::PredType::STD_U8LE, H5::DataSpace(1, &n_tok))
        .write(st.mask.data(), H5::PredType::NATIVE_UINT8);
  }
}

// ---- Atomic output directory ----

// The temporary directory is removed unless commit() moved it into place.
class StagingDir {
 public:
  explicit StagingDir(fs::path target)
      : target_(std::move(target)), path_(target_.string() + ".tmp-" + std::to_string(::getpid())) {
    std::error_code ec;
    fs::remove_all(path_, ec);  // a leftover of an earlier crashed run with our pid
    fs::create_directories(path_, ec);
    if (ec) user_error("cannot create directory {}: {}", path_.string(), ec.message());
  }
  ~StagingDir() {
    if (!committed_) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  const fs::path& path() const { return path_; }

  // Moves the staging dir to the target; an existing target (force) is renamed aside first and
  // deleted only after the new one is in place, so some complete dataset is always there.
  void commit(bool force) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(target_))) {
      if (!force) {
        user_error("output directory {} already exists (pass --force to replace it)",
                   target_.string());
      }
      fs::path old = target_.string() + ".old-" + std::to_string(::getpid());
      fs::remove_all(old, ec);
      fs::rename(target_, old, ec);
      if (ec) user_error("cannot move the existing {} aside: {}", target_.string(), ec.message());
      fs::rename(path_, target_, ec);
      if (ec) {
        std::error_code ec2;
        fs::rename(old, target_, ec2);
        user_error("cannot move {} into place at {}: {}", path_.string(), target_.string(),
                   ec.message());
      }
      committed_ = true;
      fs::remove_all(old, ec);
      return;
    }
    fs::rename(path_, target_, ec);
    if (ec) {
      user_error("cannot move {} into place at {}: {}", path_.string(), target_.string(),
                 ec.message());
    }
    committed_ = true;
  }

 private:
  fs::path target_, path_;
  bool committed_ = false;
};

std::string hex_xxh64(const std::string& bytes) {
  return fmt::format("{:016x}", XXH64(bytes.data(), bytes.size(), 0));
}

}  // namespace

// ---- prepare ----

PrepareReport prepare_dataset(const PrepareOptions& opt) {
  if (opt.out_dir.empty()) user_error("prepare: no output directory given");
  fs::path out = fs::path(opt.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // "data/" -> "data"
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out, ec)) && !opt.force) {
    user_error("output directory {} already exists (pass --force to replace it)", out.string());
  }
  if (!(opt.val_fraction >= 0.0 && opt.val_fraction < 1.0)) {
    user_error("prepare: val_fraction is {}, expected a value in [0, 1)", opt.val_fraction);
  }
  if (opt.tokenizer_model.empty() && opt.vocab_size <= 0) {
    user_error("prepare: vocab_size is {}, expected a positive number", opt.vocab_size);
  }

  // Documents, in input order.
  PrepareReport report;
  const ChatTemplate chat = chat_template_from_name(opt.chat_template);
  std::vector<Document> docs;
  const std::vector<fs::path> files = list_input_files(opt.inputs);
  Progress reading("reading inputs", files.size(), "files");
  for (const fs::path& f : files) {
    if (f.extension() == ".jsonl") {
      for (const ChatRecord& r : read_chat_jsonl(f.string(), opt.skip_bad, &report.n_bad_records)) {
        Document d;
        d.pieces = render_chat(r, chat);
        for (const ChatPiece& p : d.pieces) d.text += p.text;
        for (const ChatMessage& m : r.messages) d.split_key += m.role + '\x1f' + m.content + '\x1e';
        docs.push_back(std::move(d));
      }
      report.instruct = true;
    } else {
      std::vector<std::string> texts;
      split_documents(read_file(f.string(), "input file"), &texts);
      for (std::string& t : texts) docs.push_back(Document{std::move(t), {}, {}});
    }
    report.sources.push_back(f.string());
    reading.add();
  }
  reading.finish();
  if (docs.size() < 2) {
    user_error(
        "prepare: the inputs hold {} non-empty document(s), expected at least 2 "
        "(one for train, one for validation)",
        docs.size());
  }
  std::vector<char> is_val = assign_splits(docs, opt.val_fraction, opt.seed);
  std::vector<const Document*> train_docs, val_docs;
  for (size_t i = 0; i < docs.size(); ++i) (is_val[i] ? val_docs : train_docs).push_back(&docs[i]);

  fs::create_directories(out.parent_path().empty() ? fs::path(".") : out.parent_path(), ec);
  StagingDir staging(out);
  const fs::path model_path = staging.path() / kTokenizerFile;

  // Tokenizer: trained on the train split only, so validation stays unseen.
  if (opt.tokenizer_model.empty()) {
    Progress training(fmt::format("training the tokenizer (BPE, vocabulary {})", opt.vocab_size));
    std::vector<std::string> texts;
    texts.reserve(train_docs.size());
    for (const Document* d : train_docs) texts.push_back(d->text);
    Tokenizer::train_bpe(texts, opt.vocab_size, model_path.string());
  } else {
    Tokenizer::load(opt.tokenizer_model);  // validates before we copy it
    fs::copy_file(opt.tokenizer_model, model_path, ec);
    if (ec) {
      user_error("cannot copy tokenizer {} to {}: {}", opt.tokenizer_model, model_path.string(),
                 ec.message());
    }
  }
  Tokenizer tok = Tokenizer::load(model_path.string());
  const int vocab = tok.vocab_size();
  if (tok.eos_id() < 0) {
    user_error(
        "tokenizer {} has no end-of-sequence piece (expected eos_id >= 0; documents "
        "are separated by EOS)",
        opt.tokenizer_model.empty() ? model_path.string() : opt.tokenizer_model);
  }

  Progress encoding("tokenizing", docs.size(), "documents");
  SplitTokens train = encode_split(tok, train_docs, tok.eos_id(), report.instruct, encoding);
  SplitTokens val = encode_split(tok, val_docs, tok.eos_id(), report.instruct, encoding);
  encoding.finish();
  const bool wide = vocab > 65536;

  report.n_docs_train = static_cast<int64_t>(train_docs.size());
  report.n_docs_val = static_cast<int64_t>(val_docs.size());
  report.n_tokens_train = static_cast<int64_t>(train.tokens.size());
  report.n_tokens_val = static_cast<int64_t>(val.tokens.size());
  report.vocab_size = vocab;
  report.n_targets_train = count_targets(train);
  report.n_targets_val = count_targets(val);
  report.unigram_val_loss = unigram_loss(train, val, vocab);

  std::string sources;
  for (const std::string& s : report.sources) sources += (sources.empty() ? "" : "\n") + s;

  const std::string h5_path = (staging.path() / kTokensFile).string();
  // A full file system is refused here, before HDF5 writes: a write failing inside HDF5 leaves
  // a file it may crash on when closing. Contiguous datasets: payload plus a MiB for metadata.
  const uint64_t need = (train.tokens.size() + val.tokens.size()) * (wide ? 4 : 2) + train.mask.size() + val.mask.size() +
                        (train.doc_offsets.size() + val.doc_offsets.size()) * 8 + (uint64_t{1} << 20);
  struct statvfs sv {};
  if (::statvfs(staging.path().c_str(), &sv) == 0 &&
      static_cast<uint64_t>(sv.f_bavail) * static_cast<uint64_t>(sv.f_frsize) < need)
    user_error("prepare: {}: {} free, the dataset needs about {} (No space left on device); nothing was written",
               opt.out_dir, format_bytes(static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize), format_bytes(need));
  quiet_hdf5();
  Progress writing(std::string("writing ") + kTokensFile, need, "B");  // done at the commit below
  try {
    H5::H5File file(h5_path, H5F_ACC_EXCL);
    write_split(file, Split::kTrain, train, wide);
    write_split(file, Split::kVal, val, wide);
    write_attr(file, "format_version", kFormatVersion);
    write_attr(file, "vocab_size", int64_t{vocab});
    write_attr(file, "bos_id", int64_t{tok.bos_id()});
    write_attr(file, "eos_id", int64_t{tok.eos_id()});
    write_attr(file, "tokenizer", std::string(kTokenizerFile));
    write_attr(file, "tokenizer_xxh64", hex_xxh64(read_file(model_path.string(), "tokenizer model")));
    write_attr(file, "val_fraction", opt.val_fraction);
    write_attr(file, "seed", opt.seed);
    write_attr(file, "sources", sources);
    write_attr(file, "unigram_val_loss", report.unigram_val_loss);
    if (report.instruct) write_attr(file, "chat_template", std::string(chat_template_name(chat)));
    file.close();
    writing.set(need);
  } catch (const H5::Exception& e) {
    rethrow_hdf5(e, h5_path, "cannot write dataset file");
  }

  staging.commit(opt.force);
  return report;
}

}  // namespace bcd
