// HDF5 state files: atomic writes, checksummed datasets, checked reads.
#include "io/state_file.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "base/error.h"
#include "base/files.h"

namespace bcd {

namespace fs = std::filesystem;

namespace {

constexpr hsize_t kChunk = 1 << 20;  // elements per chunk (4 MiB of fp32): the unit of checksums

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

// ---- The attributes' checksum ----
// HDF5 checksums datasets (Fletcher-32) but not attributes, where the config, step counts and
// scheduler and loader state live. The writer hashes every attribute it wrote, sorted by
// (object, name), into the root attribute kDigest; the reader walks the file's attributes and
// hashes them the same way on open.
constexpr const char* kDigest = "attributes_xxh3";

using AttrMap = std::map<std::pair<std::string, std::string>, std::string>;  // (object, name) -> typed bytes

std::string int_bytes(int64_t v) {
  std::string b(1 + sizeof v, 'i');
  std::memcpy(&b[1], &v, sizeof v);
  return b;
}
std::string str_bytes(const std::string& v) { return "s" + v; }

int64_t digest_of(const AttrMap& attrs) {
  std::string all;
  for (const auto& [key, value] : attrs)
    for (const std::string* part : {&key.first, &key.second, &value}) {
      const uint64_t n = part->size();
      all.append(reinterpret_cast<const char*>(&n), sizeof n);
      all += *part;
    }
  const XXH64_hash_t h = XXH3_64bits(all.data(), all.size());
  int64_t out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

struct AttrWalk {
  AttrMap attrs;
  std::string object;  // being walked: "/" or "/a/b"
};

herr_t visit_attr(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto* w = static_cast<AttrWalk*>(data);
  if (w->object == "/" && std::strcmp(name, kDigest) == 0) return 0;
  const hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
  if (a < 0) return -1;
  const hid_t type = H5Aget_type(a);
  herr_t rc = 0;
  std::string& out = w->attrs[{w->object, name}];
  if (H5Tget_class(type) == H5T_INTEGER) {
    int64_t v = 0;
    rc = H5Aread(a, H5T_NATIVE_INT64, &v);
    out = int_bytes(v);
  } else if (H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0) {
    char* v = nullptr;
    const hid_t mem = H5Tcopy(H5T_C_S1);
    H5Tset_size(mem, H5T_VARIABLE);
    rc = H5Aread(a, mem, &v);
    out = str_bytes(v ? v : "");
    if (v) H5free_memory(v);
    H5Tclose(mem);
  } else {
    out = "?";  // a kind this format never writes: the digest cannot match
  }
  H5Tclose(type);
  H5Aclose(a);
  return rc < 0 ? -1 : 0;
}

template <class Info>
herr_t visit_object(hid_t root, const char* name, const Info* info, void* data) {
  if (info->num_attrs == 0) return 0;
  auto* w = static_cast<AttrWalk*>(data);
  w->object = std::strcmp(name, ".") == 0 ? "/" : "/" + std::string(name);
  const hid_t obj = H5Oopen(root, name, H5P_DEFAULT);
  if (obj < 0) return -1;
  hsize_t idx = 0;
  const herr_t rc = H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, data);
  H5Oclose(obj);
  return rc;
}

// Every attribute of every object of a file, except the digest itself.
AttrMap read_attributes(const H5::H5File& file) {
  AttrWalk walk;
#if H5_VERSION_GE(1, 12, 0)
  const herr_t rc = H5Ovisit3(file.getId(), H5_INDEX_NAME, H5_ITER_INC, visit_object<H5O_info2_t>, &walk,
                              H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS);
#else
  const herr_t rc = H5Ovisit2(file.getId(), H5_INDEX_NAME, H5_ITER_INC, visit_object<H5O_info_t>, &walk,
                              H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS);
#endif
  if (rc < 0) throw H5::Exception("read_attributes", "cannot walk the file's attributes");
  return walk.attrs;
}

std::string parent_of(const std::string& path) {
  const size_t s = path.rfind('/');
  return s == 0 || s == std::string::npos ? "/" : path.substr(0, s);
}

}  // namespace

// ---- Writer ----

namespace {
std::atomic<bool> g_abandoned{false};
}  // namespace

bool state_file_abandoned() { return g_abandoned.load(); }

struct StateFileWriter::Impl {
  std::string path, tmp, noun;
  H5::H5File file;
  bool open = false, committed = false;
  bool failed = false;  // HDF5 failed a write: the file is abandoned, never closed (see fail())
  uint64_t written = 0; // bytes of dataset payload written so far
  AttrMap attrs;  // what the digest covers
  std::unique_ptr<float[]> piece;  // floats(dataset, n, fill)'s buffer, kept for the next dataset
  uint64_t piece_elems = 0;
  UniqueFd tmp_fd;        // the temporary file beside HDF5's own handle: reservations, cache hints, trim
  uint64_t let_go = 0;    // bytes of the file from its start whose pages were handed back
  uint64_t queued = 0;    // bytes of the file from its start whose write-back was started

