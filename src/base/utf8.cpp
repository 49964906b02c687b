// UTF-8 decoding and encoding (base/utf8.h).
// reference: Unicode 15, Table 3-7 (well-formed UTF-8 byte sequences) and section 3.9
#include "base/utf8.h"

namespace bcd {

Utf8Seq utf8_seq_at(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  Utf8Seq r;
  const unsigned char c = b(0);
  if (c < 0x80) {
    r.kind = Utf8Seq::kValid, r.cp = c;
    return r;
  }
  // The lead byte gives the length and the range of the second byte.
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2, r.cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3, r.cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4, r.cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return r;  // kInvalid, maximal 1
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) {
      r.kind = Utf8Seq::kTruncated;
      return r;
    }
    const unsigned char t = b(k);
    if (k == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xBF)) return r;
    r.cp = (r.cp << 6) | (t & 0x3F);
    r.maximal = k + 1;
  }
  r.kind = Utf8Seq::kValid, r.len = need;
  return r;
}

size_t utf8_invalid_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Seq q = utf8_seq_at(s, i);
    if (q.kind != Utf8Seq::kValid) return i;
    i += q.len;
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
  for (size_t i = 0; i < s.size();) {
    const Utf8Seq q = utf8_seq_at(s, i);
    if (q.kind == Utf8Seq::kValid) {
      out.append(s.data() + i, q.len);
      i += q.len;
    } else {
      out += "\xEF\xBF\xBD";
      i += q.maximal;
    }
  }
  return out;
}

}  // namespace bcd
