// The parts of the tokenizer.json tokenizer (data/hf_tokenizer.h) shared by its files: UTF-8
// and Unicode helpers, regular expressions in the reference's dialects, split patterns, and the
// normalizer, pre-tokenizer, model and decoder components. Not a public header.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/utf8.h"

namespace bcd::hf {

// How far a tokenizer.json model's ids may run past its number of pieces (hf_bpe.cpp).
constexpr int64_t kMaxVocabGap = 65536;
// The time one text may take in a pre-tokenizer's pattern (Regex::find_iter): this much, plus
// this much a byte.
constexpr double kRegexSecondsPerText = 1.0;
constexpr double kRegexSecondsPerByte = 2e-6;
// The longest run of combining marks a text may hold where a normalizer runs (hf_text.cpp).
constexpr int64_t kMaxCombiningRun = 1024;

// ---- Loading: where in tokenizer.json a value is, for errors ----

// A component being read: the file and the JSON path ("pre_tokenizer.pretokenizers[1]").
struct Where {
  const std::string& file;
  std::string path;
  Where at(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  Where at(size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }
};

// One error naming the file and the component: "tokenizer.json F: pre_tokenizer (Split): ...".
[[noreturn]] void load_error(const Where& w, const std::string& what);

// A component's type: `j` must be an object with a "type" string (else one error: "a WHAT must be
// an object with a \"type\""). Returns the type and where its errors point: "PATH (TYPE)".
std::pair<std::string, Where> component_type(const nlohmann::json& j, const Where& where, const char* what);

// A component's object: its "type" (or `type` for those without one) and checked fields.
// Every key must be one the component knows: an option this code does not implement is refused,
// never ignored.
class Fields {
 public:
  Fields(const nlohmann::json& obj, Where where, std::initializer_list<const char*> known);
  const nlohmann::json* find(const char* key) const;  // null when absent or JSON null
  bool get_bool(const char* key, bool fallback) const;
  bool req_bool(const char* key) const;
  std::string get_string(const char* key, const std::string& fallback) const;
  std::string req_string(const char* key) const;
  int64_t get_int(const char* key, int64_t fallback) const;
  const nlohmann::json& req(const char* key) const;
  // A Sequence's parts: the array at `key`, each element with where it is ("KEY[i]").
  std::vector<std::pair<const nlohmann::json*, Where>> parts(const char* key) const;
  const Where& where() const { return where_; }
  [[noreturn]] void fail(const std::string& what) const { load_error(where_, what); }

 private:
  const nlohmann::json& obj_;
  Where where_;
};

// Sequences of normalizers, pre-tokenizers, decoders or post-processors nest at most this deep
// (shipped files nest none): loading and applying them recurse once a level.
constexpr int kMaxSequenceDepth = 16;
// f.fail naming the bound when the Sequence of `f` lies inside `depth` others, kMaxSequenceDepth
// or more.
void check_sequence_depth(const Fields& f, int depth);

// The one code point that option `key` holds (a Metaspace replacement, a Strip content); f.fail
// naming the key otherwise.
uint32_t one_char(const std::string& s, const Fields& f, const char* key);

// ---- UTF-8: base/utf8.h ----

// ---- Unicode predicates with Rust's meanings (utf8proc's data) ----

bool is_whitespace(uint32_t c);   // char::is_whitespace: White_Space
bool is_numeric(uint32_t c);      // char::is_numeric: Nd, Nl, No
bool is_punctuation(uint32_t c);  // is_ascii_punctuation || General_Category P*
bool is_mark(uint32_t c);         // General_Category M* (StripAccents)
// char::to_lowercase, appended (the full mapping: U+0130 lowercases to two code points).
void append_lowercase(std::string& out, uint32_t c);
// Unicode normalization forms through utf8proc.
enum class NormForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize_form(std::string_view s, NormForm form);

// ---- Regular expressions ----

struct RegexCode;  // a compiled PCRE2 pattern (JIT when available)

// A regular expression with the iteration of the reference: non-overlapping matches, leftmost
// first, an empty match allowed except right where the previous match ended (the `onig` and
// `regex` crates' find_iter).
class Regex {
 public:
  enum class Dialect {
    kOniguruma,  // tokenizer.json's patterns, compiled by the reference with Oniguruma
    kPcre2,      // our own patterns, written for PCRE2 (UTF + UCP)
  };
  Regex() = default;
  // Throws std::invalid_argument with PCRE2's message (or the translation's) when it fails.
  Regex(const std::string& pattern, Dialect dialect);
  void find_iter(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // Whether the pattern matches starting exactly at s[at] (anchored there).
  bool matches_at(std::string_view s, size_t at) const;
  bool empty() const { return !code_; }

 private:
  std::shared_ptr<const RegexCode> code_;
};

// An Oniguruma pattern (Ruby syntax, as the reference's `onig` crate compiles it) rewritten
// for PCRE2: \s, \S, \w, \W and \h keep Oniguruma's Unicode meanings, (?m) is dot-all,
// \uHHHH a code point. Throws std::invalid_argument for what it cannot carry over exactly.
std::string onig_to_pcre2(const std::string& pattern);

// ---- Split patterns (tokenizer/pattern.rs) ----

struct Span {
  size_t start, end;
  bool is_match;
};

// What Split, Replace and the character-class pre-tokenizers look for. `find_matches` covers
// the whole string with contiguous spans, each a match or not (empty matches included).
class Pattern {
 public:
  enum class Kind { kLiteral, kRegex, kWhitespace, kNumeric, kPunctuation, kChar };
  static Pattern literal(std::string s);
  static Pattern regex(Regex re);
  static Pattern chars(Kind kind, uint32_t c = 0);
  void find_matches(std::string_view s, std::vector<Span>& out) const;
  // Reads {"String": s} or {"Regex": r}; an empty string is refused (the reference's
  // empty-string pattern keeps a char-counted prefix, an offset bug).
  static Pattern from_json(const nlohmann::json& j, const Where& w);

