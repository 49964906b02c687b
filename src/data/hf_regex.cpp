// Regular expressions of the tokenizer.json tokenizer (PCRE2; Oniguruma patterns translated),
// and the split patterns and behaviours of the reference (tokenizers/src/tokenizer/pattern.rs,
// NormalizedString::split in normalizer.rs).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/error.h"
#include "data/hf_internal.h"

namespace bcd::hf {

using nlohmann::json;

// ---- Regular expressions ----

struct RegexCode {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string pattern;  // as the tokenizer gives it, for messages
  ~RegexCode() { pcre2_code_free(code); }
};

namespace {

// Per thread: match data (any pattern may use it) and a JIT stack larger than the default
// 32 KiB, so long runs of one class (a megabyte of spaces) never hit the JIT's limit.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(16, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
  MatchScratch() {
    BCD_CHECK(data && context && stack, "PCRE2 out of memory");
    pcre2_jit_stack_assign(context, nullptr, stack);
    // One match's work, bounded (PCRE2's defaults, said here): backtracking steps and nesting.
    pcre2_set_match_limit(context, 10'000'000);
    pcre2_set_depth_limit(context, 10'000'000);
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

// pcre2_match on already validated UTF-8: the start of the match at or after `from`, or false.
bool match_once(const RegexCode& rc, std::string_view s, size_t from, uint32_t options, size_t* start,
                size_t* end) {
  MatchScratch& ms = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  options |= PCRE2_NO_UTF_CHECK;
  // The JIT fast path ignores PCRE2_ANCHORED: anchored searches take the interpreter.
  const bool jit = rc.jit && !(options & PCRE2_ANCHORED);
  const int rc_match = jit ? pcre2_jit_match(rc.code, subject, s.size(), from, options, ms.data, ms.context)
                              : pcre2_match(rc.code, subject, s.size(), from, options, ms.data, ms.context);
  if (rc_match == PCRE2_ERROR_NOMATCH) return false;
  if (rc_match < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc_match, msg, sizeof msg);
    throw UserError(fmt::format("the tokenizer's pattern {} failed on a text of {} bytes: {}",
                                nlohmann::json(rc.pattern).dump(), s.size(), reinterpret_cast<const char*>(msg)));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
  *start = ov[0];
  *end = ov[1];
  return true;
}

}  // namespace

Regex::Regex(const std::string& pattern, Dialect dialect) {
  const std::string p = dialect == Dialect::kOniguruma ? onig_to_pcre2(pattern) : pattern;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  BCD_CHECK(cc, "PCRE2 out of memory");
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  // Oniguruma's ^ and $ are line anchors (Ruby syntax), its dot stops at \n only.
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (dialect == Dialect::kOniguruma) options |= PCRE2_MULTILINE;
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), options, &err, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::invalid_argument(fmt::format("PCRE2 cannot compile {} (from {}) at offset {}: {}",
                                            nlohmann::json(p).dump(), nlohmann::json(pattern).dump(), offset,
                                            reinterpret_cast<const char*>(msg)));
  }
  auto rc = std::make_shared<RegexCode>();
  rc->code = code;
  // A pattern may forbid the JIT ((*NO_JIT)): pcre2_jit_compile then succeeds with no code, and
  // pcre2_jit_match would fail every match. The interpreter takes such a pattern.
  size_t jit_size = 0;
  rc->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0 &&
            pcre2_pattern_info(code, PCRE2_INFO_JITSIZE, &jit_size) == 0 && jit_size > 0;
  rc->pattern = pattern;
  code_ = std::move(rc);
}

