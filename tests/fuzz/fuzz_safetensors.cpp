// libFuzzer entry: any byte string as a whole safetensors file. UserError is the expected answer
// to bad input; any other exception, a sanitizer report or a crash is a bug.
#include <cstddef>
#include <cstdint>

#include "model/safetensors.h"
#include "base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const bcd::st::Header h = bcd::st::parse_safetensors(data, size, "<fuzz input>");
    // What a reader relies on once the header is accepted: every range inside the file.
    for (const auto& t : h.tensors) {
      if (h.data_start + t.end > size || t.end - t.begin != static_cast<uint64_t>(t.numel()) * bcd::st::dtype_size(t.dtype))
        __builtin_trap();
      if (h.find(t.name) != &t) __builtin_trap();
    }
  } catch (const bcd::UserError&) {
  }
  return 0;
}
