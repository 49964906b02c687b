// Text machinery of the tokenizer.json tokenizer: load errors and checked fields, UTF-8, and the
// Unicode predicates, case mapping and normalization forms the reference uses (through utf8proc).
#include <utf8proc.h>

#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data/hf_internal.h"

namespace bcd::hf {

using nlohmann::json;

// ---- Loading ----

void load_error(const Where& w, const std::string& what) {
  user_error("tokenizer.json {}: {}: {}", w.file, w.path.empty() ? "top level" : w.path, what);
}

std::pair<std::string, Where> component_type(const json& j, const Where& where, const char* what) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    load_error(where, fmt::format("{} must be an object with a \"type\"", what));
  std::string type = j["type"].get<std::string>();
  Where w{where.file, where.path + " (" + type + ")"};
  return {std::move(type), std::move(w)};
}

Fields::Fields(const json& obj, Where where, std::initializer_list<const char*> known)
    : obj_(obj), where_(std::move(where)) {
  if (!obj.is_object()) fail(fmt::format("expected an object, found {}", obj.type_name()));
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      fail(fmt::format("unknown option \"{}\" (this implementation knows {}): refused rather than "
                       "ignored, since it may change the encoding",
                       it.key(), list));
    }
  }
}

const json* Fields::find(const char* key) const {
  auto it = obj_.find(key);
  return it == obj_.end() || it->is_null() ? nullptr : &*it;
}

const json& Fields::req(const char* key) const {
  const json* v = find(key);
  if (!v) fail(fmt::format("missing \"{}\"", key));
  return *v;
}

void check_sequence_depth(const Fields& f, int depth) {
  if (depth >= kMaxSequenceDepth)
    f.fail(fmt::format("a Sequence inside {} others; the limit for a tokenizer.json is {} levels of Sequence", depth,
                       kMaxSequenceDepth));
}

uint32_t one_char(const std::string& s, const Fields& f, const char* key) {
  size_t i = 0;
  if (s.empty() || utf8_invalid_at(s) != std::string::npos) f.fail(fmt::format("\"{}\" must be one character", key));
  const uint32_t c = utf8_next(s, i);
  if (i != s.size()) f.fail(fmt::format("\"{}\" must be one character, found \"{}\"", key, s));
  return c;
}

std::vector<std::pair<const json*, Where>> Fields::parts(const char* key) const {
  const json& list = req(key);
  if (!list.is_array()) fail(fmt::format("\"{}\" must be an array", key));
  std::vector<std::pair<const json*, Where>> out;
  for (size_t i = 0; i < list.size(); ++i) out.emplace_back(&list[i], where_.at(key).at(i));
  return out;
}

bool Fields::get_bool(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(fmt::format("\"{}\" must be true or false, found {}", key, v->dump()));
  return v->get<bool>();
}

bool Fields::req_bool(const char* key) const {
  req(key);
  return get_bool(key, false);
}

std::string Fields::get_string(const char* key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(fmt::format("\"{}\" must be a string, found {}", key, v->dump()));
  return v->get<std::string>();
}

std::string Fields::req_string(const char* key) const {
  req(key);
  return get_string(key, "");
}

int64_t Fields::get_int(const char* key, int64_t fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number_integer()) fail(fmt::format("\"{}\" must be an integer, found {}", key, v->dump()));
  return v->get<int64_t>();
}

// ---- Unicode predicates ----

namespace {
utf8proc_category_t category(uint32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_whitespace(uint32_t c) {
  // White_Space = Zs, Zl, Zp, U+0009..U+000D and U+0085 (PropList.txt).
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  if (c == 0x85) return true;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_numeric(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(uint32_t c) {
  if (c < 0x80) return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                       (c >= 0x7B && c <= 0x7E);
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_mark(uint32_t c) {
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
}

void append_lowercase(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  } else if (c == 0x130) {
    // SpecialCasing.txt's one unconditional multi-code-point lowercase, which Rust's
    // char::to_lowercase applies and utf8proc's simple mapping does not: i + combining dot.
    utf8_append(out, 0x69);
    utf8_append(out, 0x307);
  } else {
    utf8_append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
}

namespace {

// utf8proc puts combining marks in canonical order with an insertion sort: a run of k marks
// after one character costs k^2 (240 KB of them took a minute). Real text has a few dozen at most
// (Unicode's stream-safe format, UAX #15, allows 30); a longer run is refused, so normalization
// stays linear in the text. `s` is valid UTF-8 (checked before normalizers run).
void check_combining_runs(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t at = 0, run = 0;
  const auto n = static_cast<utf8proc_ssize_t>(s.size());
  while (at < n) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(p + at, n - at, &cp);
    if (len <= 0) return;  // not UTF-8: utf8proc_map says so
    run = utf8proc_get_property(cp)->combining_class != 0 ? run + 1 : 0;
    if (run > kMaxCombiningRun)
      throw UserError(fmt::format("the text holds a run of more than {} combining marks (at byte {} of {}); it is "
                                  "refused, as Unicode normalization would take time quadratic in the run",
                                  kMaxCombiningRun, at, s.size()));
    at += len;
  }
}

}  // namespace

std::string normalize_form(std::string_view s, NormForm form) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // every form leaves ASCII as it is
  check_combining_runs(s);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  BCD_CHECK(n >= 0, "utf8proc_map: {}", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

}  // namespace bcd::hf
