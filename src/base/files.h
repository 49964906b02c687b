// Whole small files (tokenizers, configs, digests' inputs) read into memory with one error rule.
#pragma once

#include <string>

namespace bcd {

// The bytes of `path`; UserError naming `what` and the path when it cannot be opened or read.
std::string read_file(const std::string& path, const std::string& what);

}  // namespace bcd
