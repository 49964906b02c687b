// libFuzzer entry: any byte string as a Hugging Face config.json, read onto a ModelConfig (the
// bounded JSON reader, then every key). UserError is the expected answer to bad input; any other
// exception, a sanitizer report or a crash is a bug. The warnings about unknown keys go to stderr.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/config.h"
#include "base/error.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A fresh memory file each time: the reader warns once per file name.
  const int fd = ::memfd_create("config.json", MFD_CLOEXEC);
  if (fd < 0) __builtin_trap();
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) __builtin_trap();
    done += static_cast<size_t>(n);
  }
  try {
    const bcd::ModelConfig m = bcd::model_config_from_hf("/proc/self/fd/" + std::to_string(fd), bcd::ModelConfig{});
    // What the planner and the model rely on once a config is accepted.
    if (m.vocab_size <= 0 || m.d_model <= 0 || m.n_layers <= 0 || m.n_heads <= 0 || m.d_ff <= 0 ||
        m.n_kv_heads <= 0 || m.n_heads % m.n_kv_heads != 0 || m.max_seq_len <= 0)
      __builtin_trap();
  } catch (const bcd::UserError&) {
  }
  ::close(fd);
  return 0;
}
