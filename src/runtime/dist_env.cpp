// Where the ranks come from: the environment a launcher (bcdtrain launch, torchrun) or Slurm
// sets (runtime/process_group.h: DistEnv).
#include <cstdlib>
#include <optional>
#include <string>

#include "base/bytes.h"
#include "base/error.h"
#include "runtime/process_group.h"

namespace bcd {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

// A whole non-negative number from an environment variable; UserError naming it otherwise.
std::optional<int64_t> env_int(const char* name) {
  const auto v = env(name);
  if (!v) return std::nullopt;
  const std::optional<int64_t> n = parse_count(*v);
  if (!n) user_error("environment: {}=\"{}\": expected a whole number >= 0", name, *v);
  return *n;
}

int required_int(const char* name, const char* with) {
  const auto v = env_int(name);
  if (!v) user_error("environment: {} is set but {} is not", with, name);
  return static_cast<int>(*v);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  const size_t close = first.find(']', open);
  if (close == std::string::npos) user_error("environment: SLURM_JOB_NODELIST=\"{}\": unbalanced '['", nodelist);
  // "gpu[03-05,09]": the prefix and the first number of the range, zero padding kept.
  std::string range = first.substr(open + 1, close - open - 1);
  range = range.substr(0, range.find_first_of(",-"));
  if (range.empty()) user_error("environment: SLURM_JOB_NODELIST=\"{}\": empty range", nodelist);
  return first.substr(0, open) + range + first.substr(close + 1);
}

DistEnv DistEnv::from_environment() {
  DistEnv d;
  if (env("WORLD_SIZE") || env("RANK")) {
    d.source = "RANK/WORLD_SIZE";
    d.rank = required_int("RANK", "WORLD_SIZE or RANK");
    d.world_size = required_int("WORLD_SIZE", "WORLD_SIZE or RANK");
    d.local_rank = static_cast<int>(env_int("LOCAL_RANK").value_or(d.rank));
    d.local_world_size = static_cast<int>(env_int("LOCAL_WORLD_SIZE").value_or(d.world_size));
    if (d.world_size > 1 && !env("MASTER_ADDR"))
      user_error("environment: WORLD_SIZE={} but MASTER_ADDR is not set (the host of rank 0)", d.world_size);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    d.source = "SLURM_PROCID/SLURM_NTASKS";
    d.rank = required_int("SLURM_PROCID", "SLURM_NTASKS");
    d.world_size = required_int("SLURM_NTASKS", "SLURM_PROCID");
    d.local_rank = static_cast<int>(env_int("SLURM_LOCALID").value_or(0));
    d.local_world_size = static_cast<int>(env_int("SLURM_NTASKS_PER_NODE").value_or(1));
    if (!env("MASTER_ADDR")) {
      const auto nodes = env("SLURM_JOB_NODELIST");
      if (!nodes && d.world_size > 1)
        user_error("environment: SLURM_NTASKS={} but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set",
                   d.world_size);
      if (nodes) d.master_addr = first_slurm_host(*nodes);
    }
    if (!env("MASTER_PORT")) d.master_port = 29500 + static_cast<int>(env_int("SLURM_JOB_ID").value_or(0) % 1000);
  } else {
    return d;
  }
  if (const auto a = env("MASTER_ADDR")) d.master_addr = *a;
  if (const auto p = env_int("MASTER_PORT")) {
    if (*p < 1 || *p > 65535) user_error("environment: MASTER_PORT={}: expected a port in [1, 65535]", *p);
    d.master_port = static_cast<int>(*p);
  }
  if (d.world_size < 1) user_error("environment: world size {} (from {}): expected >= 1", d.world_size, d.source);
  if (d.local_world_size < 1) d.local_world_size = 1;
  if (d.rank >= d.world_size)
    user_error("environment: rank {} is outside the world of {} ranks (from {})", d.rank, d.world_size, d.source);
  return d;
}

}  // namespace bcd