  // The temporary file opened for writing, once (-1 when it cannot be, errno saying why).
  int tmp_descriptor() {
    if (!tmp_fd) tmp_fd = UniqueFd(::open(tmp.c_str(), O_WRONLY | O_CLOEXEC));
    return tmp_fd ? tmp_fd.get() : -1;
  }

  // What was written so far leaves the page cache a piece behind the writer: the pages of
  // everything up to the previous piece's end are waited for on disk (their write-back started
  // one piece earlier) and dropped, and this piece's write-back starts. A file of many
  // gigabytes (an 8B model's fp32 weights, a checkpoint's state) then holds a window of a few
  // pieces in memory instead of filling the page cache with dirty pages a low-RAM node needs,
  // and the writer reuses the pages it frees. Only a cache hint: nothing it does can fail the
  // write (the commit's fsync is what makes the file durable).
  void let_go_of_written() {
    const int fd = tmp_descriptor();
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return;
    const uint64_t end = static_cast<uint64_t>(st.st_size);
    if (queued > let_go) {
      ::sync_file_range(fd, static_cast<off_t>(let_go), static_cast<off_t>(queued - let_go),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      ::posix_fadvise(fd, static_cast<off_t>(let_go), static_cast<off_t>(queued - let_go), POSIX_FADV_DONTNEED);
      let_go = queued;
    }
    if (end > queued) {
      ::sync_file_range(fd, static_cast<off_t>(queued), static_cast<off_t>(end - queued), SYNC_FILE_RANGE_WRITE);
      queued = end;
    }
  }

  ~Impl() {  // without commit(): the temporary file goes (also when the constructor failed)
    if (committed) return;
    try {
      if (open && !failed) file.close();
    } catch (const H5::Exception&) {
    }
    if (!tmp.empty()) std::remove(tmp.c_str());
  }

  // A failed write (typically ENOSPC or EIO): one line naming the file, the error and the space
  // left. The HDF5 file is abandoned without H5Fclose, which would flush again and, after a
  // failed write, crashes HDF5 1.10 (an extra reference keeps the C++ object from closing it);
  // the temporary file is removed by the destructor, so the previous file stays as it was.
  [[noreturn]] void fail(const std::string& what, int err) {
    if (!failed && open) {
      file.incRefCount();
      g_abandoned.store(true);
    }
    failed = true;
    std::string space;
    struct statvfs sv {};
    const std::string dir = fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string();
    if (::statvfs(dir.c_str(), &sv) == 0)
      space = fmt::format("; {:.1f} MiB free in {} after {:.1f} MiB of this file",
                          static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize) / (1 << 20), dir,
                          static_cast<double>(written) / (1 << 20));
    user_error("{}: cannot write the {} ({}: {}{}); nothing was replaced", path, noun, what,
               err ? std::strerror(err) : "HDF5 error", space);
  }

  // Disk space for the next `bytes` of the file, reserved before HDF5 writes them (fallocate
  // past the end, FALLOC_FL_KEEP_SIZE): a full file system is then an error here, while the
  // HDF5 file is still sound, rather than a failed write inside HDF5. The reservation keeps
  // kSlack beyond, for the metadata HDF5 writes at close; commit() gives back what is unused.
  // Called only while no write has failed (floats() checks).
  static constexpr uint64_t kSlack = 1u << 20;
  void reserve(const std::string& what, uint64_t bytes) {
    const int fd = tmp_descriptor();
    if (fd < 0) fail(what, errno);
    struct stat st {};
    int rc = ::fstat(fd, &st);
    if (rc == 0) rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, st.st_size, static_cast<off_t>(bytes + kSlack));
    const int err = errno;
    if (rc == 0 || err == EOPNOTSUPP || err == ENOSYS) return;  // a file system without fallocate: unreserved
    try {  // HDF5 wrote nothing it could not: close it normally (its metadata fits the slack)
      file.close();
      open = false;
    } catch (const H5::Exception&) {
    }
    fail(fmt::format("{}, which needs {:.1f} MiB more", what, static_cast<double>(bytes + kSlack) / (1 << 20)), err);
  }

