// HDF5 reading and writing of model weights files.
#include "io/weights.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "runtime/error.h"

namespace bcd {

namespace {
constexpr const char* kFormat = "bcdtrain-weights";
constexpr const char* kCheckpointFormat = "bcdtrain-checkpoint";  // same /blocks and config, more state
constexpr int kVersion = 1;

void write_str_attr(H5::H5Object& obj, const char* name, const std::string& value) {
  H5::StrType t(H5::PredType::C_S1, H5T_VARIABLE);
  H5::Attribute a = obj.createAttribute(name, t, H5::DataSpace(H5S_SCALAR));
  a.write(t, value);
}

std::string read_str_attr(const H5::H5Object& obj, const char* name) {
  H5::Attribute a = obj.openAttribute(name);
  H5::StrType t = a.getStrType();
  std::string out;
  a.read(t, out);
  return out;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

H5::H5File open_checked(const std::string& path) {
  if (!std::filesystem::exists(path)) user_error("{}: weights file not found", path);
  try {
    H5::H5File f(path, H5F_ACC_RDONLY);
    const std::string format = f.attrExists("format") ? read_str_attr(f, "format") : "";
    if (format != kFormat && format != kCheckpointFormat)
      user_error("{}: not a bcdtrain weights file or checkpoint (format attribute missing)", path);
    return f;
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read weights file ({})", path, e.getDetailMsg());
  }
}
}  // namespace

void save_weights(const LlamaModel& model, const std::string& path, const std::string& config_toml,
                  const std::vector<std::pair<std::string, std::string>>& extra_attrs) {
  H5::Exception::dontPrint();
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    H5::H5File f(tmp, H5F_ACC_TRUNC);
    write_str_attr(f, "format", kFormat);
    H5::Attribute va = f.createAttribute("version", H5::PredType::NATIVE_INT, H5::DataSpace(H5S_SCALAR));
    va.write(H5::PredType::NATIVE_INT, &kVersion);
    write_str_attr(f, "config", config_toml);
    for (const auto& [name, value] : extra_attrs) write_str_attr(f, name.c_str(), value);
    H5::Group g = f.createGroup("/blocks");
    for (int i = 0; i < model.n_blocks(); ++i) {
      const Block& b = model.block(i);
      torch::Tensor d = b.data().detach().to(torch::kCPU, torch::kFloat32).contiguous();
      hsize_t n = static_cast<hsize_t>(d.numel());
      H5::DataSet ds = g.createDataSet(b.name(), H5::PredType::NATIVE_FLOAT, H5::DataSpace(1, &n));
      ds.write(d.data_ptr<float>(), H5::PredType::NATIVE_FLOAT);
    }
    f.close();
  } catch (const H5::Exception& e) {
    std::remove(tmp.c_str());
    user_error("{}: cannot write weights ({})", path, e.getDetailMsg());
  }
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    user_error("{}: cannot rename temporary weights file into place", path);
  }
}

std::string read_weights_config(const std::string& path) {
  H5::Exception::dontPrint();
  H5::H5File f = open_checked(path);
  try {
    return read_str_attr(f, "config");
  } catch (const H5::Exception& e) {
    user_error("{}: no config attribute ({})", path, e.getDetailMsg());
  }
}

std::string read_weights_attr(const std::string& path, const std::string& name) {
  H5::Exception::dontPrint();
  H5::H5File f = open_checked(path);
  try {
    return f.attrExists(name) ? read_str_attr(f, name.c_str()) : "";
  } catch (const H5::Exception& e) {
    user_error("{}: cannot read attribute {} ({})", path, name, e.getDetailMsg());
  }
}

void load_weights(LlamaModel& model, const std::string& path) {
  H5::Exception::dontPrint();
  H5::H5File f = open_checked(path);
  std::vector<torch::Tensor> loaded;
  for (int i = 0; i < model.n_blocks(); ++i) {
    const Block& b = model.block(i);
    const std::string name = "/blocks/" + b.name();
    try {
      if (!f.nameExists(name)) user_error("{}: block {} missing", path, b.name());
      H5::DataSet ds = f.openDataSet(name);
      H5::DataSpace sp = ds.getSpace();
      hsize_t n = 0;
      if (sp.getSimpleExtentNdims() != 1) user_error("{}: block {} is not 1-D", path, b.name());
      sp.getSimpleExtentDims(&n);
      if (static_cast<int64_t>(n) != b.numel())
        user_error("{}: block {} has {} elements, the model expects {}", path, b.name(), n, b.numel());
      torch::Tensor t = torch::empty({b.numel()}, torch::kFloat32);
      ds.read(t.data_ptr<float>(), H5::PredType::NATIVE_FLOAT);
      loaded.push_back(t);
    } catch (const H5::Exception& e) {
      user_error("{}: cannot read block {} ({})", path, b.name(), e.getDetailMsg());
    }
  }
  torch::NoGradGuard ng;
  for (int i = 0; i < model.n_blocks(); ++i) model.block(i).data().copy_(loaded[i]);
}

}  // namespace bcd
