// TokenDataset: open() checks a prepared file's attributes and layout with HDF5 (types, sizes,
// contiguous storage, doc_offsets' ends), after which windows of tokens and masks are read with
// pread at the datasets' file offsets and their values checked as they arrive. The writer is
// io/prepare.cpp.
#include "data/dataset.h"

#include <H5Cpp.h>
#include <endian.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>

#include "io/direct_io.h"
#include "io/h5_util.h"
#include "base/error.h"
#include "base/files.h"

namespace bcd {

namespace fs = std::filesystem;

const char* split_name(Split s) { return s == Split::kTrain ? "train" : "val"; }

// ---- Layout ----

namespace {

using h5::kFormatVersion;
using h5::kTokensFile;
using h5::quiet_hdf5;
using h5::read_num_attr;
using h5::read_str_attr;
using h5::rethrow_hdf5;

// Where one split's datasets lie in the file. Offsets are of the raw little-endian data.
struct SplitLayout {
  int64_t n_tokens = 0;
  int token_bytes = 2;     // 2 (uint16 ids) or 4 (uint32)
  uint64_t tokens_at = 0;  // file offset of /S/tokens' data
  uint64_t offsets_at = 0;
  int64_t n_offsets = 0;   // entries of /S/doc_offsets (n_docs + 1)
  uint64_t mask_at = 0;    // file offset of /S/loss_mask's data (masked datasets only)
};

// `name` in g as a 1-D array and its length; UserError naming it when missing or not 1-D.
H5::DataSet open_1d(const H5::Group& g, const char* name, const std::string& path, const char* split, hsize_t* n) {
  if (!g.nameExists(name)) {
    user_error("dataset file {} lacks /{}/{} (expected a file written by `bcdtrain prepare`)", path, split, name);
  }
  H5::DataSet ds = g.openDataSet(name);
  H5::DataSpace space = ds.getSpace();
  if (ds.getTypeClass() != H5T_INTEGER || !space.isSimple() || space.getSimpleExtentNdims() != 1) {
    user_error("dataset file {}: /{}/{} is not a 1-D integer array", path, split, name);
  }
  space.getSimpleExtentDims(n);
  return ds;
}

// File offset of a contiguous dataset's data, which is what lets us pread it in place. Datasets
// with nothing written have no storage (HADDR_UNDEF); that is fine when they hold nothing.
uint64_t contiguous_offset(const H5::DataSet& ds, hsize_t n, const std::string& path, const char* split,
                           const char* name) {
  const haddr_t at = ds.getCreatePlist().getLayout() == H5D_CONTIGUOUS ? ds.getOffset() : HADDR_UNDEF;
  if (at == HADDR_UNDEF && n > 0) {
    user_error(
        "dataset file {}: /{}/{} is not stored contiguously in the file (chunked, compact or external), "
        "so it cannot be read in place; re-run `bcdtrain prepare` to rewrite the dataset",
        path, split, name);
  }
  return at == HADDR_UNDEF ? 0 : static_cast<uint64_t>(at);
}

// pread until `n` bytes are in; EINTR retried. An error or the end of the file is a UserError
// naming the file and what was being read (the file shrank or broke after open()).
void pread_full(int fd, void* dst, size_t n, uint64_t off, const std::string& path, const std::string& what) {
  const int64_t got = pread_fully(fd, dst, n, off);
  if (got < 0) user_error("dataset file {}: cannot read {} ({} bytes at offset {}): {}", path, what, n, off, errno_text(errno));
  if (got < static_cast<int64_t>(n))
    user_error("dataset file {}: ends at offset {} in the middle of {} (truncated since it was opened?)", path,
               off + static_cast<uint64_t>(got), what);
}

uint32_t load_le(const uint8_t* p, int bytes) {
  if (bytes == 1) return *p;
  if (bytes == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return le16toh(v);
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}

// Reads (sized to a few pages) are staged through the stack: a window is one pread, memory per
// read stays constant whatever the count.
constexpr size_t kStageBytes = 16 << 10;

}  // namespace

struct TokenDataset::Impl {
  std::string dir, path, tokenizer_file;
  int vocab_size = 0, bos_id = -1, eos_id = -1;
  double unigram_val_loss = 0;
  bool masked = false;
  UniqueFd fd;  // O_RDONLY; pread needs no lock, so copies on several threads share it
  SplitLayout splits[2];

  const SplitLayout& of(Split s) const { return splits[s == Split::kTrain ? 0 : 1]; }

