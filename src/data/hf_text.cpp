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

// ---- UTF-8 ----

namespace {

// The length of the valid sequence at s[i] (1-4), or 0 with `*maximal` the length of its
// maximal invalid subpart (Unicode 3.9, "U+FFFD substitution of maximal subparts": Rust's rule).
size_t utf8_seq(std::string_view s, size_t i, size_t* maximal) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  *maximal = 1;
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char d = b(i + k);
    if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
    *maximal = k + 1;
  }
  return need;
}

}  // namespace

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0, maximal;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_seq(s, i, &maximal);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[k])); };
  const uint32_t c = b(i);
  if (c < 0x80) return i += 1, c;
  if (c < 0xE0) return i += 2, ((c & 0x1F) << 6) | (b(i - 1) & 0x3F);
  if (c < 0xF0) return i += 3, ((c & 0x0F) << 12) | ((b(i - 2) & 0x3F) << 6) | (b(i - 1) & 0x3F);
  i += 4;
  return ((c & 0x07) << 18) | ((b(i - 3) & 0x3F) << 12) | ((b(i - 2) & 0x3F) << 6) | (b(i - 1) & 0x3F);
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t utf8_count(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0, maximal;
  while (i < s.size()) {
    const size_t n = utf8_seq(s, i, &maximal);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += maximal;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
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

std::string normalize_form(std::string_view s, NormForm form) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // every form leaves ASCII as it is
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
