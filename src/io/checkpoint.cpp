// Checkpoint files: the format check on open, listing and retention.
#include "io/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>
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

namespace {
// A slice file's name: (the checkpoint's stem) and (the save's token).
const std::regex& shard_name() {
  static const std::regex name(R"((step-\d+)\.shard-\d+-of-\d+\.([0-9a-f]+)\.h5)");
  return name;
}
}  // namespace

std::string checkpoint_of_slice(const std::string& path) {
  std::smatch m;
  const std::string fn = fs::path(path).filename().string();
  return std::regex_match(fn, m, shard_name()) ? m[1].str() + ".h5" : "";
}

std::string checkpoint_shard_path(const std::string& checkpoint, int rank, int count, const std::string& token) {
  const std::string stem = checkpoint.size() > 3 && checkpoint.compare(checkpoint.size() - 3, 3, ".h5") == 0
                               ? checkpoint.substr(0, checkpoint.size() - 3)
                               : checkpoint;
  return fmt::format("{}.shard-{}-of-{}.{}.h5", stem, rank, count, token);
}

int64_t checkpoint_file_step(const std::string& path) {
  static const std::regex name(R"(step-(\d{1,18})\.h5)");
  std::smatch m;
  const std::string fn = fs::path(path).filename().string();
  return std::regex_match(fn, m, name) ? std::stoll(m[1].str()) : -1;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (const int64_t step = checkpoint_file_step(e.path().string()); step >= 0) found.emplace_back(step, e.path().string());
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::string resolve_checkpoint(const std::string& p) {
  std::error_code ec;
  if (const std::string of = checkpoint_of_slice(p); !of.empty())
    user_error("--resume {}: one rank's slice of the checkpoint {}: resume from that file, or from the run directory",
               p, of);
  if (fs::is_regular_file(p, ec)) return p;
  if (!fs::is_directory(p, ec)) user_error("--resume {}: no such checkpoint file or run directory", p);
  const auto all = list_checkpoints(p + "/checkpoints");
  if (all.empty()) user_error("--resume {}: no checkpoint in {}/checkpoints", p, p);
  return all.back();
}

void remove_checkpoints(const std::string& dir, const std::vector<std::string>& which) {
  std::error_code ec;
  for (const std::string& c : which) fs::remove(c, ec);
  prune_checkpoints(dir, 0);  // their slices (now of no checkpoint) and crashed writers' temporaries
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
  if (keep > 0) {
    const auto all = list_checkpoints(dir);
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove(all[i], ec);
  }
  // Slice files whose checkpoint file is gone or names another save.
  const std::regex& shard = shard_name();
  std::map<std::string, std::string> token_of;  // checkpoint file -> its slices' token ("" when none)
  std::vector<fs::path> orphans;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string fn = e.path().filename().string();
    if (!std::regex_match(fn, m, shard)) continue;
    const std::string ckpt = (e.path().parent_path() / (m[1].str() + ".h5")).string();
    if (!token_of.count(ckpt)) {
      std::string token;
      std::error_code ex;
      if (fs::exists(ckpt, ex)) {
        try {
          const CheckpointReader r(ckpt);
          token = r.has_attr("/", "shard_token") ? r.attr_str("/", "shard_token") : "";
        } catch (const UserError&) {
          token = "?";  // unreadable: leave its slices for whoever looks into it
        }
      }
      token_of[ckpt] = token;
    }
    if (token_of[ckpt] != "?" && token_of[ckpt] != m[2].str()) orphans.push_back(e.path());
  }
  for (const fs::path& p : orphans) fs::remove(p, ec);
}

}  // namespace bcd