  void check_range(Split s, int64_t start, int64_t count, const char* name) const {
    const int64_t n = of(s).n_tokens;
    if (start < 0 || count < 0 || start > n || count > n - start) {
      user_error("dataset file {}: entries [{}, {}) of /{}/{} requested, outside the split's {} tokens", path,
                 start, start + count, split_name(s), name, n);
    }
  }

  // Entries [start, start + count) of a `bytes`-wide array at file offset `at` into out, each
  // checked below `limit`; `bad(i, v)` reports entry i holding v.
  template <class T, class Bad>
  void read_checked(uint64_t at, int bytes, int64_t start, int64_t count, uint32_t limit, T* out, const std::string& what,
                    Bad&& bad) const {
    uint8_t stage[kStageBytes];
    const int64_t per = static_cast<int64_t>(kStageBytes) / bytes;
    for (int64_t done = 0; done < count; done += per) {
      const int64_t k = std::min(per, count - done);
      pread_full(fd.get(), stage, static_cast<size_t>(k * bytes), at + static_cast<uint64_t>((start + done) * bytes), path,
                 what);
      for (int64_t i = 0; i < k; ++i) {
        const uint32_t v = load_le(stage + i * bytes, bytes);
        if (v >= limit) bad(start + done + i, v);
        out[done + i] = static_cast<T>(v);
      }
    }
  }

