// Parsing and printing of byte counts with binary and decimal units.
#include "base/bytes.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace bcd {

namespace {

struct Unit {
  const char* name;  // lower case
  long double scale;
};

// The whole suffix must equal one name (lower-cased first).
constexpr Unit kUnits[] = {
    {"", 1.0L},          {"b", 1.0L},
    {"k", 1024.0L},      {"kib", 1024.0L},      {"kb", 1e3L},
    {"m", 1048576.0L},   {"mib", 1048576.0L},   {"mb", 1e6L},
    {"g", 1073741824.0L}, {"gib", 1073741824.0L}, {"gb", 1e9L},
    {"t", 1099511627776.0L}, {"tib", 1099511627776.0L}, {"tb", 1e12L},
};

}  // namespace

uint64_t parse_bytes(const std::string& text) {
  const char* s = text.c_str();
  while (std::isspace(static_cast<unsigned char>(*s))) ++s;
  // strtold would also take "inf", "nan", hex floats and a sign: only digits and one '.' here.
  const char* num_begin = s;
  bool digits = false;
  auto skip_digits = [&] {
    for (; std::isdigit(static_cast<unsigned char>(*s)); ++s) digits = true;
  };
  skip_digits();
  if (*s == '.') {
    ++s;
    skip_digits();
  }
  if (!digits) user_error("size '{}': expected a number with an optional unit (e.g. 4096, 4KiB, 1.5GB)", text);
  const long double mantissa = std::strtold(std::string(num_begin, s).c_str(), nullptr);

  std::string unit, unit_lower;
  while (std::isspace(static_cast<unsigned char>(*s))) ++s;
  for (; *s && !std::isspace(static_cast<unsigned char>(*s)); ++s) {
    unit += *s;
    unit_lower += static_cast<char>(std::tolower(static_cast<unsigned char>(*s)));
  }
  while (std::isspace(static_cast<unsigned char>(*s))) ++s;
  if (*s) user_error("size '{}': unexpected text after the unit", text);

  const Unit* found = nullptr;
  for (const Unit& u : kUnits)
    if (unit_lower == u.name) found = &u;
  if (!found) user_error("size '{}': unknown unit '{}' (expected B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)", text, unit);

  const long double bytes = mantissa * found->scale;
  if (bytes >= 18446744073709551616.0L) user_error("size '{}': more than 2^64-1 bytes", text);
  const long double whole = std::round(bytes);
  if (std::fabs(bytes - whole) > 1e-6L) user_error("size '{}': not a whole number of bytes ({})", text, static_cast<double>(bytes));
  return static_cast<uint64_t>(whole);
}

std::string format_bytes(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  double v = static_cast<double>(bytes);
  for (; v >= 1024.0 && i < 6; ++i) v /= 1024.0;
  if (i == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.4g} {}", v, kNames[i]);
}

std::optional<int64_t> parse_count(const std::string& text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(n);
}

}  // namespace bcd
