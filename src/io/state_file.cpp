// HDF5 state files: atomic writes, checksummed datasets, checked reads.
#include "io/state_file.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/error.h"

namespace bcd {

namespace fs = std::filesystem;

namespace {

constexpr hsize_t kChunk = 1 << 20;  // elements per chunk (4 MiB of fp32): the unit of checksums

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) user_error("{}: cannot open to fsync", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) user_error("{}: fsync failed", path);
}

// The parent groups of an object path, created as needed.
H5::Group ensure_group(H5::H5File& f, const std::string& path) {
  std::string at;
  size_t pos = 1;
  while (pos <= path.size()) {
    const size_t next = path.find('/', pos);
    at = path.substr(0, next == std::string::npos ? path.size() : next);
    if (!f.nameExists(at)) f.createGroup(at);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return f.openGroup(path.empty() ? "/" : path);
}

std::string parent_of(const std::string& path) {
  const size_t s = path.rfind('/');
  return s == 0 || s == std::string::npos ? "/" : path.substr(0, s);
}

}  // namespace

// ---- Writer ----

struct StateFileWriter::Impl {
  std::string path, tmp, noun;
  H5::H5File file;
  bool open = false, committed = false;
};

StateFileWriter::StateFileWriter(std::string path, const std::string& format, int64_t version, std::string noun)
    : impl_(std::make_unique<Impl>()) {
  H5::Exception::dontPrint();
  impl_->path = std::move(path);
  impl_->tmp = impl_->path + ".tmp-" + std::to_string(::getpid());
  impl_->noun = std::move(noun);
  try {
    impl_->file = H5::H5File(impl_->tmp, H5F_ACC_TRUNC);
    impl_->open = true;
  } catch (const H5::Exception& e) {
    user_error("{}: cannot create {} ({})", impl_->tmp, impl_->noun, e.getDetailMsg());
  }
  attr("/", "format", format);
  attr("/", "version", version);
}

StateFileWriter::~StateFileWriter() {
  if (impl_->committed) return;
  try {
    if (impl_->open) impl_->file.close();
  } catch (const H5::Exception&) {
  }
  std::remove(impl_->tmp.c_str());
}

void StateFileWriter::group(const std::string& path) {
  try {
    ensure_group(impl_->file, path);
  } catch (const H5::Exception& e) {
    user_error("{}: cannot create group {} ({})", impl_->tmp, path, e.getDetailMsg());
  }
}

void StateFileWriter::attr(const std::string& object, const std::string& name, int64_t value) {
  try {
    H5::Group g = ensure_group(impl_->file, object == "/" ? "" : object);
    H5::Attribute a = g.createAttribute(name, H5::PredType::NATIVE_INT64, H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_INT64, &value);
  } catch (const H5::Exception& e) {
    user_error("{}: cannot write attribute {}:{} ({})", impl_->tmp, object, name, e.getDetailMsg());
  }
}

void StateFileWriter::attr(const std::string& object, const std::string& name, const std::string& value) {
  try {
    H5::Group g = ensure_group(impl_->file, object == "/" ? "" : object);
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    H5::Attribute a = g.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
    a.write(t, value);
  } catch (const H5::Exception& e) {
    user_error("{}: cannot write attribute {}:{} ({})", impl_->tmp, object, name, e.getDetailMsg());
  }
}

void StateFileWriter::floats(const std::string& dataset, const float* data, uint64_t n) {
  try {
    ensure_group(impl_->file, parent_of(dataset) == "/" ? "" : parent_of(dataset));
    hsize_t dims = n;
    H5::DSetCreatPropList props;
    if (n > 0) {
      hsize_t chunk = std::min<hsize_t>(kChunk, n);
      props.setChunk(1, &chunk);
      props.setFletcher32();
    }
    H5::DataSet ds = impl_->file.createDataSet(dataset, H5::PredType::NATIVE_FLOAT, H5::DataSpace(1, &dims), props);
    if (n > 0) ds.write(data, H5::PredType::NATIVE_FLOAT);
  } catch (const H5::Exception& e) {
    user_error("{}: cannot write {} ({})", impl_->tmp, dataset, e.getDetailMsg());
  }
}