  template <class T>
  void read_ids(Split s, int64_t start, int64_t count, T* out) const {
    check_range(s, start, count, "tokens");
    const SplitLayout& l = of(s);
    const std::string what = fmt::format("/{}/tokens", split_name(s));
    read_checked(l.tokens_at, l.token_bytes, start, count, static_cast<uint32_t>(vocab_size), out, what,
                 [&](int64_t i, uint32_t v) {
                   user_error("dataset file {}: /{}/tokens[{}] = {} is outside the vocabulary [0, {})", path,
                              split_name(s), i, v, vocab_size);
                 });
  }
};

namespace {

// The Impl of a dataset that was opened (a default-constructed TokenDataset has none).
template <class P>
const auto& deref(const P& impl) {
  BCD_CHECK(impl, "TokenDataset used before TokenDataset::open");
  return *impl;
}

}  // namespace

// ---- Opening ----

namespace {

// One split's datasets in the open file: where each one's data lies, and whether it has a mask.
SplitLayout read_split_layout(const H5::H5File& file, Split s, const std::string& path, bool* has_mask) {
  const char* name = split_name(s);
  SplitLayout l;
  if (!file.nameExists(name)) {
    user_error("dataset file {} lacks the group /{} (expected a file written by `bcdtrain prepare`)", path, name);
  }
  H5::Group g = file.openGroup(name);
  hsize_t n = 0;
  H5::DataSet tokens = open_1d(g, "tokens", path, name, &n);
  const H5::DataType type = tokens.getDataType();
  if (type == H5::PredType::STD_U16LE) {
    l.token_bytes = 2;
  } else if (type == H5::PredType::STD_U32LE) {
    l.token_bytes = 4;
  } else {
    user_error("dataset file {}: /{}/tokens holds {}-byte integers other than little-endian uint16 or uint32, "
               "expected one of those (re-run `bcdtrain prepare`)", path, name, type.getSize());
  }
  l.n_tokens = static_cast<int64_t>(n);
  l.tokens_at = contiguous_offset(tokens, n, path, name, "tokens");

  hsize_t n_off = 0;
  H5::DataSet offsets = open_1d(g, "doc_offsets", path, name, &n_off);
  if (!(offsets.getDataType() == H5::PredType::STD_U64LE)) {
    user_error("dataset file {}: /{}/doc_offsets is not little-endian uint64", path, name);
  }
  l.n_offsets = static_cast<int64_t>(n_off);
  l.offsets_at = contiguous_offset(offsets, n_off, path, name, "doc_offsets");

  *has_mask = g.nameExists("loss_mask");
  if (*has_mask) {
    hsize_t n_mask = 0;
    H5::DataSet mask = open_1d(g, "loss_mask", path, name, &n_mask);
    if (!(mask.getDataType() == H5::PredType::STD_U8LE)) {
      user_error("dataset file {}: /{}/loss_mask is not uint8", path, name);
    }
    if (n_mask != n) {
      user_error("dataset file {}: /{}/loss_mask holds {} entries, expected one per token ({})", path, name, n_mask,
                 n);
    }
    l.mask_at = contiguous_offset(mask, n_mask, path, name, "loss_mask");
  }
  return l;
}

}  // namespace

// The attributes and the splits' layout, read through HDF5.
void TokenDataset::read_layout(Impl& d) {
  const std::string& path = d.path;
  quiet_hdf5();
  bool has_mask[2] = {false, false};
  try {
    if (!H5::H5File::isHdf5(path)) user_error("dataset file {} is not an HDF5 file", path);
    H5::H5File file(path, H5F_ACC_RDONLY);
    auto version = read_num_attr<int64_t>(file, "format_version", H5::PredType::NATIVE_INT64, path);
    if (version != kFormatVersion) {
      user_error("dataset file {} has format_version {}, expected {} (re-run `bcdtrain prepare`)", path, version,
                 kFormatVersion);
    }
    auto vocab = read_num_attr<int64_t>(file, "vocab_size", H5::PredType::NATIVE_INT64, path);
    auto bos = read_num_attr<int64_t>(file, "bos_id", H5::PredType::NATIVE_INT64, path);
    auto eos = read_num_attr<int64_t>(file, "eos_id", H5::PredType::NATIVE_INT64, path);
    if (vocab <= 0 || vocab > INT32_MAX) {
      user_error("dataset file {} has vocab_size {}, expected a positive 32-bit count", path, vocab);
    }
    if (eos < 0 || eos >= vocab || bos < -1 || bos >= vocab) {
      user_error(
          "dataset file {} has bos_id {} / eos_id {}, expected ids below vocab_size {} "
          "(eos required, bos may be -1)",
          path, bos, eos, vocab);
    }
    d.vocab_size = static_cast<int>(vocab);
    d.bos_id = static_cast<int>(bos);
    d.eos_id = static_cast<int>(eos);
    d.tokenizer_file = read_str_attr(file, "tokenizer", path);
    d.unigram_val_loss = read_num_attr<double>(file, "unigram_val_loss", H5::PredType::NATIVE_DOUBLE, path);
    d.splits[0] = read_split_layout(file, Split::kTrain, path, &has_mask[0]);
    d.splits[1] = read_split_layout(file, Split::kVal, path, &has_mask[1]);
    if (d.splits[0].token_bytes != d.splits[1].token_bytes) {
      user_error("dataset file {}: /train/tokens holds {}-byte ids but /val/tokens {}-byte ones, expected the same",
                 path, d.splits[0].token_bytes, d.splits[1].token_bytes);
    }
  } catch (const H5::Exception& e) {
    rethrow_hdf5(e, path, "cannot read dataset file");
  }
  if (has_mask[0] != has_mask[1]) {
    user_error("dataset file {}: /{}/loss_mask is missing while /{}/loss_mask is there (expected both or neither)",
               path, has_mask[0] ? "val" : "train", has_mask[0] ? "train" : "val");
  }
  d.masked = has_mask[0];
}

// The file read is the one opened (prepare --force replaces a dataset by rename), and every
// dataset lies within it, so a truncated file fails here rather than in the middle of a run.
void TokenDataset::check_extents(const Impl& d) {
  const std::string& path = d.path;
  struct stat by_fd {}, by_path {};
  if (::fstat(d.fd.get(), &by_fd) != 0 || ::stat(path.c_str(), &by_path) != 0 || by_fd.st_ino != by_path.st_ino ||
      by_fd.st_dev != by_path.st_dev) {
    user_error("dataset file {} was replaced while it was being opened; try again", path);
  }
  const auto file_size = static_cast<uint64_t>(by_fd.st_size);
  for (Split s : {Split::kTrain, Split::kVal}) {
    const SplitLayout& l = d.of(s);
    const auto n = static_cast<uint64_t>(l.n_tokens);
    const struct {
      const char* name;
      uint64_t at, bytes;
    } parts[] = {{"tokens", l.tokens_at, n * static_cast<uint64_t>(l.token_bytes)},
                 {"doc_offsets", l.offsets_at, static_cast<uint64_t>(l.n_offsets) * 8},
                 {"loss_mask", l.mask_at, d.masked ? n : 0}};
    for (const auto& p : parts) {
      if (p.bytes > 0 && (p.at > file_size || p.bytes > file_size - p.at)) {
        user_error("dataset file {} is {} bytes long, but /{}/{} lies at bytes [{}, {}) (truncated? re-run `bcdtrain "
                   "prepare`)", path, file_size, split_name(s), p.name, p.at, p.at + p.bytes);
      }
    }
    // The ends of doc_offsets: the whole array is read only by read_doc_offsets.
    uint64_t first = 0, last = 0;
    if (l.n_offsets > 0) {
      const std::string what = fmt::format("/{}/doc_offsets", split_name(s));
      pread_full(d.fd.get(), &first, 8, l.offsets_at, path, what);
      pread_full(d.fd.get(), &last, 8, l.offsets_at + static_cast<uint64_t>(l.n_offsets - 1) * 8, path, what);
      first = le64toh(first), last = le64toh(last);
    }
    if (l.n_offsets == 0 || first != 0 || last != n) {
      user_error(
          "dataset file {}: /{}/doc_offsets must start at 0 and end at the token count {}, found {} entries from {} to {}",
          path, split_name(s), n, l.n_offsets, first, last);
    }
  }
}

TokenDataset TokenDataset::open(const std::string& dir) {
  const std::string path = (fs::path(dir) / kTokensFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    user_error("dataset file {} not found (expected a directory written by `bcdtrain prepare`)", path);
  }
  auto d = std::make_shared<Impl>();
  d->dir = dir;
  d->path = path;
  // Opened before HDF5 reads the layout, and checked to be the same file after, so the offsets
  // found are offsets into the file we read.
  d->fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!d->fd) user_error("dataset file {}: cannot open ({})", path, errno_text(errno));
  read_layout(*d);
  check_extents(*d);
  TokenDataset out;
  out.impl_ = std::move(d);
  return out;
}

// ---- Reading ----

int64_t TokenDataset::n_tokens(Split s) const { return deref(impl_).of(s).n_tokens; }
int64_t TokenDataset::n_docs(Split s) const { return deref(impl_).of(s).n_offsets - 1; }

void TokenDataset::read_tokens(Split s, int64_t start, int64_t count, int64_t* out) const {
  deref(impl_).read_ids(s, start, count, out);
}

std::vector<int32_t> TokenDataset::read_tokens(Split s, int64_t start, int64_t count) const {
  deref(impl_).check_range(s, start, count, "tokens");
  std::vector<int32_t> out(static_cast<size_t>(count));
  impl_->read_ids(s, start, count, out.data());
  return out;
}

void TokenDataset::read_mask(Split s, int64_t start, int64_t count, uint8_t* out) const {
  const Impl& d = deref(impl_);
  BCD_CHECK(d.masked, "read_mask of {}, which holds no loss mask", d.path);
  d.check_range(s, start, count, "loss_mask");
  const std::string what = fmt::format("/{}/loss_mask", split_name(s));
  d.read_checked(d.of(s).mask_at, 1, start, count, 2, out, what, [&](int64_t i, uint32_t v) {
    user_error("dataset file {}: /{}/loss_mask[{}] = {}, expected 0 or 1", d.path, split_name(s), i, v);
  });
}

std::vector<uint8_t> TokenDataset::read_mask(Split s) const {
  std::vector<uint8_t> out(static_cast<size_t>(n_tokens(s)));
  read_mask(s, 0, n_tokens(s), out.data());
  return out;
}

std::vector<uint64_t> TokenDataset::read_doc_offsets(Split s) const {
  const Impl& d = deref(impl_);
  const SplitLayout& l = d.of(s);
  std::vector<uint64_t> off(static_cast<size_t>(l.n_offsets));
  pread_full(d.fd.get(), off.data(), off.size() * 8, l.offsets_at, d.path, fmt::format("/{}/doc_offsets", split_name(s)));
  for (uint64_t& o : off) o = le64toh(o);
  auto bad = std::adjacent_find(off.begin(), off.end(), std::greater<>());
  if (bad != off.end()) {
    user_error(
        "dataset file {}: /{}/doc_offsets decreases at entry {} ({} then {}), expected a non-decreasing sequence",
        d.path, split_name(s), bad - off.begin(), *bad, *(bad + 1));
  }
  return off;
}

bool TokenDataset::masked() const { return deref(impl_).masked; }
int TokenDataset::token_bytes() const { return deref(impl_).splits[0].token_bytes; }
int TokenDataset::vocab_size() const { return deref(impl_).vocab_size; }
int TokenDataset::bos_id() const { return deref(impl_).bos_id; }
int TokenDataset::eos_id() const { return deref(impl_).eos_id; }
double TokenDataset::unigram_val_loss() const { return deref(impl_).unigram_val_loss; }
const std::string& TokenDataset::dir() const { return deref(impl_).dir; }
const std::string& TokenDataset::file() const { return deref(impl_).path; }

std::string TokenDataset::tokenizer_path() const {
  const Impl& d = deref(impl_);
  return (fs::path(d.dir) / d.tokenizer_file).string();
}

// ---- Chat template ----

std::string dataset_chat_template(const std::string& dir) {
  const std::string path = (fs::path(dir) / kTokensFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  quiet_hdf5();
  try {
    if (!H5::H5File::isHdf5(path)) return "";
    H5::H5File file(path, H5F_ACC_RDONLY);
    if (!file.attrExists("chat_template")) return "";
    return read_str_attr(file, "chat_template", path);
  } catch (...) {
    return "";
  }
}

}  // namespace bcd
