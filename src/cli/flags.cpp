// Flag checks in our words, and CLI11's parse errors said the same way (flags.h).
#include "cli/flags.h"

#include <fmt/format.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "base/bytes.h"
#include "base/error.h"
#include "base/printable.h"

namespace bcd::cli {
namespace {

// The refusal every check returns: "expected <what>, got <value as given>".
std::string refuse(const std::string& what, const std::string& given) {
  return "expected " + what + ", got " + shown(given);
}

bool all_digits(std::string_view s) {
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// What `opt` expects, as its check says (the check's name); "a value" without one.
std::string expected_of(CLI::Option* opt) {
  try {
    const std::string& what = opt->get_validator()->get_name();
    return what.empty() ? "a value" : what;
  } catch (const CLI::OptionNotFound&) {
    return "a value";
  }
}

bool is_flag(const CLI::Option* opt) { return opt->get_expected_max() == 0; }

}  // namespace

// ---- Checks ----

CLI::Validator integer_in(int64_t lo, uint64_t hi, bool lo_is_type_min, bool hi_is_type_max) {
  const std::string range = fmt::format("an integer from {} to {}", lo, hi);
  std::string what = range, help = fmt::format("{} to {}", lo, hi);
  if (hi_is_type_max) {
    what = lo == 1 ? "a positive integer" : lo == 0 ? "an integer >= 0" : fmt::format("an integer >= {}", lo);
    help = lo_is_type_min ? "" : fmt::format(">= {}", lo);  // UINT says >= 0 already
  }
  auto check = [lo, hi, what, range](std::string& text) -> std::string {
    const std::string given = text;
    std::string_view s = text;
    const bool negative = !s.empty() && s[0] == '-';
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
    if (s.empty() || !all_digits(s)) return refuse(what, given);
    // Below the bounds: what the flag takes says it; above: the largest it can hold is named.
    uint64_t magnitude = 0;
    if (std::from_chars(s.data(), s.data() + s.size(), magnitude).ec != std::errc()) return refuse(range, given);
    if (negative && magnitude != 0) {
      // -magnitude >= lo, in unsigned arithmetic: lo may be INT64_MIN
      if (lo >= 0 || magnitude > static_cast<uint64_t>(-(lo + 1)) + 1) return refuse(what, given);
      text = "-" + std::to_string(magnitude);
    } else {
      if (lo > 0 && magnitude < static_cast<uint64_t>(lo)) return refuse(what, given);
      if (magnitude > hi) return refuse(range, given);
      text = std::to_string(magnitude);  // decimal for CLI11's strtoll(base 0): "010" is not octal 8
    }
    return {};
  };
  return CLI::Validator(check, help, what);
}

CLI::Validator number(double lo, double hi) {
  const bool bounded = std::isfinite(hi);
  const std::string what =
      bounded ? fmt::format("a number from {:g} to {:g}", lo, hi) : fmt::format("a number >= {:g}", lo);
  const std::string help = bounded ? fmt::format("{:g} to {:g}", lo, hi) : fmt::format(">= {:g}", lo);
  auto check = [lo, hi, what](std::string& text) -> std::string {
    // Decimal only: strtod would also take "nan", "inf", "0x1p3" and leading spaces.
    if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string::npos) return refuse(what, text);
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !std::isfinite(x) || x < lo || x > hi) return refuse(what, text);
    return {};
  };
  return CLI::Validator(check, help, what);
}

namespace {

// Why `text` is no path the kernel would take (ENAMETOOLONG), or "".
std::string too_long(const std::string& text) {
  if (text.size() >= PATH_MAX) return fmt::format(" (a path of {} bytes)", text.size());
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('/', at), text.size());
    if (end - at > NAME_MAX) return fmt::format(" (a name of {} bytes)", end - at);
    at = end + 1;
  }
  return {};
}

enum class Exists { kNothing, kFile, kDirectory, kEither };

CLI::Validator path_check(const std::string& what, Exists want) {
  auto check = [what, want](std::string& text) -> std::string {
    if (text.empty()) return refuse(what, text);
    if (const std::string why = too_long(text); !why.empty()) return refuse(what, text) + why;
    if (want == Exists::kNothing) return {};
    std::error_code ec;
    const auto st = std::filesystem::status(text, ec);
    const bool dir = std::filesystem::is_directory(st);
    if (want == Exists::kDirectory && !dir) return refuse(what, text) + " (not a directory)";
    if (!std::filesystem::exists(st)) return refuse(what, text) + " (not found)";
    if (want == Exists::kFile && dir) return refuse(what, text) + " (a directory)";
    return {};
  };
  return CLI::Validator(check, "", what);
}

}  // namespace

CLI::Validator pathname(const std::string& what) { return path_check(what, Exists::kNothing); }
CLI::Validator existing_file(const std::string& what) { return path_check(what, Exists::kFile); }
CLI::Validator existing_dir(const std::string& what) { return path_check(what, Exists::kDirectory); }
CLI::Validator existing_path(const std::string& what) { return path_check(what, Exists::kEither); }

CLI::Validator text(const std::string& what) {
  return CLI::Validator([](std::string&) { return std::string(); }, "", what);
}

