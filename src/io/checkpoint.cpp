// Checkpoint files: the format check on open, listing and retention.
#include "io/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <regex>

#include "base/error.h"

namespace bcd {

namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(std::string path) : StateFileReader(std::move(path), "checkpoint") {
  const std::string format = this->format();
  if (format.empty()) user_error("{}: not a bcdtrain checkpoint (no format attribute)", this->path());
  if (format != kCheckpointFormat)
    user_error("{}: not a bcdtrain checkpoint (format \"{}\"; a weights file can start a run with "
               "model.init_from, not resume one)", this->path(), format);
  const int64_t v = attr_int("/", "version");
  if (v != kCheckpointVersion)
    user_error("{}: checkpoint version {}, this build reads {}", this->path(), v, kCheckpointVersion);
}

// ---- Files ----

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  static const std::regex name(R"(step-(\d+)\.h5)");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string fn = e.path().filename().string();
    if (std::regex_match(fn, m, name)) found.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string resolve_checkpoint(const std::string& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p;
  if (!fs::is_directory(p, ec)) user_error("--resume {}: no such checkpoint file or run directory", p);
  const auto all = list_checkpoints(p + "/checkpoints");
  if (all.empty()) user_error("--resume {}: no checkpoint in {}/checkpoints", p, p);
  return all.back();
}

void prune_checkpoints(const std::string& dir, int64_t keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string fn = e.path().filename().string();
    const auto tmp = fn.find(".h5.tmp-");
    if (tmp == std::string::npos) continue;
    const int pid = std::atoi(fn.c_str() + tmp + 8);
    if (pid != ::getpid() && ::kill(pid, 0) != 0) fs::remove(e.path(), ec);  // its writer is gone
  }
  if (keep <= 0) return;
  const auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove(all[i], ec);
}

}  // namespace bcd
