// Bounded JSON reading (base/json_read.h): sizes judged before reading, depth, strings and value
// counts judged in one pass over the text before nlohmann's parser builds a value.
#include "base/json_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"

namespace bcd {

namespace {

// "512 MiB" for round sizes, else the exact count: a bound is quoted as it is set.
std::string bound_bytes(uint64_t n) { return n % 1024 == 0 ? format_bytes(n) : fmt::format("{} bytes", n); }

[[noreturn]] void too_big(const std::string& source, const JsonLimits& lim, const std::string& size, const char* what) {
  user_error("{}: {}{}; the limit for a {} is {}{}", source, lim.one_line ? "a line of " : "", size, lim.kind,
             bound_bytes(lim.max_bytes), what);
}

// The bounds of `lim` over `text`, in one pass: brackets, strings and scalars are found where
// the parser would find them in valid JSON (what is not valid JSON is left for it to name).
// Depth is that of the parser's stack, so nothing past the bound is ever built, walked or
// destroyed recursively.
void check_bounds(std::string_view t, const JsonLimits& lim, const std::string& source) {
  if (t.size() > lim.max_bytes) too_big(source, lim, fmt::format("{} bytes", t.size()), "");
  int depth = 0;
  uint64_t values = 0, line = 1;
  size_t line_start = 0;
  char prev = 0;  // the last structural character outside strings; 'a' inside a scalar
  const size_t n = t.size();
  auto refuse = [&](size_t at, const std::string& what, const std::string& bound) {
    const std::string place = lim.one_line ? fmt::format("column {}", at - line_start + 1)
                                           : fmt::format("line {}, column {}", line, at - line_start + 1);
    user_error("{}: {}: {}; the limit for a {} is {}", source, place, what, lim.kind, bound);
  };
  auto count_value = [&](size_t at) {
    if (++values > lim.max_values)
      refuse(at, fmt::format("value number {}", values), fmt::format("{} values (containers, keys and scalars)", lim.max_values));
  };
  for (size_t i = 0; i < n; ++i) {
    const char c = t[i];
    switch (c) {
      case '"': {
        size_t j = i + 1;
        while (j < n && t[j] != '"') j += t[j] == '\\' ? 2 : 1;
        const uint64_t len = std::min(j, n) - i - 1;
        if (len > lim.max_string_bytes)
          refuse(i, fmt::format("a string of {}{} bytes", j < n ? "" : "at least ", len), bound_bytes(lim.max_string_bytes));
        count_value(i);
        i = j;  // its closing quote
        prev = '"';
        break;
      }
      case '[':
      case '{':
        if (++depth > lim.max_depth)
          refuse(i, fmt::format("arrays and objects nested {} deep", depth), fmt::format("{} levels", lim.max_depth));
        count_value(i);
        prev = c;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        prev = c;
        break;
      case '\n':
        ++line;
        line_start = i + 1;
        break;
      case ' ':
      case '\t':
      case '\r':
        break;
      case ',':
      case ':':
        prev = c;
        break;
      default:  // a number or literal starts where a value may
        if (prev == 0 || prev == ',' || prev == ':' || prev == '[') count_value(i);
        prev = 'a';
    }
  }
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const JsonLimits& lim, const std::string& source, bool allow_exceptions,
                          const nlohmann::json::parser_callback_t& cb) {
  check_bounds(text, lim, source);
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb, allow_exceptions);
  } catch (const nlohmann::json::out_of_range& e) {
    // A number past a double (1e400) is nlohmann's out_of_range 406, not a parse_error: callers
    // would let it through as an internal failure (without exceptions it is a discarded value).
    std::string what = e.what();
    what = what.substr(what.find("] ") == std::string::npos ? 0 : what.find("] ") + 2);
    if (what.size() > 120) what = what.substr(0, 117) + "...";  // it quotes the number whole
    user_error("{}: {}; expected numbers a double holds (the limit for a {})", source, what, lim.kind);
  }
}

std::string read_json_text(const std::string& path, const JsonLimits& lim, const std::string& what) {
  auto cannot = [&](const char* why) { user_error("cannot read {} {} ({})", what, path, why); };
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) cannot(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) cannot(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) cannot("a directory; expected a file");
  const bool regular = S_ISREG(st.st_mode);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (regular && size > lim.max_bytes)
    too_big(path, lim, fmt::format("{} ({} bytes)", format_bytes(size), size), " (the file was not read)");
  // A regular file is read to its size (and a byte past it, to see it has not grown past the
  // bound); a pipe or device is read in blocks up to the bound.
  std::string out(regular ? size + 1 : uint64_t{1} << 16, '\0');
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (got > lim.max_bytes) too_big(path, lim, fmt::format("more than {} bytes", lim.max_bytes), "");
      out.resize(std::min<uint64_t>(lim.max_bytes + 1, out.size() * 2));
    }
    const ssize_t r = ::read(fd.get(), out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) cannot(std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got > lim.max_bytes) too_big(path, lim, fmt::format("more than {} bytes", lim.max_bytes), "");
  out.resize(got);
  return out;
}

nlohmann::json read_json_file(const std::string& path, const JsonLimits& lim, const std::string& what,
                              bool allow_exceptions) {
  return parse_json(read_json_text(path, lim, what), lim, path, allow_exceptions);
}

bool read_json_line(std::istream& in, std::string* line, const JsonLimits& lim, const std::string& file,
                    int64_t line_no) {
  line->clear();
  std::streambuf* sb = in.rdbuf();
  using traits = std::char_traits<char>;
  for (bool any = false;; any = true) {
    const int c = sb->sbumpc();
    if (traits::eq_int_type(c, traits::eof())) {
      in.setstate(std::ios::eofbit);
      return any;
    }
    if (c == '\n') return true;
    if (line->size() == lim.max_bytes)
      too_big(fmt::format("{}:{}", file, line_no), lim, fmt::format("more than {} bytes", lim.max_bytes), "");
    line->push_back(traits::to_char_type(c));
  }
}

}  // namespace bcd
