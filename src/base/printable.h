// Text from outside (a record, a flag's value, a path, a prompt, what a model generates) made safe to
// show on a terminal: what a terminal would act on is written out instead, and UTF-8 is cut only
// between whole characters.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace bcd {

// `text` with each byte a terminal would act on written out: C0 controls other than \n and \t (\r,
// \x1b, ...), DEL (\x7f), the C1 controls (\u009b), the bidirectional overrides and line
// separators (\u202e, \u2028), and every byte that is not part of a valid UTF-8 character (\xff).
// Backslashes are kept as they are (the result is for people, not a parser), so printable() of
// its own result changes nothing.
std::string printable(std::string_view text);

// The same for one line of a message: \n and \t are written out too.
std::string printable_line(std::string_view text);

// `line` cut to at most `max` bytes (at least 64) by leaving out its middle, which is replaced by
// " [... N bytes ...] "; cuts fall between UTF-8 characters.
std::string shorten_line(std::string_view line, size_t max);

// Length of the longest prefix of `text` that does not end inside a UTF-8 character the bytes
// after it could still complete: what a stream of text may show now. Pieces cut this way and
// passed through printable() one by one add up to printable() of the whole.
size_t utf8_complete_prefix(std::string_view text);

}  // namespace bcd
