// Pre-tokenizers of tokenizer.json (tokenizers/src/pre_tokenizers): Split, ByteLevel, Metaspace,
// Digits, Whitespace, WhitespaceSplit, Punctuation, BertPreTokenizer and Sequence.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/hf_internal.h"

namespace bcd::hf {

using nlohmann::json;

namespace {

// GPT-2's pattern, ByteLevel's when use_regex (byte_level.rs), in Oniguruma syntax.
const Regex& gpt2_regex() {
  static const Regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                        Regex::Dialect::kOniguruma);
  return re;
}

// Whitespace's `\w+|[^\w\s]+` in the Rust regex crate, whose Unicode \w is UTS #18's
// (Alphabetic, M, Nd, Pc, Join_Control) and \s White_Space.
const Pattern& whitespace_words() {
  static const Pattern p = Pattern::regex(Regex(
      R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}\p{White_Space}]+)",
      Regex::Dialect::kPcre2));
  return p;
}

// PreTokenizedString::split with NormalizedString::split: every piece cut by `pattern`,
// empty pieces dropped.
void split_pieces(std::vector<PreToken>& pieces, const Pattern& pattern, SplitBehavior behavior, bool invert) {
  thread_local std::vector<Span> matches;
  thread_local std::vector<std::pair<size_t, size_t>> keep;
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  for (PreToken& p : pieces) {
    pattern.find_matches(p.text, matches);
    split_spans(matches, behavior, invert, keep);
    for (const auto& k : keep) {
      if (k.first == k.second) continue;
      if (k.first == 0 && k.second == p.text.size()) {
        out.push_back(std::move(p));
        break;
      }
      out.push_back({p.text.substr(k.first, k.second - k.first), p.at_origin && k.first == 0});
    }
  }
  pieces.swap(out);
}

}  // namespace

const std::array<std::string, 256>& byte_to_chars() {
  // bytes_char(): printable bytes stand for themselves, the other 68 for U+0100 onwards.
  static const std::array<std::string, 256> map = [] {
    std::array<std::string, 256> m;
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      utf8_append(m[b], printable ? b : 256 + n++);
    }
    return m;
  }();
  return map;
}

int char_to_byte(uint32_t c) {
  static const std::array<int, 512> inverse = [] {
    std::array<int, 512> inv;
    inv.fill(-1);
    const auto& m = byte_to_chars();
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      inv[utf8_next(m[b], i)] = b;
    }
    return inv;
  }();
  return c < 512 ? inverse[c] : -1;
}