void StateFileWriter::commit() {
  BCD_CHECK(!impl_->committed, "{} committed twice", impl_->path);
  try {
    impl_->file.close();
    impl_->open = false;
  } catch (const H5::Exception& e) {
    user_error("{}: cannot close {} ({})", impl_->tmp, impl_->noun, e.getDetailMsg());
  }
  fsync_path(impl_->tmp, false);
  if (std::rename(impl_->tmp.c_str(), impl_->path.c_str()) != 0)
    user_error("{}: cannot rename {} into place", impl_->path, impl_->tmp);
  impl_->committed = true;
  fsync_path(fs::path(impl_->path).parent_path().empty() ? "." : fs::path(impl_->path).parent_path().string(), true);
}

// ---- Reader ----

struct StateFileReader::Impl {
  H5::H5File file;
};

StateFileReader::StateFileReader(std::string path, const std::string& noun)
    : path_(std::move(path)), impl_(std::make_unique<Impl>()) {
  H5::Exception::dontPrint();
  if (!fs::exists(path_)) user_error("{}: {} not found", path_, noun);
  try {
    impl_->file = H5::H5File(path_, H5F_ACC_RDONLY);
  } catch (const H5::Exception& e) {
    user_error("{}: not a readable {} (truncated or corrupt HDF5: {})", path_, noun, e.getDetailMsg());
  }
}

StateFileReader::~StateFileReader() = default;
StateFileReader::StateFileReader(StateFileReader&&) noexcept = default;
StateFileReader& StateFileReader::operator=(StateFileReader&&) noexcept = default;

std::string StateFileReader::format() const {
  return has_attr("/", "format") ? attr_str("/", "format") : "";
}

bool StateFileReader::has(const std::string& object) const {
  try {
    return impl_->file.nameExists(object);
  } catch (const H5::Exception&) {
    return false;
  }
}

bool StateFileReader::has_attr(const std::string& object, const std::string& name) const {
  try {
    return impl_->file.openGroup(object).attrExists(name);
  } catch (const H5::Exception&) {
    return false;
  }
}

int64_t StateFileReader::attr_int(const std::string& object, const std::string& name) const {
  try {
    H5::Group g = impl_->file.openGroup(object);
    if (!g.attrExists(name)) user_error("{}: {} has no attribute {}", path_, object, name);
    H5::Attribute a = g.openAttribute(name);
    if (a.getTypeClass() != H5T_INTEGER) user_error("{}: {}:{} is not an integer", path_, object, name);
    int64_t v = 0;
    a.read(H5::PredType::NATIVE_INT64, &v);
    return v;
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read {}:{} ({})", path_, object, name, e.getDetailMsg());
  }
}

std::string StateFileReader::attr_str(const std::string& object, const std::string& name) const {
  try {
    H5::Group g = impl_->file.openGroup(object);
    if (!g.attrExists(name)) user_error("{}: {} has no attribute {}", path_, object, name);
    H5::Attribute a = g.openAttribute(name);
    if (a.getTypeClass() != H5T_STRING) user_error("{}: {}:{} is not a string", path_, object, name);
    std::string out;
    a.read(a.getStrType(), out);
    return out;
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read {}:{} ({})", path_, object, name, e.getDetailMsg());
  }
}

uint64_t StateFileReader::length(const std::string& dataset) const {
  try {
    if (!impl_->file.nameExists(dataset)) user_error("{}: {} missing", path_, dataset);
    H5::DataSet ds = impl_->file.openDataSet(dataset);
    H5::DataSpace sp = ds.getSpace();
    if (sp.getSimpleExtentNdims() != 1) user_error("{}: {} is not 1-D", path_, dataset);
    hsize_t n = 0;
    sp.getSimpleExtentDims(&n);
    return n;
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read {} ({})", path_, dataset, e.getDetailMsg());
  }
}

void StateFileReader::floats(const std::string& dataset, float* out, uint64_t n) const {
  const uint64_t have = length(dataset);
  if (have != n) user_error("{}: {} has {} elements, expected {}", path_, dataset, have, n);
  if (n == 0) return;
  try {
    H5::DataSet ds = impl_->file.openDataSet(dataset);
    if (ds.getTypeClass() != H5T_FLOAT) user_error("{}: {} is not float data", path_, dataset);
    ds.read(out, H5::PredType::NATIVE_FLOAT);
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read {} (checksum or I/O error: {})", path_, dataset, e.getDetailMsg());
  }
}

}  // namespace bcd
