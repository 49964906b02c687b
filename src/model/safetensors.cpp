// safetensors header parsing (every field checked: this reads untrusted downloads), tensor reads
// by pread, and the atomic writer. Reference: the safetensors format spec (huggingface/safetensors).
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "base/error.h"
#include "base/files.h"

namespace bcd::st {

namespace {

using json = nlohmann::json;

struct DtypeEntry {
  Dtype dtype;
  const char* name;
  size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {Dtype::kBool, "BOOL", 1},       {Dtype::kU8, "U8", 1},   {Dtype::kI8, "I8", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1},  {Dtype::kF8E5M2, "F8_E5M2", 1},
    {Dtype::kI16, "I16", 2},         {Dtype::kU16, "U16", 2}, {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},       {Dtype::kI32, "I32", 4}, {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},         {Dtype::kI64, "I64", 8}, {Dtype::kU64, "U64", 8},
    {Dtype::kF64, "F64", 8},
};

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();

// Names in messages are cut short: a hostile header may hold a 100 MiB key.
std::string quote_name(const std::string& s) {
  constexpr size_t kMax = 120;
  return "\"" + (s.size() <= kMax ? s : s.substr(0, kMax) + "...") + "\"";
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void check_header_length(uint64_t n, uint64_t file_size, const std::string& source) {
  if (n > kMaxHeaderBytes)
    user_error("{}: safetensors header length {} exceeds the limit of {} bytes (corrupt file?)", source, n,
               kMaxHeaderBytes);
  if (n > file_size - 8)
    user_error("{}: safetensors header length {} but only {} bytes follow the length field (truncated file?)",
               source, n, file_size - 8);
}

// A shape dimension or offset: a JSON integer in [0, 2^63).
bool as_index(const json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return out <= static_cast<uint64_t>(kMaxI64);
}

TensorInfo parse_entry(const std::string& name, const json& v, uint64_t data_bytes, const std::string& source) {
  const std::string tn = quote_name(name);
  if (!v.is_object())
    user_error("{}: tensor {}: expected an object with dtype, shape and data_offsets, found {}", source, tn,
               v.type_name());
  TensorInfo t;
  t.name = name;

  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) user_error("{}: tensor {}: missing dtype (expected a string)", source, tn);
  const std::string dname = dt->get<std::string>();
  if (!dtype_from_name(dname, t.dtype))
    user_error("{}: tensor {}: unknown dtype {} (expected one of BF16, F16, F32, F64, I8...I64, U8...U64, BOOL)",
               source, tn, quote_name(dname));

  const auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array())
    user_error("{}: tensor {}: missing shape (expected an array of non-negative integers)", source, tn);
  bool has_zero = false;
  for (const json& d : *sh) {
    uint64_t x = 0;
    if (!as_index(d, x))
      user_error("{}: tensor {}: shape entry {} is not a non-negative integer", source, tn,
                 d.is_string() ? quote_name(d.get<std::string>()) : d.is_primitive() ? d.dump() : d.type_name());
    t.shape.push_back(static_cast<int64_t>(x));
    has_zero = has_zero || x == 0;
  }
  // numel and bytes with overflow checks; a zero dimension makes any other size fine.
  uint64_t bytes = 0;
  if (!has_zero) {
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      if (n > static_cast<uint64_t>(kMaxI64) / static_cast<uint64_t>(d))
        user_error("{}: tensor {}: the element count of its shape overflows 64 bits", source, tn);
      n *= static_cast<uint64_t>(d);
    }
    const uint64_t es = dtype_size(t.dtype);
    if (n > static_cast<uint64_t>(kMaxI64) / es)
      user_error("{}: tensor {}: its byte size overflows 64 bits", source, tn);
    bytes = n * es;
  }

