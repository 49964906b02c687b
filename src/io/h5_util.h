// Internal to io/: what the dataset writer (prepare.cpp) and reader (dataset.cpp) share: file
// names, the format version, and HDF5 attribute helpers that report through UserError.
#pragma once

#include <H5Cpp.h>

#include <cstdint>
#include <string>

#include "base/error.h"

namespace bcd::h5 {

constexpr int64_t kFormatVersion = 1;
constexpr const char* kTokensFile = "tokens.h5";
constexpr const char* kTokenizerFile = "tokenizer.model";

// HDF5 prints its whole error stack to stderr by default; we report through UserError instead.
inline void quiet_hdf5() { H5::Exception::dontPrint(); }

[[noreturn]] inline void rethrow_hdf5(const H5::Exception& e, const std::string& path, const char* what) {
  user_error("{} {}: HDF5 error in {}: {}", what, path, e.getFuncName(), e.getDetailMsg());
}

// Variable-length strings: no size limit and no zero-size type for empty strings (a fixed-size
// string type of size 0 is invalid in HDF5 1.10).
inline void write_attr(H5::H5Object& obj, const char* name, const std::string& v) {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  obj.createAttribute(name, type, H5::DataSpace(H5S_SCALAR)).write(type, v);
}
inline void write_attr(H5::H5Object& obj, const char* name, int64_t v) {
  obj.createAttribute(name, H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_INT64, &v);
}
inline void write_attr(H5::H5Object& obj, const char* name, uint64_t v) {
  obj.createAttribute(name, H5::PredType::STD_U64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_UINT64, &v);
}
inline void write_attr(H5::H5Object& obj, const char* name, double v) {
  obj.createAttribute(name, H5::PredType::IEEE_F64LE, H5::DataSpace(H5S_SCALAR))
      .write(H5::PredType::NATIVE_DOUBLE, &v);
}

// The root attribute `name` of a dataset file; UserError naming the file when it is missing.
inline H5::Attribute open_attr(const H5::H5Object& obj, const char* name, const std::string& path) {
  if (!obj.attrExists(name)) {
    user_error(
        "dataset file {} lacks the root attribute '{}' (expected a file written by "
        "`bcdtrain prepare`)",
        path, name);
  }
  return obj.openAttribute(name);
}

template <class T>
T read_num_attr(const H5::H5Object& obj, const char* name, const H5::PredType& mem,
                const std::string& path) {
  H5::Attribute a = open_attr(obj, name, path);
  if (a.getSpace().getSimpleExtentNpoints() != 1 || a.getTypeClass() == H5T_STRING) {
    user_error("dataset file {}: attribute '{}' is not a single number", path, name);
  }
  T v{};
  a.read(mem, &v);
  return v;
}

inline std::string read_str_attr(const H5::H5Object& obj, const char* name, const std::string& path) {
  H5::Attribute a = open_attr(obj, name, path);
  if (a.getTypeClass() != H5T_STRING) {
    user_error("dataset file {}: attribute '{}' is not a string", path, name);
  }
  std::string v;
  a.read(a.getStrType(), v);
  return v;
}

}  // namespace bcd::h5
