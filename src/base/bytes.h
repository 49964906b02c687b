// Byte counts as people write them: "4096", "4KiB", "1MiB", "2GiB", "1.5GB" (parse_bytes) and back
// (format_bytes); plain counts (parse_count). Shared by iobench flags, the extent store's messages and config sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bcd {

// Binary units (KiB, MiB, GiB, TiB and the bare K, M, G, T) are powers of 1024, decimal units
// (kB/KB, MB, GB, TB) powers of 1000; "B" or no unit is bytes; case and a space before the unit
// are ignored ("2 gib"). UserError naming the text on junk, a negative or fractional byte count,
// or more than 2^64-1 bytes.
uint64_t parse_bytes(const std::string& text);

// A count written in decimal digits only ("8", "29500"), or nullopt: empty, a sign, spaces,
// junk after the digits, or more than 2^63-1. Callers name the flag or variable in their error.
std::optional<int64_t> parse_count(const std::string& text);

// Largest binary unit that keeps the value >= 1, 4 significant digits: "2 GiB", "1.5 MiB",
// "3.999 KiB", "1023 B".
std::string format_bytes(uint64_t bytes);

}  // namespace bcd
