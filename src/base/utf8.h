// UTF-8, decoded once for the whole program: what a byte sequence is (Unicode 15, Table 3-7:
// well-formed sequences only: no overlong forms, no surrogates, nothing past U+10FFFF), and the
// few operations the tokenizers and the terminal escaping need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bcd {

// What starts at s[i] (i < s.size()).
struct Utf8Seq {
  enum Kind { kValid, kInvalid, kTruncated } kind = kInvalid;
  size_t len = 1;      // kValid: the character's bytes (1-4)
  size_t maximal = 1;  // otherwise: its maximal invalid subpart (Unicode 3.9, "U+FFFD substitution of
                       // maximal subparts", Rust's from_utf8_lossy rule), at least 1 byte
  uint32_t cp = 0;     // kValid: the code point
};
// kTruncated: the first bytes of a character the text ends before.
Utf8Seq utf8_seq_at(std::string_view s, size_t i);

// The offset of the first byte that is not part of valid UTF-8, or npos.
size_t utf8_invalid_at(std::string_view s);
inline size_t utf8_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
// The code point at s[i] (valid UTF-8), advancing i past it.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);
size_t utf8_count(std::string_view s);  // code points of valid UTF-8
// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

}  // namespace bcd
