// The NVMe tier's directories (memory/nvme_dirs.h).
#include "memory/nvme_dirs.h"

#include <filesystem>
#include <system_error>

#include "base/error.h"

namespace bcd {

std::vector<std::string> nvme_dirs(const std::vector<std::string>& nvme_paths, int rank, int world_size,
                                   NvmeStore store) {
  std::vector<std::string> dirs;
  for (const std::string& p : nvme_paths) {
    std::string d = world_size > 1 ? p + "/rank" + std::to_string(rank) : p;
    if (store == NvmeStore::kWeights) d += "/weights";
    dirs.push_back(std::move(d));
  }
  return dirs;
}

void create_nvme_dirs(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) user_error("config: [memory] nvme_paths: cannot create {} ({})", d, ec.message());
  }
}

std::vector<std::string> nvme_run_dirs(const std::vector<std::string>& nvme_paths, int rank, int world_size) {
  std::vector<std::string> out;
  const std::vector<std::string> weights = nvme_dirs(nvme_paths, rank, world_size, NvmeStore::kWeights);
  const std::vector<std::string> state = nvme_dirs(nvme_paths, rank, world_size, NvmeStore::kState);
  for (size_t i = 0; i < nvme_paths.size(); ++i) {
    out.push_back(weights[i]);
    if (state[i] != nvme_paths[i]) out.push_back(state[i]);
  }
  return out;
}

}  // namespace bcd
