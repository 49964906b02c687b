// Escaping of outside text for terminals, and whole-character cuts of UTF-8 (base/utf8.h decodes).
// reference: ECMA-48 (C0 and C1 controls)
#include "base/printable.h"

#include <fmt/format.h>

#include <cstdint>

#include "base/utf8.h"

namespace bcd {
namespace {

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
    const Utf8Seq q = utf8_seq_at(text, i);
    const size_t len = q.len;
    const uint32_t cp = q.cp;
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (q.kind != Utf8Seq::kValid) {
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
    const Utf8Seq q = utf8_seq_at(text, i);
    switch (q.kind) {
      case Utf8Seq::kTruncated: return i;
      case Utf8Seq::kInvalid: i += 1; break;
      case Utf8Seq::kValid: i += q.len; break;
    }
  }
  return text.size();
}

}  // namespace bcd