  // The file's size, and the reserved blocks past it given back (after close).
  void trim() {
    const int fd = tmp_descriptor();
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0) (void)!::ftruncate(fd, st.st_size);
  }
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
  impl_->reserve("attributes", 0);
  attr("/", "format", format);
  attr("/", "version", version);
}

StateFileWriter::~StateFileWriter() = default;

void StateFileWriter::group(const std::string& path) {
  errno = 0;
  try {
    ensure_group(impl_->file, path);
  } catch (const H5::Exception&) {
    impl_->fail("group " + path, errno);
  }
}

void StateFileWriter::attr(const std::string& object, const std::string& name, int64_t value) {
  errno = 0;
  try {
    H5::Group g = ensure_group(impl_->file, object == "/" ? "" : object);
    H5::Attribute a = g.createAttribute(name, H5::PredType::NATIVE_INT64, H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_INT64, &value);
    impl_->attrs[{object.empty() ? "/" : object, name}] = int_bytes(value);
  } catch (const H5::Exception&) {
    impl_->fail("attribute " + object + ":" + name, errno);
  }
}

void StateFileWriter::attr(const std::string& object, const std::string& name, const std::string& value) {
  errno = 0;
  try {
    H5::Group g = ensure_group(impl_->file, object == "/" ? "" : object);
    H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
    H5::Attribute a = g.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
    a.write(t, value);
    impl_->attrs[{object.empty() ? "/" : object, name}] = str_bytes(value);
  } catch (const H5::Exception&) {
    impl_->fail("attribute " + object + ":" + name, errno);
  }
}

void StateFileWriter::floats(const std::string& dataset, const float* data, uint64_t n) {
  write_floats(dataset, n, data, nullptr);
}

void StateFileWriter::floats(const std::string& dataset, uint64_t n, const FloatFill& fill) {
  write_floats(dataset, n, nullptr, &fill);
}

void StateFileWriter::write_floats(const std::string& dataset, uint64_t n, const float* data, const FloatFill* fill) {
  BCD_CHECK(!impl_->failed, "{}: written after a failed write", impl_->path);
  group(parent_of(dataset) == "/" ? "" : parent_of(dataset));
  impl_->reserve("dataset " + dataset, n * sizeof(float) + (n / kChunk + 1) * 64);
  // The C API: a dataset whose write failed must not be closed (its close flushes again).
  errno = 0;
  const hsize_t dims = n;
  const hid_t space = H5Screate_simple(1, &dims, nullptr);
  const hid_t props = H5Pcreate(H5P_DATASET_CREATE);
  if (n > 0) {
    const hsize_t chunk = std::min<hsize_t>(kChunk, n);
    H5Pset_chunk(props, 1, &chunk);
    H5Pset_fletcher32(props);
  }
  const hid_t ds = H5Dcreate2(impl_->file.getId(), dataset.c_str(), H5T_NATIVE_FLOAT, space, H5P_DEFAULT, props,
                              H5P_DEFAULT);
  H5Pclose(props);
  if (ds < 0) {
    H5Sclose(space);
    impl_->fail("dataset " + dataset, errno);
  }
  if (data && n > 0) {
    if (H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
      H5Sclose(space);
      impl_->fail("dataset " + dataset, errno);
    }
  } else if (fill && n > 0) {
    // Pieces are whole chunks (kStatePieceElems is a multiple of kChunk): HDF5 writes each chunk
    // once, never reads one back to complete it.
    static_assert(kStatePieceElems % kChunk == 0, "a piece is whole chunks");
    // One buffer for every dataset of the file, never zeroed: fill writes every element.
    const uint64_t piece = std::min<uint64_t>(n, kStatePieceElems);
    if (impl_->piece_elems < piece) {
      impl_->piece.reset(new float[piece]);
      impl_->piece_elems = piece;
    }
    for (uint64_t first = 0; first < n; first += piece) {
      const hsize_t start = first, count = std::min<uint64_t>(piece, n - first);
      (*fill)(first, impl_->piece.get(), count);
      const hid_t mem = H5Screate_simple(1, &count, nullptr);
      H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
      const herr_t rc = H5Dwrite(ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, impl_->piece.get());
      H5Sclose(mem);
      if (rc < 0) {
        H5Sclose(space);
        impl_->fail("dataset " + dataset, errno);
      }
      impl_->let_go_of_written();
    }
  }
  H5Sclose(space);
  if (H5Dclose(ds) < 0) impl_->fail("dataset " + dataset, errno);
  impl_->written += n * sizeof(float);
}

