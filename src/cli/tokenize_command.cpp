// tokenize: a file's texts as token ids (one JSON array a line), or ids back to text (--decode),
// with any tokenizer bcdtrain reads: to see what prepare will train on, or to check a tokenizer.
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_read.h"
#include "base/printable.h"
#include "base/stop.h"
#include "cli/command.h"
#include "cli/flags.h"
#include "data/tokenizer.h"

namespace bcd::cli {
namespace {

using nlohmann::json;

bool is_blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

// "FILE:LINE: what", what escaped (a line may hold anything).
[[noreturn]] void line_error(const std::string& file, int64_t line, const std::string& what) {
  user_error("{}:{}: {}", file, line, printable_line(what));
}

// The ids as Python's json.dumps writes a list: "[1, 2, 3]".
void print_ids(const std::vector<int>& ids, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out->append(", ");
    fmt::format_to(std::back_inserter(*out), "{}", ids[i]);
  }
  out->append("]\n");
}

// The ids of a --decode line: a JSON array of integers within the vocabulary.
std::vector<int> parse_ids(const std::string& text, const std::string& file, int64_t line, int vocab) {
  const json j = parse_json(text, kJsonDecodeLine, fmt::format("{}:{}", file, line), /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array())
    line_error(file, line, fmt::format("not a JSON array of token ids: {}", shorten_line(text, 80)));
  std::vector<int> ids;
  ids.reserve(j.size());
  for (const json& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      line_error(file, line,
                 fmt::format("token {} of the array is {}; expected an id from 0 to {}", ids.size() + 1,
                             shorten_line(v.dump(), 40), vocab - 1));
    ids.push_back(v.get<int>());
  }
  return ids;
}

}  // namespace

Command add_tokenize(CLI::App& app) {
  struct Flags {
    std::string tokenizer, input;
    bool add_special = false, decode = false;
  };
  auto f = std::make_shared<Flags>();
  auto* sub = app.add_subcommand(
      "tokenize", "token ids of each line of a file (JSONL {\"text\"} records or plain text), or --decode them");
  sub->add_option("--tokenizer", f->tokenizer,
                  "a tokenizer.json, a sentencepiece tokenizer.model, or a Hugging Face model directory")
      ->required()
      ->transform(existing_path("a tokenizer.json, tokenizer.model or Hugging Face directory"));
  sub->add_option("--input", f->input,
                  "JSONL with a \"text\" string a line, or plain text (a document a line); with --decode, a JSON "
                  "array of ids a line")
      ->required()
      ->transform(existing_file("a file"));
  sub->add_flag("--add-special", f->add_special, "add the tokenizer's special tokens (BOS ...) around each text");
  sub->add_flag("--decode", f->decode, "read arrays of ids, print each as a JSON string (special tokens kept)");
  auto run = [f](const Overrides&) {
    if (f->decode && f->add_special) user_error("tokenize: --add-special encodes; it does not go with --decode");
    const Tokenizer tok = Tokenizer::load(f->tokenizer);
    std::ifstream in(f->input, std::ios::binary);
    if (!in) user_error("{}: cannot open ({})", f->input, std::strerror(errno));
    std::string line, out;
    int64_t line_no = 0;
    const JsonLimits& limits = f->decode ? kJsonDecodeLine : kJsonlRecord;  // plain text lines too
    int jsonl = -1;  // decided by the first non-blank line: a JSON object there makes the file JSONL
    auto flush = [&](bool always) {
      if (!always && out.size() < (1 << 16)) return;
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    };
    while (read_json_line(in, &line, limits, f->input, line_no + 1)) {
      check_stop();
      ++line_no;
      if (f->decode) {
        if (is_blank(line)) continue;
        const std::string text = tok.decode(parse_ids(line, f->input, line_no, tok.vocab_size()));
        out += json(text).dump(-1, ' ', false, json::error_handler_t::replace);
        out.push_back('\n');
        flush(false);
        continue;
      }
      const std::string source = fmt::format("{}:{}", f->input, line_no);
      if (jsonl < 0 && !is_blank(line)) {  // only a line that may be an object is judged as JSON
        const bool object = line[line.find_first_not_of(" \t\r\n\f\v")] == '{';
        const json j = object ? parse_json(line, kJsonlRecord, source, /*allow_exceptions=*/false) : json();
        jsonl = object && !j.is_discarded() && j.is_object();
      }
      std::string text;
      if (jsonl == 1) {
        if (is_blank(line)) continue;
        const json j = parse_json(line, kJsonlRecord, source, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object())
          line_error(f->input, line_no, "not a JSON object; the file is JSONL (its first record is one): expected "
                                        "{\"text\": string}");
        auto it = j.find("text");
        if (it == j.end() || !it->is_string())
          line_error(f->input, line_no,
                     it == j.end() ? std::string("the record has no \"text\"; expected a string there")
                                   : fmt::format("\"text\" is a JSON {}; expected a string", it->type_name()));
        text = it->get<std::string>();
      } else {
        text = line;
      }
      try {
        print_ids(f->add_special ? tok.encode_special(text) : tok.encode(text), &out);
      } catch (const UserError& e) {
        line_error(f->input, line_no, e.what());
      }
      flush(false);
    }
    if (in.bad()) user_error("{}: cannot read ({})", f->input, std::strerror(errno));
    flush(true);
    std::fflush(stdout);
    return 0;
  };
  return {sub, run, false, {}};
}

}  // namespace bcd::cli