void Regex::find_iter(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  size_t from = 0, start, end;
  bool have_last = false;
  size_t last_end = 0;
  // The whole text's work, bounded too: a pattern that scans to the end of the text from every
  // position ([ab]*c|a on a megabyte of "a") is quadratic, each match within PCRE2's limit. The
  // budget is far above any tokenizer's pace on text (about a microsecond a byte here).
  using Clock = std::chrono::steady_clock;
  const auto budget = std::chrono::duration<double>(kRegexSecondsPerText + kRegexSecondsPerByte * static_cast<double>(s.size()));
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(budget);
  size_t matches = 0;
  while (from <= s.size() && match_once(*code_, s, from, 0, &start, &end)) {
    if (++matches % 64 == 0 && Clock::now() > deadline)
      throw UserError(fmt::format("the tokenizer's pattern {} took more than {:.1f} s on a text of {} bytes (it "
                                  "searches the rest of the text again from every position); the text is refused",
                                  nlohmann::json(code_->pattern).dump(), budget.count(), s.size()));
    if (start == end && have_last && last_end == end) {
      // An empty match right where the last one ended: step one character and search again.
      from += from < s.size() ? utf8_len(static_cast<unsigned char>(s[from])) : 1;
      continue;
    }
    out.emplace_back(start, end);
    from = end;
    last_end = end;
    have_last = true;
  }
}

bool Regex::matches_at(std::string_view s, size_t at) const {
  size_t start, end;
  return match_once(*code_, s, at, PCRE2_ANCHORED, &start, &end);
}

std::string onig_to_pcre2(const std::string& p) {
  // Oniguruma's Unicode classes (doc/RE): \s is White_Space, \w is L|M|N|Pc, \h a hex digit.
  static const char* kSpace = "\\p{White_Space}";
  static const char* kNotSpace = "\\P{White_Space}";
  static const char* kWord = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) throw std::invalid_argument("pattern ends with a lone backslash");
      const char e = p[++i];
      switch (e) {
        case 's': out += in_class ? kSpace : std::string("[") + kSpace + "]"; break;
        case 'S': out += in_class ? kNotSpace : std::string("[") + kNotSpace + "]"; break;
        case 'w': out += in_class ? std::string(kWord) : std::string("[") + kWord + "]"; break;
        case 'W':
          if (in_class) throw std::invalid_argument("\\W inside a character class is not supported");
          out += std::string("[^") + kWord + "]";
          break;
        case 'h': out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
        case 'H':
          if (in_class) throw std::invalid_argument("\\H inside a character class is not supported");
          out += "[^0-9a-fA-F]";
          break;
        case 'u': {
          if (i + 4 >= p.size()) throw std::invalid_argument("truncated \\u escape");
          const std::string hex = p.substr(i + 1, 4);
          if (hex.size() != 4 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            throw std::invalid_argument("\\u must be followed by four hex digits");
          out += "\\x{" + hex + "}";
          i += 4;
          break;
        }
        default: out += '\\'; out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && i > class_start) {
        in_class = false;
      } else if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]: same in both
          const size_t close = p.find(":]", i + 2);
          if (close == std::string::npos) throw std::invalid_argument("unterminated POSIX class");
          out.append(p, i, close + 2 - i);
          i = close + 1;
          continue;
        }
        throw std::invalid_argument("nested character classes are not supported");
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        throw std::invalid_argument("character class intersection (&&) is not supported");
      }
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // Option groups (?imx-imx) and (?imx-imx:...): Oniguruma's m is PCRE2's s (dot-all).
      size_t k = i + 2;
      std::string flags;
      while (k < p.size() && std::string("imx-").find(p[k]) != std::string::npos) flags += p[k++];
      if (!flags.empty() && k < p.size() && (p[k] == ')' || p[k] == ':')) {
        for (char& f : flags)
          if (f == 'm') f = 's';
        out += "(?" + flags + p[k];
        i = k;
        continue;
      }
      if (k < p.size() && std::isalpha(static_cast<unsigned char>(p[k])) && p[k] != 'P')
        throw std::invalid_argument(fmt::format("the inline option '{}' is not supported", p[k]));
    }
    out += c;
  }
  if (in_class) throw std::invalid_argument("unterminated character class");
  return out;
}

