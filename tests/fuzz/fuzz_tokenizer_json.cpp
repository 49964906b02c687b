// libFuzzer entry: any byte string as a tokenizer.json, loaded (the bounded JSON reader, then
// every component) and, when accepted, used: a short text encoded with and without special
// tokens and decoded back. UserError is the expected answer to bad input; any other exception, a
// sanitizer report or a crash is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/hf_tokenizer.h"

namespace {

// The input as a file, without the disk: a memory file opened by its /proc path.
const std::string& input_path(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("tokenizer.json", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) __builtin_trap();
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) __builtin_trap();
    done += static_cast<size_t>(n);
  }
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = input_path(data, size);
  try {
    const bcd::HfTokenizer tok = bcd::HfTokenizer::load(path);
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode("Hello, wo\xC3\xA9rld!  12 345 ab\tba\n<s>", special);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // every id is one decode accepts
      tok.decode(ids, false);
      tok.decode(ids, true);
    }
  } catch (const bcd::UserError&) {
  }
  return 0;
}
