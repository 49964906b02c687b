// Synthetic token files for the tests of the reading side: <dir>/tokens.h5 laid out as `bcdtrain
// prepare` writes it (io/dataset.h), but written with HDF5 directly so that a test chooses every
// id, the token width and the storage layout.
#pragma once

#include <H5Cpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace bcd {

// The message of the UserError `f` throws; a test failure (and "") when it throws none.
template <class F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return {};
}

}  // namespace bcd

namespace bcd::test {

struct TokenFile {
  std::vector<uint32_t> train, val;
  std::vector<uint8_t> train_mask, val_mask;  // both empty: plain text (no /S/loss_mask)
  int64_t vocab = 1000, bos = 1, eos = 2;
  int token_bytes = 2;     // 2: /S/tokens as STD_U16LE, 4: as STD_U32LE
  int64_t doc_len = 1000;  // /S/doc_offsets: a document every doc_len tokens, the last one shorter
  bool chunked = false;    // /train/tokens chunked, a layout `bcdtrain prepare` never writes
};

// (i * 7919 + i / 13 + salt) % vocab: every id of a small vocabulary, and no short period that
// could make two different windows equal.
inline std::vector<uint32_t> pattern_tokens(int64_t n, int64_t vocab, uint64_t salt = 0) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  for (uint64_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint32_t>((i * 7919 + i / 13 + salt) % vocab);
  return t;
}

// Counted targets in runs, with a stretch of 309 zeros in every 1009 tokens (long enough for a
// whole global batch of B = 3 or 6 windows of T = 17 to count nothing).
inline std::vector<uint8_t> pattern_mask(int64_t n, uint64_t salt = 0) {
  std::vector<uint8_t> m(static_cast<size_t>(n));
  for (uint64_t i = 0; i < m.size(); ++i) m[i] = (i + salt) % 1009 < 700 && ((i + salt) / 7) % 4 != 0;
  return m;
}

inline void write_token_file(const std::string& dir, const TokenFile& f) {
  H5::H5File file(dir + "/tokens.h5", H5F_ACC_TRUNC);
  auto attr_i64 = [&](const char* name, int64_t v) {
    file.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_INT64, &v);
  };
  attr_i64("format_version", 1);
  attr_i64("vocab_size", f.vocab);
  attr_i64("bos_id", f.bos);
  attr_i64("eos_id", f.eos);
  const double unigram = 6.5;
  file.createAttribute("unigram_val_loss", H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_DOUBLE, &unigram);
  H5::StrType str(H5::PredType::C_S1, H5T_VARIABLE);
  file.createAttribute("tokenizer", str, H5::DataSpace(H5S_SCALAR)).write(str, std::string("tokenizer.model"));

  for (const char* split : {"train", "val"}) {
    const bool train = split[0] == 't';
    const std::vector<uint32_t>& t = train ? f.train : f.val;
    const std::vector<uint8_t>& mask = train ? f.train_mask : f.val_mask;
    H5::Group g = file.createGroup(split);
    hsize_t n = t.size();
    H5::DSetCreatPropList plist;
    if (train && f.chunked) {
      const hsize_t chunk = std::max<hsize_t>(1, std::min<hsize_t>(n, 4096));
      plist.setChunk(1, &chunk);
    }
    if (f.token_bytes == 4) {
      g.createDataSet("tokens", H5::PredType::STD_U32LE, H5::DataSpace(1, &n), plist).write(t.data(), H5::PredType::NATIVE_UINT32);
    } else {
      std::vector<uint16_t> narrow(t.begin(), t.end());
      g.createDataSet("tokens", H5::PredType::STD_U16LE, H5::DataSpace(1, &n), plist).write(narrow.data(), H5::PredType::NATIVE_UINT16);
    }
    std::vector<uint64_t> offsets;
    for (uint64_t i = 0; i < n; i += static_cast<uint64_t>(f.doc_len)) offsets.push_back(i);
    offsets.push_back(n);
    hsize_t n_off = offsets.size();
    g.createDataSet("doc_offsets", H5::PredType::STD_U64LE, H5::DataSpace(1, &n_off))
        .write(offsets.data(), H5::PredType::NATIVE_UINT64);
    if (!mask.empty()) {
      hsize_t n_mask = mask.size();
      g.createDataSet("loss_mask", H5::PredType::STD_U8LE, H5::DataSpace(1, &n_mask)).write(mask.data(), H5::PredType::NATIVE_UINT8);
    }
  }
}

// Sets entry i of a 1-D dataset of `file` (HDF5 converts v to the stored type).
inline void poke(const std::string& file, const char* dataset, hsize_t i, uint64_t v) {
  H5::H5File f(file, H5F_ACC_RDWR);
  H5::DataSet d = f.openDataSet(dataset);
  H5::DataSpace space = d.getSpace();
  const hsize_t one = 1;
  space.selectHyperslab(H5S_SELECT_SET, &one, &i);
  d.write(&v, H5::PredType::NATIVE_UINT64, H5::DataSpace(1, &one), space);
}

}  // namespace bcd::test