CLI::Validator byte_size(uint64_t min_bytes) {
  const std::string what = min_bytes == 0   ? "a size such as 4096, 4KiB, 1MiB or 1.5GB"
                          : min_bytes == 1 ? "a positive size such as 4096, 4KiB, 1MiB or 1.5GB"
                                           : fmt::format("a size of at least {} (such as 4KiB, 1MiB or 1.5GB)",
                                                         format_bytes(min_bytes));
  auto check = [min_bytes, what](std::string& text) -> std::string {
    try {
      if (parse_bytes(text) >= min_bytes) return {};
    } catch (const UserError&) {
    }
    return refuse(what, text);
  };
  return CLI::Validator(check, "", what);
}

CLI::Validator choice(std::function<void(const std::string&)> parse, const std::string& what) {
  auto check = [parse = std::move(parse), what](std::string& text) -> std::string {
    try {
      parse(text);
      return {};
    } catch (const UserError&) {
      return refuse(what, text);
    }
  };
  return CLI::Validator(check, "", what);
}

std::string shown(const std::string& value) {
  constexpr size_t kMax = 64;
  std::string s = printable_line(value);
  bool plain = !s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                 "0123456789._+-/:=,@%~") == std::string::npos;
  if (s.size() > kMax) s = shorten_line(s, kMax), plain = false;
  return plain ? s : "\"" + s + "\"";
}

// ---- CLI11's refusals ----

std::string parse_error_message(CLI::App& app, const CLI::ParseError& e) {
  std::vector<CLI::App*> parsed = app.get_subcommands();
  CLI::App& at = parsed.empty() ? app : *parsed.front();
  const bool top = &at == &app;
  const std::string of = top ? "bcdtrain" : "`" + at.get_name() + "`";
  const std::string see = top ? "(see bcdtrain --help)" : fmt::format("(see bcdtrain {} --help)", at.get_name());

  // A word CLI11 did not know comes first: a misspelt flag explains the rest (its value left over,
  // a required flag "missing").
  // (A prefix command, launch, keeps the words after its flags: they are not the error.)
  std::vector<std::string> extra = at.get_prefix_command() ? std::vector<std::string>{} : at.remaining();
  if (extra.empty() && !top && !at.get_prefix_command()) extra = app.remaining();
  if (!extra.empty()) {
    const std::string& word = extra.front();
    if (word.size() > 1 && word[0] == '-')
      return fmt::format("{}: unknown option of {} {}", shown(word.substr(0, word.find('='))), of, see);
    return fmt::format("{}: unexpected argument of {} {}", shown(word), of, see);
  }

  // The option the message is about: CLI11 starts it with the option's name.
  const std::string msg = e.what();
  CLI::Option* opt = nullptr;
  std::string name;
  for (CLI::App* a : {&at, &app}) {
    for (CLI::Option* o : a->get_options()) {
      const std::string n = o->get_name();
      if (n.empty() || n.size() <= name.size()) continue;
      for (const std::string& head : {n + ":", n + " ", "Could not convert: " + n + " = "})
        if (msg.rfind(head, 0) == 0) opt = o, name = n;
    }
  }

  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    if (opt) return name + ": required";
    if (msg.rfind("A subcommand", 0) == 0) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({}))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      return fmt::format("expected a subcommand: {} {}", names, see);
    }
    return msg;
  }
  if (!opt) return msg;  // none of these is expected: CLI11's words, escaped by main
  if (dynamic_cast<const CLI::ValidationError*>(&e)) return name + ": " + msg.substr(name.size() + 2);
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    const size_t eq = msg.find(" = ");
    const bool has_value = msg.rfind("Could not convert: ", 0) == 0 && eq != std::string::npos;
    const std::string given = has_value ? msg.substr(eq + 3) : "";
    if (is_flag(opt))
      return given.empty() ? name + ": expected no value (or true or false)"
                           : name + ": " + refuse("no value (or true or false)", given);
    return name + ": " + refuse(expected_of(opt), given);
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e)) {
    if (msg.find("At Most") != std::string::npos) return name + ": given more than once; expected once";
    return name + ": expected " + expected_of(opt) + ", got no value";
  }
  return name + ":" + msg.substr(name.size());
}

void split_overrides(const std::vector<std::string>& words, std::vector<std::string>& rest,
                     std::vector<std::string>& overrides) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& a = words[i];
    const auto eq = a.find('=');
    const auto dot = a.find('.');
    const bool is_override = a.rfind("--", 0) == 0 && dot != std::string::npos && (eq == std::string::npos || dot < eq);
    if (!is_override) {
      rest.push_back(a);
    } else if (eq != std::string::npos) {
      overrides.push_back(a);
    } else {
      if (i + 1 >= words.size()) user_error("override {}: missing value (expected {}=VALUE)", a, a);
      overrides.push_back(a + "=" + words[++i]);
    }
  }
  // The same key twice is most likely a line edited in one place and not the other: the last
  // one wins, as in the config file's own order, but not without a word.
  std::map<std::string, std::string> seen;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('=');
    const std::string key = o.substr(0, eq), value = o.substr(eq + 1);
    const auto [it, first] = seen.emplace(key, value);
    if (!first && it->second != value)
      fmt::print(stderr, "bcdtrain: warning: {} is given twice ({}, then {}): the last one is used\n", shown(key),
                 shown(it->second), shown(value));
    it->second = value;
  }
}

}  // namespace bcd::cli