  const auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !as_index((*off)[0], t.begin) ||
      !as_index((*off)[1], t.end))
    user_error("{}: tensor {}: data_offsets must be [begin, end] with non-negative integers", source, tn);
  if (t.begin > t.end)
    user_error("{}: tensor {}: data_offsets [{}, {}] has begin after end", source, tn, t.begin, t.end);
  if (t.end > data_bytes)
    user_error("{}: tensor {}: data_offsets [{}, {}] end beyond the data section of {} bytes (truncated file?)",
               source, tn, t.begin, t.end, data_bytes);
  if (t.end - t.begin != bytes)
    user_error("{}: tensor {}: data_offsets [{}, {}] span {} bytes, expected {} ({} x {} bytes for shape {})",
               source, tn, t.begin, t.end, t.end - t.begin, bytes, bytes / dtype_size(t.dtype),
               dtype_size(t.dtype), sh->dump());
  return t;
}

}  // namespace

// ---- Dtypes ----

const char* dtype_name(Dtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  return "?";
}

size_t dtype_size(Dtype d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.size;
  return 1;
}

bool dtype_from_name(const std::string& name, Dtype& out) {
  for (const auto& e : kDtypes)
    if (name == e.name) return out = e.dtype, true;
  return false;
}

int64_t TensorInfo::numel() const {
  // Zero first: [2^62, 4, 0] is valid (0 bytes) but its leading product overflows.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked against the byte range at parse time
  return n;
}

const TensorInfo* Header::find(const std::string& name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

// ---- Parsing ----

Header parse_header_json(const char* text, size_t len, uint64_t data_bytes, const std::string& source) {
  json j;
  std::set<std::string> seen;
  std::string duplicate;
  // Top-level keys are tensor names: a repeated one would silently hide the first entry.
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key && duplicate.empty() && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  try {
    j = parse_json(std::string_view(text, len), kJsonSafetensorsHeader, source, /*allow_exceptions=*/true, cb);
  } catch (const json::exception& e) {
    user_error("{}: safetensors header is not valid JSON ({})", source, e.what());
  }
  if (!j.is_object()) user_error("{}: safetensors header must be a JSON object, found {}", source, j.type_name());
  if (!duplicate.empty()) user_error("{}: tensor {} appears twice in the header", source, quote_name(duplicate));

  Header h;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) user_error("{}: __metadata__ must be an object of strings, found {}", source, it->type_name());
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          user_error("{}: __metadata__ key {} must be a string, found {}", source, quote_name(m.key()), m->type_name());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(it.key(), *it, data_bytes, source));
  }
  // nlohmann's object is a std::map: tensors come out sorted by name, as find() expects.

  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : h.tensors)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (b.begin < a.end)
      user_error("{}: tensors {} [{}, {}] and {} [{}, {}] overlap in data_offsets", source, quote_name(a.name), a.begin,
                 a.end, quote_name(b.name), b.begin, b.end);
  }
  return h;
}

Header parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  if (size < 8)
    user_error("{}: truncated safetensors file: {} bytes, expected at least 8 (the header length)", source, size);
  const uint64_t n = read_le64(data);
  check_header_length(n, size, source);
  Header h = parse_header_json(reinterpret_cast<const char*>(data) + 8, n, size - 8 - n, source);
  h.data_start = 8 + n;
  return h;
}

// ---- Reading files ----

namespace {

// All `n` bytes, or false: a short read (the file shrank under us) is an error.
bool pread_full(int fd, void* dst, size_t n, uint64_t off) {
  return pread_fully(fd, dst, n, off) == static_cast<int64_t>(n);
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_) user_error("{}: cannot open safetensors file ({})", path, std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) user_error("{}: not a regular file", path);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    uint8_t len[8];
    if (size < 8 || !pread_full(fd_.get(), len, 8, 0))
      user_error("{}: truncated safetensors file: {} bytes, expected at least 8 (the header length)", path, size);
    const uint64_t n = read_le64(len);
    check_header_length(n, size, path);
    std::string text(n, '\0');
    if (!pread_full(fd_.get(), text.data(), n, 8)) user_error("{}: cannot read the safetensors header", path);
    header_ = parse_header_json(text.data(), n, size - 8 - n, path);
    header_.data_start = 8 + n;
  } catch (...) {
    fd_.reset();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::move(o.fd_)), header_(std::move(o.header_)) {}

