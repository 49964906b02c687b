// Escaping of outside text for terminals, and whole-character cuts of UTF-8.
// reference: Unicode 15, Table 3-7 (well-formed UTF-8 byte sequences); ECMA-48 (C0 and C1 controls)
#include "base/printable.h"

#include <fmt/format.h>

#include <cstdint>

namespace bcd {
namespace {

// What starts at text[i]: a valid character of `len` bytes, a byte that starts none (kInvalid),
// or the first bytes of one that the text ends before (kTruncated).
enum class Seq { kValid, kInvalid, kTruncated };

Seq utf8_at(std::string_view text, size_t i, size_t& len, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    len = 1, cp = c;
    return Seq::kValid;
  }
  // The lead byte gives the length and the range of the second byte (Table 3-7): no overlong
  // forms, no surrogates, nothing past U+10FFFF.
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return Seq::kInvalid;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= text.size()) return Seq::kTruncated;
    const unsigned char t = b(k);
    if (t < (k == 1 ? lo : 0x80) || t > (k == 1 ? hi : 0xBF)) return Seq::kInvalid;
    cp = (cp << 6) | (t & 0x3F);
  }
  return Seq::kValid;
}

// Code points a terminal acts on although they are valid UTF-8: C1 controls, the bidirectional
// embeddings, overrides and isolates, and the line and paragraph separators.
bool is_active_code_point(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x2028 || cp == 0x2029;
}

std::string escape(std::string_view text, bool one_line) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    uint32_t cp = 0;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (utf8_at(text, i, len, cp) != Seq::kValid) {
      out += fmt::format("\\x{:02x}", c);  // not UTF-8 here: this byte alone, then go on
      i += 1;
      continue;
    }
    if (c == '\n' || c == '\t') {
      if (one_line) out += c == '\n' ? "\\n" : "\\t";
      else out += static_cast<char>(c);
    } else if (c == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (is_active_code_point(cp)) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text) { return escape(text, /*one_line=*/false); }

std::string printable_line(std::string_view text) { return escape(text, /*one_line=*/true); }

std::string shorten_line(std::string_view line, size_t max) {
  if (max < 64) max = 64;
  if (line.size() <= max) return std::string(line);
  const auto char_start = [&](size_t at) {  // back to the first byte of the character at `at`
    while (at > 0 && (static_cast<unsigned char>(line[at]) & 0xC0) == 0x80) --at;
    return at;
  };
  const size_t keep = (max - 32) / 2;  // 32: room for the marker
  const size_t head = char_start(keep), tail = char_start(line.size() - keep);
  return fmt::format("{} [... {} bytes ...] {}", line.substr(0, head), tail - head, line.substr(tail));
}

size_t utf8_complete_prefix(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    uint32_t cp = 0;
    switch (utf8_at(text, i, len, cp)) {
      case Seq::kTruncated: return i;
      case Seq::kInvalid: i += 1; break;
      case Seq::kValid: i += len; break;
    }
  }
  return text.size();
}

}  // namespace bcd