// ---- Split patterns ----

Pattern Pattern::literal(std::string s) {
  Pattern p;
  p.kind_ = Kind::kLiteral;
  p.literal_ = std::move(s);
  return p;
}

Pattern Pattern::regex(Regex re) {
  Pattern p;
  p.kind_ = Kind::kRegex;
  p.regex_ = std::move(re);
  return p;
}

Pattern Pattern::chars(Kind kind, uint32_t c) {
  Pattern p;
  p.kind_ = kind;
  p.char_ = c;
  return p;
}

Pattern Pattern::from_json(const json& j, const Where& w) {
  if (!j.is_object() || j.size() != 1 || !j.begin()->is_string())
    load_error(w, fmt::format("a pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, found {}", j.dump()));
  const std::string key = j.begin().key(), value = j.begin()->get<std::string>();
  if (key == "String") {
    if (value.empty()) load_error(w, "an empty String pattern is not supported");
    return literal(value);
  }
  if (key != "Regex") load_error(w, fmt::format("unknown pattern kind \"{}\" (expected String or Regex)", key));
  try {
    return regex(Regex(value, Regex::Dialect::kOniguruma));
  } catch (const std::invalid_argument& e) {
    load_error(w, fmt::format("regex {}: {}", nlohmann::json(value).dump(), e.what()));
  }
}

void Pattern::find_matches(std::string_view s, std::vector<Span>& out) const {
  out.clear();
  if (s.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  if (kind_ == Kind::kLiteral || kind_ == Kind::kRegex) {
    size_t prev = 0;
    auto add = [&](size_t start, size_t end) {
      if (prev != start) out.push_back({prev, start, false});
      out.push_back({start, end, true});
      prev = end;
    };
    if (kind_ == Kind::kLiteral) {
      for (size_t at = s.find(literal_); at != std::string_view::npos; at = s.find(literal_, at + literal_.size()))
        add(at, at + literal_.size());
    } else {
      thread_local std::vector<std::pair<size_t, size_t>> found;
      regex_.find_iter(s, found);
      for (const auto& m : found) add(m.first, m.second);
    }
    if (prev != s.size()) out.push_back({prev, s.size(), false});
    return;
  }
  // A predicate on characters: each matching character is a match of its own.
  size_t last = 0, i = 0;
  while (i < s.size()) {
    const size_t b = i;
    const uint32_t c = utf8_next(s, i);
    bool hit = false;
    switch (kind_) {
      case Kind::kWhitespace: hit = is_whitespace(c); break;
      case Kind::kNumeric: hit = is_numeric(c); break;
      case Kind::kPunctuation: hit = is_punctuation(c); break;
      case Kind::kChar: hit = c == char_; break;
      default: break;
    }
    if (hit) {
      if (last < b) out.push_back({last, b, false});
      out.push_back({b, i, true});
      last = i;
    }
  }
  if (s.size() > last) out.push_back({last, s.size(), false});
}

SplitBehavior split_behavior_from_json(const json& j, const Where& w) {
  const std::string s = j.is_string() ? j.get<std::string>() : j.dump();
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  load_error(w, fmt::format("unknown behavior {} (expected Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext or Contiguous)", s));
}

void split_spans(std::vector<Span>& m, SplitBehavior behavior, bool invert,
                 std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  if (invert)
    for (Span& s : m) s.is_match = !s.is_match;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : m) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : m)
        if (!s.is_match) out.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const Span& s : m) {
        if (s.is_match == previous && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.start, s.end);
        previous = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const Span& s : m) {
        if (s.is_match && !previous && !out.empty()) out.back().second = s.end;
        else out.emplace_back(s.start, s.end);
        previous = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (size_t k = m.size(); k-- > 0;) {
        const Span& s = m[k];
        if (s.is_match && !previous && !out.empty()) out.back().first = s.start;
        else out.emplace_back(s.start, s.end);
        previous = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
}

}  // namespace bcd::hf