void SafetensorsFile::read(const TensorInfo& t, uint64_t offset, uint64_t bytes, void* dst) const {
  BCD_CHECK(offset <= t.nbytes() && bytes <= t.nbytes() - offset, "{}: bytes [{}, +{}) of tensor {} ({} bytes)", path_,
            offset, bytes, t.name, t.nbytes());
  if (!pread_full(fd_.get(), dst, bytes, header_.data_start + t.begin + offset))
    user_error("{}: cannot read tensor {} ({} bytes at offset {}): file truncated or unreadable", path_,
               quote_name(t.name), bytes, header_.data_start + t.begin + offset);
}

void SafetensorsFile::read(const TensorInfo& t, void* dst) const { read(t, 0, t.nbytes(), dst); }

std::vector<uint8_t> SafetensorsFile::read(const TensorInfo& t) const {
  std::vector<uint8_t> out(t.nbytes());
  read(t, out.data());
  return out;
}

// ---- Writing ----

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  json j = json::object();
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const TensorSpec& s : tensors_) {
    BCD_CHECK(s.name != "__metadata__" && !j.contains(s.name), "tensor name {} repeated or reserved", s.name);
    uint64_t n = 1;
    for (int64_t d : s.shape) {
      BCD_CHECK(d >= 0, "tensor {}: negative dimension", s.name);
      n *= static_cast<uint64_t>(d);
    }
    const uint64_t bytes = n * dtype_size(s.dtype);
    j[s.name] = {{"dtype", dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {off, off + bytes}}};
    sizes_.push_back(bytes);
    off += bytes;
  }
  data_bytes_ = off;
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  tmp_ = temporary_beside(path_);
  fd_.reset(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd_) user_error("{}: cannot create ({})", tmp_, std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  write_all(len, 8);
  write_all(header.data(), header.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  fd_.reset();
  if (!tmp_.empty()) std::remove(tmp_.c_str());
}

void SafetensorsWriter::write_all(const void* data, size_t n) {
  if (!write_fully(fd_.get(), data, n)) user_error("{}: write failed ({})", path_, std::strerror(errno));
}

void SafetensorsWriter::write_part(const void* data, size_t bytes) {
  uint64_t left = bytes;
  while (left > 0) {
    BCD_CHECK(next_ < tensors_.size(), "{}: more bytes written than declared", path_);
    const uint64_t take = std::min<uint64_t>(left, sizes_[next_] - next_done_);
    next_done_ += take, left -= take;
    if (next_done_ == sizes_[next_]) ++next_, next_done_ = 0;
    while (next_ < tensors_.size() && sizes_[next_] == 0) ++next_;  // empty tensors take no bytes
  }
  write_all(data, bytes);
}

void SafetensorsWriter::write_next(const void* data, size_t bytes) {
  BCD_CHECK(next_ < tensors_.size(), "{}: more tensors written than declared", path_);
  BCD_CHECK(next_done_ == 0, "{}: tensor {} begun by write_part", path_, tensors_[next_].name);
  BCD_CHECK(bytes == sizes_[next_], "{}: tensor {}: {} bytes given, {} declared", path_, tensors_[next_].name,
            bytes, sizes_[next_]);
  write_all(data, bytes);
  ++next_;
}

void SafetensorsWriter::commit() {
  BCD_CHECK(next_ == tensors_.size(), "{}: {} of {} tensors written", path_, next_, tensors_.size());
  const int rc = fd_.close();
  if (rc != 0) user_error("{}: close failed ({})", path_, std::strerror(errno));
  commit_temporary(tmp_, path_, "safetensors file");
  tmp_.clear();
}

}  // namespace bcd::st
