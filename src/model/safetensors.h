// safetensors files (the Hugging Face weights format): a checked header parser, a pread-based
// tensor reader and an atomic writer. No torch here: the parser also builds alone for fuzzing.
// Layout: u64 little-endian N | N bytes of JSON header | data; the header maps each tensor name
// to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data start),
// plus an optional "__metadata__" object of strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/json_read.h"

namespace bcd::st {

enum class Dtype { kBool, kU8, kI8, kF8E4M3, kF8E5M2, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kI64, kU64, kF64 };

// Header names ("BF16", "F32", ...) and element sizes in bytes.
const char* dtype_name(Dtype d);
size_t dtype_size(Dtype d);
// false for names outside the safetensors set
bool dtype_from_name(const std::string& name, Dtype& out);

// The header is at most this long (a larger length field means a corrupt or hostile file): the
// bound of base/json_read.h's safetensors header, judged here before the header is read.
constexpr uint64_t kMaxHeaderBytes = kJsonSafetensorsHeader.max_bytes;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

struct Header {
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;          // file offset of the data section: 8 + header length
  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
};

// Parses a whole file image: length field, header, bounds of every tensor within `size`.
// Every defect is a UserError naming `source`, the tensor and what was expected.
Header parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

// Parses the JSON header text alone, for a data section of `data_bytes` bytes.
Header parse_header_json(const char* json, size_t len, uint64_t data_bytes, const std::string& source);

// An open safetensors file: its checked header and reads of one tensor's bytes.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  // Reads the tensor's bytes into dst (t.nbytes() bytes); UserError on a short file or I/O error.
  void read(const TensorInfo& t, void* dst) const;
  std::vector<uint8_t> read(const TensorInfo& t) const;
  // Bytes [offset, offset + bytes) of the tensor's data into dst (within t.nbytes()).
  void read(const TensorInfo& t, uint64_t offset, uint64_t bytes, void* dst) const;

 private:
  std::string path_;
  UniqueFd fd_;
  Header header_;
};

// What the writer is told about each tensor before any data.
struct TensorSpec {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
};

// Writes one safetensors file atomically: a temporary file beside `path`, fsync, rename.
// The header lists the tensors with sorted keys and is padded with spaces to a multiple of 8
// bytes (as the HF writer does); the data follows in the order of `tensors`, which is also the
// order of write_next calls. Destroyed before commit(), it removes the temporary file.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorSpec> tensors,
                    std::map<std::string, std::string> metadata);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next tensor's bytes; `bytes` must equal its numel * dtype size.
  void write_next(const void* data, size_t bytes);
  // The next `bytes` of the data, in order: a tensor may come in several parts, and a part may
  // end one tensor and begin the next. Not mixed with write_next within a tensor.
  void write_part(const void* data, size_t bytes);
  void commit();
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  void write_all(const void* data, size_t bytes);

  std::string path_, tmp_;
  std::vector<TensorSpec> tensors_;
  std::vector<uint64_t> sizes_;
  size_t next_ = 0;
  uint64_t next_done_ = 0;  // bytes of tensor next_ written by write_part
  uint64_t data_bytes_ = 0;
  UniqueFd fd_;
};

}  // namespace bcd::st