 private:
  Kind kind_ = Kind::kLiteral;
  std::string literal_;
  Regex regex_;
  uint32_t char_ = 0;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
SplitBehavior split_behavior_from_json(const nlohmann::json& j, const Where& w);
// NormalizedString::split: the spans of `s` to keep, in order (empty ones included).
void split_spans(std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                 std::vector<std::pair<size_t, size_t>>& out);

// ---- Normalizers ----

struct Normalizer {
  enum class Kind { kNFC, kNFD, kNFKC, kNFKD, kLowercase, kStrip, kStripAccents, kPrepend, kReplace,
                    kByteLevel, kSequence };
  Kind kind = Kind::kSequence;
  bool strip_left = false, strip_right = false;
  std::string text;  // Prepend's prefix, Replace's content
  Pattern pattern;   // Replace
  std::vector<Normalizer> children;

  // `depth`: the Sequences around it (check_sequence_depth)
  static Normalizer from_json(const nlohmann::json& j, const Where& w, int depth = 0);
  // `at_origin`: whether the string's first character still stands for the first character of
  // the original text (Metaspace's prepend_scheme "first" asks).
  void apply(std::string& s, bool& at_origin) const;
};

// ---- Pre-tokenizers ----

struct PreToken {
  std::string text;
  bool at_origin;  // starts where the text did (offsets_original().0 == 0)
};

struct PreTokenizer {
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits, kWhitespace, kWhitespaceSplit,
                    kPunctuation, kBert, kSequence };
  enum class Prepend { kFirst, kNever, kAlways };
  Kind kind = Kind::kSequence;
  Pattern pattern;  // Split; Digits, Punctuation, WhitespaceSplit, Delimiter: a class of chars
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false, use_regex = true;  // ByteLevel
  std::string replacement;                          // Metaspace
  Prepend prepend = Prepend::kAlways;
  bool split = true;
  std::vector<PreTokenizer> children;

  // `depth`: the Sequences around it (check_sequence_depth)
  static PreTokenizer from_json(const nlohmann::json& j, const Where& w, int depth = 0);
  void apply(std::vector<PreToken>& pieces) const;
};

// The GPT-2 byte <-> character mapping of ByteLevel (bytes_char in byte_level.rs).
const std::array<std::string, 256>& byte_to_chars();
// The byte a character of that alphabet stands for, or -1.
int char_to_byte(uint32_t c);

// ---- Model: BPE ----

class Bpe {
 public:
  static std::unique_ptr<Bpe> from_json(const nlohmann::json& j, const Where& w);
  // Appends the ids of one pre-token (non-empty).
  void encode(std::string_view word, std::vector<int32_t>& out) const;
  int32_t id_of(std::string_view piece) const;  // -1 when absent
  const std::string* piece(int32_t id) const;    // null when absent
  size_t size() const { return vocab_.size(); }  // the reference's get_vocab_size
  int32_t max_id() const { return static_cast<int32_t>(pieces_.size()) - 1; }

 private:
  struct MergeValue {
    uint32_t rank;
    int32_t new_id;
  };
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  const MergeValue* find_merge(int32_t a, int32_t b) const;

  std::vector<std::string> pieces_;  // by id ("" where no piece has that id: has_piece_)
  std::vector<bool> has_piece_;
  std::unordered_map<std::string_view, int32_t> vocab_;  // views into pieces_
  std::unordered_map<uint64_t, MergeValue> merges_;
  std::string unk_token_;
  bool has_unk_ = false, fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  bool has_prefix_ = false, has_suffix_ = false;
  std::string prefix_, suffix_;
  std::array<int32_t, 256> byte_ids_{};  // ids of <0xNN>, -1 when missing

  // Pre-tokens seen before and their ids: shards under their own mutex, each cleared when full.
  static constexpr size_t kCacheShards = 64, kCacheShardEntries = 2048, kCacheMaxBytes = 256;
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

// ---- Decoders ----

struct Decoder {
  enum class Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip, kSequence };
  Kind kind = Kind::kSequence;
  std::string replacement;  // Metaspace
  bool prepend_never = false;
  Pattern pattern;          // Replace
  std::string content;      // Replace; Strip's char
  uint32_t strip_char = 0;
  int64_t strip_start = 0, strip_stop = 0;
  std::vector<Decoder> children;

  // `depth`: the Sequences around it (check_sequence_depth)
  static Decoder from_json(const nlohmann::json& j, const Where& w, int depth = 0);
  void apply(std::vector<std::string>& tokens) const;  // decode_chain
};

// ---- Post-processors (applied when special tokens are asked for) ----

struct PostProcessor {
  enum class Kind { kTemplate, kByteLevel, kSequence };
  struct Piece {
    bool is_sequence;          // $A
    std::vector<int32_t> ids;  // a special token's ids
  };
  Kind kind = Kind::kSequence;
  std::vector<Piece> single;  // TemplateProcessing's single template
  std::vector<PostProcessor> children;

  // `depth`: the Sequences around it (check_sequence_depth)
  static PostProcessor from_json(const nlohmann::json& j, const Where& w, int depth = 0);
  void apply(std::vector<int32_t>& ids) const;
};

}  // namespace bcd::hf