void StateFileWriter::commit() {
  BCD_CHECK(!impl_->committed, "{} committed twice", impl_->path);
  try {
    const int64_t digest = digest_of(impl_->attrs);
    H5::Attribute a = impl_->file.openGroup("/").createAttribute(kDigest, H5::PredType::NATIVE_INT64,
                                                                 H5::DataSpace(H5S_SCALAR));
    a.write(H5::PredType::NATIVE_INT64, &digest);
    a.close();
    errno = 0;
    if (H5Fflush(impl_->file.getId(), H5F_SCOPE_LOCAL) < 0) impl_->fail("flush", errno);
    impl_->file.close();
    impl_->open = false;
  } catch (const H5::Exception&) {
    impl_->fail("close", errno);
  }
  impl_->trim();
  commit_temporary(impl_->tmp, impl_->path, "state file");
  impl_->committed = true;
}

// ---- Reader ----

struct StateFileReader::Impl {
  H5::H5File file;
  // The dataset read by range last, kept open with its chunk cache (closed before the file).
  std::string range_name;
  hid_t range_ds = -1;
  ~Impl() { close_range(); }
  void close_range() {
    if (range_ds >= 0) H5Dclose(range_ds);
    range_ds = -1;
    range_name.clear();
  }
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
  // Files written before the digest existed have none; every file written since has one.
  if (!has_attr("/", kDigest)) return;
  const int64_t want = attr_int("/", kDigest);
  int64_t got = 0;
  try {
    got = digest_of(read_attributes(impl_->file));
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read the {}'s attributes (corrupt HDF5: {})", path_, noun, e.getDetailMsg());
  }
  if (got != want)
    user_error("{}: the {}'s attributes (config, step counts, scheduler and data positions) fail their checksum: "
               "the file was changed or is corrupt",
               path_, noun);
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

void StateFileReader::floats(const std::string& dataset, uint64_t first, float* out, uint64_t count) const {
  if (impl_->range_name != dataset) {
    length(dataset);  // present and 1-D, else a UserError naming it
    impl_->close_range();
    // A cache of four chunks: a range that starts or ends inside a chunk leaves it cached for
    // the next range, so reading consecutive ranges reads (and checksums) each chunk once.
    const hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, 521, 4 * kChunk * sizeof(float), 1.0);
    impl_->range_ds = H5Dopen2(impl_->file.getId(), dataset.c_str(), dapl);
    H5Pclose(dapl);
    if (impl_->range_ds < 0) user_error("{}: cannot open {}", path_, dataset);
    const hid_t type = H5Dget_type(impl_->range_ds);
    const bool is_float = H5Tget_class(type) == H5T_FLOAT;
    H5Tclose(type);
    if (!is_float) {
      impl_->close_range();
      user_error("{}: {} is not float data", path_, dataset);
    }
    impl_->range_name = dataset;
  }
  // The bounds from the open dataset: a read piece by piece opens it once, not once a piece.
  const hid_t space = H5Dget_space(impl_->range_ds);
  hsize_t have = 0;
  H5Sget_simple_extent_dims(space, &have, nullptr);
  if (first > have || count > have - first) {
    H5Sclose(space);
    user_error("{}: {} has {} elements, read of [{}, {}) past its end", path_, dataset, have, first, first + count);
  }
  if (count == 0) {
    H5Sclose(space);
    return;
  }
  const hsize_t start = first, n = count;
  const hid_t mem = H5Screate_simple(1, &n, nullptr);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &n, nullptr);
  const herr_t rc = H5Dread(impl_->range_ds, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, out);
  H5Sclose(mem);
  H5Sclose(space);
  if (rc < 0) user_error("{}: cannot read {} elements [{}, {}) (checksum or I/O error)", path_, dataset, first, first + count);
}

}  // namespace bcd
