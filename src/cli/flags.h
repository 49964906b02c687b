// The checks of flag values, in one voice. A bad value is refused while the command line is parsed,
// as "--flag: expected <what>, got <value>" with bounds as people write them; every value-taking
// flag declares one of these with ->transform() (which runs first and may make the text canonical:
// "010" is ten, not CLI11's octal eight). parse_error_message() says CLI11's own refusals (a
// conversion, a missing value or option, an unknown word) the same way; main prints both.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace bcd::cli {

// Command-line words split into config overrides and the rest, in order: "--section.key=value" and
// "--section.key value" are overrides (written back as "--section.key=value"); UserError for one
// without a value. The one reader of overrides: the app's commands, and launch's rank command.
void split_overrides(const std::vector<std::string>& words, std::vector<std::string>& rest,
                     std::vector<std::string>& overrides);

// A decimal integer in [lo, hi] (no sign for unsigned types, no 0x, 1e3 or 2.0); "a positive
// integer" or "an integer >= 0" where hi is the type's maximum, else "an integer from lo to hi".
CLI::Validator integer_in(int64_t lo, uint64_t hi, bool lo_is_type_min, bool hi_is_type_max);
template <class T>
CLI::Validator integer(T lo = std::numeric_limits<T>::lowest(), T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8, "integer<T>: an integer type of at most 64 bits");
  return integer_in(static_cast<int64_t>(lo), static_cast<uint64_t>(hi), lo == std::numeric_limits<T>::lowest(),
                    hi == std::numeric_limits<T>::max());
}
// A finite decimal number in [lo, hi]: "a number >= lo" or "a number from lo to hi".
CLI::Validator number(double lo, double hi = std::numeric_limits<double>::infinity());
// A path: not empty, and no longer than the kernel takes (PATH_MAX; NAME_MAX a component);
// `what` is the expectation ("a run directory").
CLI::Validator pathname(const std::string& what);
// The same, of a file, a directory, or either, that exists.
CLI::Validator existing_file(const std::string& what);
CLI::Validator existing_dir(const std::string& what);
CLI::Validator existing_path(const std::string& what);
// Any text, the empty one too; `what` names it where a value is missing ("a prompt").
CLI::Validator text(const std::string& what);
// A byte size (base/bytes.h: "4096", "4KiB", "1.5GB") of at least `min_bytes`.
CLI::Validator byte_size(uint64_t min_bytes = 0);
// Text that `parse` accepts (it throws a UserError on the rest); `what` lists what it accepts
// ("read or write"): the parser stays the one place that decides.
CLI::Validator choice(std::function<void(const std::string&)> parse, const std::string& what);

// How a refused value is shown: as given when it is a plain word, else quoted, escaped
// (base/printable.h) and shortened.
std::string shown(const std::string& value);

// CLI11's refusal `e` while parsing `app`, said in the same voice: "--seed: expected an integer
// >= 0, got 1e40", "--input: required", "--bogus: unknown option of `prepare` (see bcdtrain
// prepare --help)". One line without the "bcdtrain: error: " main puts first.
std::string parse_error_message(CLI::App& app, const CLI::ParseError& e);

}  // namespace bcd::cli
