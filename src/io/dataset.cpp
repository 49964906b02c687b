// TokenDataset::open, which checks everything the loader later relies on (offsets, id range) so
// bad files fail at startup. The writer is io/prepare.cpp.
#include "io/dataset.h"

#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>
#include <system_error>

#include "io/h5_util.h"
#include "io/tokenizer.h"
#include "base/bytes.h"
#include "base/files.h"
#include "base/error.h"
#include "base/progress.h"

namespace bcd {

namespace fs = std::filesystem;

const char* split_name(Split s) { return s == Split::kTrain ? "train" : "val"; }

// ---- TokenDataset ----

namespace {

using h5::kFormatVersion;
using h5::kTokensFile;
using h5::quiet_hdf5;
using h5::read_num_attr;
using h5::read_str_attr;
using h5::rethrow_hdf5;

template <class T>
std::vector<T> read_vector(const H5::Group& g, const char* name, const H5::PredType& mem,
                           const std::string& path, const char* split) {
  if (!g.nameExists(name)) {
    user_error("dataset file {} lacks /{}/{} (expected a file written by `bcdtrain prepare`)", path,
               split, name);
  }
  H5::DataSet ds = g.openDataSet(name);
  H5::DataSpace space = ds.getSpace();
  if (ds.getTypeClass() != H5T_INTEGER || space.getSimpleExtentNdims() != 1) {
    user_error("dataset file {}: /{}/{} is not a 1-D integer array", path, split, name);
  }
  hsize_t n = 0;
  space.getSimpleExtentDims(&n);
  std::vector<T> v(n);
  if (n > 0) ds.read(v.data(), mem);
  return v;
}

}  // namespace

TokenDataset TokenDataset::open(const std::string& dir) {
  const std::string path = (fs::path(dir) / kTokensFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    user_error("dataset file {} not found (expected a directory written by `bcdtrain prepare`)",
               path);
  }
  quiet_hdf5();
  TokenDataset d;
  d.dir_ = dir;
  try {
    if (!H5::H5File::isHdf5(path)) user_error("dataset file {} is not an HDF5 file", path);
    H5::H5File file(path, H5F_ACC_RDONLY);
    auto version = read_num_attr<int64_t>(file, "format_version", H5::PredType::NATIVE_INT64, path);
    if (version != kFormatVersion) {
      user_error("dataset file {} has format_version {}, expected {} (re-run `bcdtrain prepare`)",
                 path, version, kFormatVersion);
    }
    auto vocab = read_num_attr<int64_t>(file, "vocab_size", H5::PredType::NATIVE_INT64, path);
    auto bos = read_num_attr<int64_t>(file, "bos_id", H5::PredType::NATIVE_INT64, path);
    auto eos = read_num_attr<int64_t>(file, "eos_id", H5::PredType::NATIVE_INT64, path);
    if (vocab <= 0 || vocab > INT32_MAX) {
      user_error("dataset file {} has vocab_size {}, expected a positive 32-bit count", path,
                 vocab);
    }
    if (eos < 0 || eos >= vocab || bos < -1 || bos >= vocab) {
      user_error(
          "dataset file {} has bos_id {} / eos_id {}, expected ids below vocab_size {} "
          "(eos required, bos may be -1)",
          path, bos, eos, vocab);
    }
    d.vocab_size_ = static_cast<int>(vocab);
    d.bos_id_ = static_cast<int>(bos);
    d.eos_id_ = static_cast<int>(eos);
    d.tokenizer_file_ = read_str_attr(file, "tokenizer", path);
    d.unigram_val_loss_ =
        read_num_attr<double>(file, "unigram_val_loss", H5::PredType::NATIVE_DOUBLE, path);

    for (Split s : {Split::kTrain, Split::kVal}) {
      const char* name = split_name(s);
      if (!file.nameExists(name)) {
        user_error(
            "dataset file {} lacks the group /{} (expected a file written by "
            "`bcdtrain prepare`)",
            path, name);
      }
      H5::Group g = file.openGroup(name);
      // HDF5 converts uint16/uint32 on read; uint32 ids past INT32_MAX clamp and fail below
      auto tokens = read_vector<int32_t>(g, "tokens", H5::PredType::NATIVE_INT32, path, name);
      auto offsets =
          read_vector<uint64_t>(g, "doc_offsets", H5::PredType::NATIVE_UINT64, path, name);
      if (offsets.empty() || offsets.front() != 0 || offsets.back() != tokens.size()) {
        user_error(
            "dataset file {}: /{}/doc_offsets must start at 0 and end at the token "
            "count {}, found {} entries from {} to {}",
            path, name, tokens.size(), offsets.size(), offsets.empty() ? 0 : offsets.front(),
            offsets.empty() ? 0 : offsets.back());
      }
      auto bad_off = std::adjacent_find(offsets.begin(), offsets.end(), std::greater<>());
      if (bad_off != offsets.end()) {
        user_error(
            "dataset file {}: /{}/doc_offsets decreases at entry {} ({} then {}), "
            "expected a non-decreasing sequence",
            path, name, bad_off - offsets.begin(), *bad_off, *(bad_off + 1));
      }
      auto bad_tok = std::find_if(tokens.begin(), tokens.end(),
                                  [&](int32_t t) { return t < 0 || t >= d.vocab_size_; });
      if (bad_tok != tokens.end()) {
        user_error("dataset file {}: /{}/tokens[{}] = {} is outside the vocabulary [0, {})", path,
                   name, bad_tok - tokens.begin(), *bad_tok, d.vocab_size_);
      }
      if (g.nameExists("loss_mask")) {
        auto mask = read_vector<uint8_t>(g, "loss_mask", H5::PredType::NATIVE_UINT8, path, name);
        if (mask.size() != tokens.size())
          user_error("dataset file {}: /{}/loss_mask holds {} entries, expected one per token ({})", path, name,
                     mask.size(), tokens.size());
        auto bad = std::find_if(mask.begin(), mask.end(), [](uint8_t m) { return m > 1; });
        if (bad != mask.end())
          user_error("dataset file {}: /{}/loss_mask[{}] = {}, expected 0 or 1", path, name, bad - mask.begin(), *bad);
        (s == Split::kTrain ? d.train_mask_ : d.val_mask_) = std::move(mask);
      }
      (s == Split::kTrain ? d.train_ : d.val_) = std::move(tokens);
      (s == Split::kTrain ? d.train_docs_ : d.val_docs_) = std::move(offsets);
    }
  } catch (const H5::Exception& e) {
    rethrow_hdf5(e, path, "cannot read dataset file");
  }
  if (d.train_mask_.empty() != d.val_mask_.empty())
    user_error("dataset file {}: /{}/loss_mask is missing while /{}/loss_mask is there (expected both or neither)", path,
               d.train_mask_.empty() ? "train" : "val", d.train_mask_.empty() ? "val" : "train");
  return d;
}

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

std::string TokenDataset::tokenizer_path() const {
  return (fs::path(dir_) / tokenizer_file_).string();
}

}  // namespace bcd
