// Whole-file reads.
#include "base/files.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace bcd {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error("cannot read {} {} (expected a readable file)", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) user_error("error while reading {} {}", what, path);
  return ss.str();
}

}  // namespace bcd