PreTokenizer PreTokenizer::from_json(const json& j, const Where& where, int depth) {
  const auto [type, w] = component_type(j, where, "a pre-tokenizer");
  PreTokenizer p;
  if (type == "Split") {
    Fields f(j, w, {"type", "pattern", "behavior", "invert"});
    p.kind = Kind::kSplit;
    p.pattern = Pattern::from_json(f.req("pattern"), w.at("pattern"));
    p.behavior = split_behavior_from_json(f.req("behavior"), w.at("behavior"));
    p.invert = f.req_bool("invert");
  } else if (type == "ByteLevel") {
    // trim_offsets moves offsets only, never ids.
    Fields f(j, w, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    p.kind = Kind::kByteLevel;
    p.add_prefix_space = f.get_bool("add_prefix_space", true);
    f.get_bool("trim_offsets", true);
    p.use_regex = f.get_bool("use_regex", true);
  } else if (type == "Metaspace") {
    Fields f(j, w, {"type", "replacement", "add_prefix_space", "prepend_scheme", "split", "str_rep"});
    p.kind = Kind::kMetaspace;
    p.replacement = f.req_string("replacement");
    p.pattern = Pattern::chars(Pattern::Kind::kChar, one_char(p.replacement, f, "replacement"));
    const std::string scheme = f.get_string("prepend_scheme", "always");
    if (scheme == "first") p.prepend = Prepend::kFirst;
    else if (scheme == "never") p.prepend = Prepend::kNever;
    else if (scheme == "always") p.prepend = Prepend::kAlways;
    else f.fail(fmt::format("unknown prepend_scheme \"{}\" (expected first, never or always)", scheme));
    if (!f.get_bool("add_prefix_space", true)) {
      if (p.prepend != Prepend::kNever) f.fail("add_prefix_space does not match declared prepend_scheme");
    }
    p.split = f.get_bool("split", true);
  } else if (type == "Digits") {
    Fields f(j, w, {"type", "individual_digits"});
    p.kind = Kind::kDigits;
    p.pattern = Pattern::chars(Pattern::Kind::kNumeric);
    p.behavior = f.get_bool("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else if (type == "Whitespace" || type == "WhitespaceSplit" || type == "BertPreTokenizer") {
    Fields f(j, w, {"type"});
    p.kind = type == "Whitespace" ? Kind::kWhitespace : type == "WhitespaceSplit" ? Kind::kWhitespaceSplit : Kind::kBert;
  } else if (type == "Punctuation") {
    Fields f(j, w, {"type", "behavior"});
    p.kind = Kind::kPunctuation;
    p.pattern = Pattern::chars(Pattern::Kind::kPunctuation);
    p.behavior = f.find("behavior") ? split_behavior_from_json(f.req("behavior"), w.at("behavior"))
                                    : SplitBehavior::kIsolated;
  } else if (type == "Sequence") {
    Fields f(j, w, {"type", "pretokenizers"});
    p.kind = Kind::kSequence;
    check_sequence_depth(f, depth);
    for (const auto& [part, at] : f.parts("pretokenizers")) p.children.push_back(from_json(*part, at, depth + 1));
  } else {
    load_error(w, fmt::format("the pre-tokenizer \"{}\" is not implemented (implemented: Split, ByteLevel, "
                              "Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation, "
                              "BertPreTokenizer, Sequence)",
                              type));
  }
  return p;
}

void PreTokenizer::apply(std::vector<PreToken>& pieces) const {
  switch (kind) {
    case Kind::kSplit:
    case Kind::kDigits:
    case Kind::kPunctuation:
      split_pieces(pieces, pattern, behavior, invert);
      break;
    case Kind::kWhitespace:
      split_pieces(pieces, whitespace_words(), SplitBehavior::kRemoved, /*invert=*/true);
      break;
    case Kind::kWhitespaceSplit:
      split_pieces(pieces, Pattern::chars(Pattern::Kind::kWhitespace), SplitBehavior::kRemoved, false);
      break;
    case Kind::kBert:
      split_pieces(pieces, Pattern::chars(Pattern::Kind::kWhitespace), SplitBehavior::kRemoved, false);
      split_pieces(pieces, Pattern::chars(Pattern::Kind::kPunctuation), SplitBehavior::kIsolated, false);
      break;
    case Kind::kByteLevel: {
      if (add_prefix_space)
        for (PreToken& p : pieces)
          if (p.text[0] != ' ') p.text.insert(0, 1, ' ');
      if (use_regex) split_pieces(pieces, Pattern::regex(gpt2_regex()), SplitBehavior::kIsolated, false);
      const auto& map = byte_to_chars();
      std::string out;
      for (PreToken& p : pieces) {
        out.clear();
        for (unsigned char c : p.text) out += map[c];
        p.text.swap(out);
      }
      break;
    }
    case Kind::kMetaspace: {
      std::string out;
      for (PreToken& p : pieces) {
        out.clear();
        for (char c : p.text) {
          if (c == ' ') out += replacement;
          else out += c;
        }
        const bool starts = out.compare(0, replacement.size(), replacement) == 0;
        if (!starts && (prepend == Prepend::kAlways || (prepend == Prepend::kFirst && p.at_origin)))
          out.insert(0, replacement);
        p.text.swap(out);
      }
      if (split) split_pieces(pieces, pattern, SplitBehavior::kMergedWithNext, false);
      break;
    }
    case Kind::kSequence:
      for (const PreTokenizer& c : children) {
        c.apply(pieces);
        if (pieces.empty()) break;
      }
      break;
  }
}

}  // namespace bcd::hf
