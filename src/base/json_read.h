// The one way JSON from outside is read: every file, header and line is judged against the bounds
// of its kind (size before a byte is read, then nesting depth, string length and value count
// before nlohmann builds anything), so no hostile file can exhaust memory or the stack.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>

namespace bcd {

// The bounds of one kind of JSON input. Depth counts containers ([1] is 1 deep); values count
// every container, key and scalar.
struct JsonLimits {
  const char* kind;           // named in messages: "the limit for a tokenizer.json"
  uint64_t max_bytes;         // of the whole text (the file, the header, the line)
  int max_depth;              // nesting of arrays and objects
  uint64_t max_string_bytes;  // of one string or key, as written (escapes unexpanded)
  uint64_t max_values;        // containers, keys and scalars in all
  bool one_line;              // a JSONL line: its source names the line, places are columns
};

inline constexpr int kJsonMaxDepth = 128;  // real files: 6 (tokenizer.json), 4 (config.json)

// config.json (the model's shape), a run's summary.json: a few KiB.
inline constexpr JsonLimits kJsonConfig{"JSON config file", uint64_t{16} << 20, kJsonMaxDepth, uint64_t{1} << 20,
                                        uint64_t{1} << 20, false};
// tokenizer_config.json (chat templates, added tokens), special_tokens_map.json,
// generation_config.json, the index of safetensors shards: KiB to a few MiB (DeepSeek-V3's
// index: 9 MB).
inline constexpr JsonLimits kJsonMetadata{"JSON metadata file", uint64_t{64} << 20, kJsonMaxDepth, uint64_t{16} << 20,
                                          uint64_t{1} << 24, false};
// tokenizer.json: 2-40 MB as shipped (Llama 3: 9 MB and 0.5M values; Gemma 3: 33 MB); a
// Precompiled normalizer's charsmap is one string of 100s of KiB.
inline constexpr JsonLimits kJsonTokenizer{"tokenizer.json", uint64_t{512} << 20, kJsonMaxDepth, uint64_t{16} << 20,
                                           uint64_t{1} << 25, false};
// A safetensors header; its bytes are also the bound on the header's length field
// (st::kMaxHeaderBytes), judged before the header is read.
inline constexpr JsonLimits kJsonSafetensorsHeader{"safetensors header", uint64_t{100} << 20, kJsonMaxDepth,
                                                   uint64_t{100} << 20, uint64_t{1} << 25, false};
// The extent store's table (io/extent_store.h), written by bcdtrain: about 50 bytes and 5 values
// an extent, so 2 GiB holds 40M extents, 40 TiB of NVMe state in 1 MiB extents.
inline constexpr JsonLimits kJsonStoreTable{"extent store table", uint64_t{2} << 30, kJsonMaxDepth, uint64_t{1} << 20,
                                            uint64_t{1} << 28, false};
// A record of a JSONL data file (prepare, tokenize): a document may be long, never deep.
inline constexpr JsonLimits kJsonlRecord{"JSONL record", uint64_t{256} << 20, kJsonMaxDepth, uint64_t{256} << 20,
                                         uint64_t{1} << 24, true};
// A line of metrics.jsonl (the trainer writes a few KiB).
inline constexpr JsonLimits kJsonMetricsLine{"metrics.jsonl line", uint64_t{16} << 20, kJsonMaxDepth, uint64_t{1} << 20,
                                             uint64_t{1} << 20, true};
// A line of `tokenize --decode`: an array of token ids.
inline constexpr JsonLimits kJsonDecodeLine{"--decode line", uint64_t{64} << 20, kJsonMaxDepth, uint64_t{64} << 20,
                                            uint64_t{1} << 24, true};

// `text` parsed as nlohmann::json::parse(text, cb, allow_exceptions) parses it, once it keeps
// within `lim`: invalid JSON throws json::parse_error (or gives a discarded value when
// !allow_exceptions), so callers keep their own wording for it. A bound exceeded is a UserError
// (exit 2) naming `source` (the file, or "FILE:LINE"), the place (line and column, or column of
// a one-line kind) and the bound, whatever allow_exceptions says; so is a number past a double's
// range with exceptions (nlohmann's out_of_range, which no caller expects).
nlohmann::json parse_json(std::string_view text, const JsonLimits& lim, const std::string& source,
                          bool allow_exceptions = true, const nlohmann::json::parser_callback_t& cb = nullptr);

// The bytes of the file at `path` when it holds at most lim.max_bytes, judged by its size before
// a byte is read (a pipe or device is read up to the bound). UserError naming `what` (what the
// file is for: "HF config") and the path when it cannot be read; naming the path, its size and
// the bound when it is too big.
std::string read_json_text(const std::string& path, const JsonLimits& lim, const std::string& what);

// read_json_text, then parse_json with the path as source.
nlohmann::json read_json_file(const std::string& path, const JsonLimits& lim, const std::string& what,
                              bool allow_exceptions = true);

// The next line of `in` (its '\n' dropped) into *line; false when the input is done. A line
// longer than lim.max_bytes is a UserError naming FILE:LINE (`line_no`, the number of the line
// being read) and the bound, raised once that many bytes are read, not the whole line.
bool read_json_line(std::istream& in, std::string* line, const JsonLimits& lim, const std::string& file,
                    int64_t line_no);

}  // namespace bcd
