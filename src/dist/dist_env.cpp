// Where the ranks come from: the environment a launcher (bcdtrain launch, torchrun, mpirun, srun,
// Kubeflow) sets (dist/process_group.h: DistEnv), and what a rank leaves for torchrun when it
// fails (its error file).
#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/error.h"
#include "base/files.h"
#include "dist/launcher.h"
#include "dist/process_group.h"

namespace bcd {

namespace {

// The variables of one process, read through DistEnv::Lookup.
class Vars {
 public:
  explicit Vars(const DistEnv::Lookup& get) : get_(get) {}
  std::optional<std::string> text(const char* name) const { return get_(name); }
  bool has(const char* name) const { return get_(name).has_value(); }
  // A whole non-negative number; UserError naming the variable otherwise.
  std::optional<int64_t> count(const char* name) const {
    const auto v = get_(name);
    if (!v) return std::nullopt;
    const std::optional<int64_t> n = parse_count(*v);
    if (!n) user_error("environment: {}=\"{}\": expected a whole number >= 0", name, *v);
    return *n;
  }
  int required(const char* name, const char* with) const {
    const auto v = count(name);
    if (!v) user_error("environment: {} is set but {} is not", with, name);
    return static_cast<int>(*v);
  }

 private:
  const DistEnv::Lookup& get_;
};

// MASTER_PORT, else `fallback` (another launcher's variable), else `dflt`; in [1, 65535].
int port_of(const Vars& v, const char* fallback, int dflt) {
  for (const char* name : {"MASTER_PORT", fallback}) {
    if (!name) continue;
    if (const auto p = v.count(name)) {
      if (*p < 1 || *p > 65535) user_error("environment: {}={}: expected a port in [1, 65535]", name, *p);
      return static_cast<int>(*p);
    }
  }
  return dflt;
}

// A launcher's rank and world size, each required with the other; `source` names them in messages.
void read_rank_and_size(const Vars& v, DistEnv& d, const char* source, const char* rank, const char* size) {
  d.source = source;
  d.rank = v.required(rank, size);
  d.world_size = v.required(size, rank);
}

// torchrun's RANK/WORLD_SIZE (also `bcdtrain launch`'s and a Kubeflow PyTorchJob's).
void read_torchrun(const Vars& v, DistEnv& d) {
  read_rank_and_size(v, d, "RANK/WORLD_SIZE", "RANK", "WORLD_SIZE");
  if (const auto local = v.count("LOCAL_RANK")) {
    d.local_rank = static_cast<int>(*local);
    d.local_world_size = static_cast<int>(v.count("LOCAL_WORLD_SIZE").value_or(d.world_size));
  } else {  // a PyTorchJob's pod: one rank on its machine
    d.local_world_size = static_cast<int>(v.count("LOCAL_WORLD_SIZE").value_or(1));
  }
  if (d.world_size > 1 && !v.has("MASTER_ADDR"))
    user_error("environment: WORLD_SIZE={} but MASTER_ADDR is not set (the host of rank 0)", d.world_size);
  d.agent_store = v.text("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  d.restart_count = static_cast<int>(v.count("TORCHELASTIC_RESTART_COUNT").value_or(0));
  d.master_port = port_of(v, nullptr, d.master_port);
}

// Open MPI's mpirun: the ranks and the node's ranks; the store's host is the user's to give.
void read_open_mpi(const Vars& v, DistEnv& d) {
  read_rank_and_size(v, d, "OMPI_COMM_WORLD_RANK/SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  d.local_rank = static_cast<int>(v.count("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0));
  d.local_world_size = static_cast<int>(v.count("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1));
  if (d.world_size > 1 && !v.has("MASTER_ADDR"))
    user_error("environment: OMPI_COMM_WORLD_SIZE={} but MASTER_ADDR is not set: give mpirun -x MASTER_ADDR=<the "
               "host of rank 0>",
               d.world_size);
  d.master_port = port_of(v, nullptr, d.master_port);
}

void read_slurm(const Vars& v, DistEnv& d) {
  read_rank_and_size(v, d, "SLURM_PROCID/SLURM_NTASKS", "SLURM_PROCID", "SLURM_NTASKS");
  d.local_rank = static_cast<int>(v.count("SLURM_LOCALID").value_or(0));
  d.local_world_size = static_cast<int>(v.count("SLURM_NTASKS_PER_NODE").value_or(1));
  if (!v.has("MASTER_ADDR")) {
    const auto nodes = v.text("SLURM_JOB_NODELIST");
    if (!nodes && d.world_size > 1)
      user_error("environment: SLURM_NTASKS={} but neither MASTER_ADDR nor SLURM_JOB_NODELIST is set", d.world_size);
    if (nodes) d.master_addr = first_slurm_host(*nodes);
  }
  // srun --ntasks without --ntasks-per-node sets no SLURM_NTASKS_PER_NODE: at least this many.
  d.local_world_size = std::max(d.local_world_size, d.local_rank + 1);
  d.master_port = port_of(v, nullptr, 29500 + static_cast<int>(v.count("SLURM_JOB_ID").value_or(0) % 1000));
}

// Kubeflow's PET_* (torchrun's own variables, as a TrainJob sets them for it): one rank per pod.
void read_kubeflow(const Vars& v, DistEnv& d) {
  read_rank_and_size(v, d, "PET_NODE_RANK/PET_NNODES", "PET_NODE_RANK", "PET_NNODES");
  const auto per_node = v.text("PET_NPROC_PER_NODE");
  if (per_node && *per_node != "1")
    user_error("environment: PET_NPROC_PER_NODE={}: several ranks in a pod need a launcher to start them; run "
               "`bcdtrain launch --nproc N train ...` or `torchrun --no-python bcdtrain train ...` in the pod",
               *per_node);
  if (!v.has("MASTER_ADDR")) {
    const auto addr = v.text("PET_MASTER_ADDR");
    if (!addr && d.world_size > 1)
      user_error("environment: PET_NNODES={} but neither MASTER_ADDR nor PET_MASTER_ADDR is set", d.world_size);
    if (addr) d.master_addr = *addr;
  }
  d.master_port = port_of(v, "PET_MASTER_PORT", d.master_port);
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
  return from([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

DistEnv DistEnv::from(const Lookup& get) {
  const Vars v(get);
  DistEnv d;
  if (v.has("WORLD_SIZE") || v.has("RANK")) read_torchrun(v, d);
  // Before Slurm's: mpirun inside an allocation leaves the batch step's SLURM_PROCID=0 to every rank.
  else if (v.has("OMPI_COMM_WORLD_RANK") || v.has("OMPI_COMM_WORLD_SIZE")) read_open_mpi(v, d);
  else if (v.has("SLURM_PROCID") && v.has("SLURM_NTASKS")) read_slurm(v, d);
  else if (v.has("PET_NODE_RANK") || v.has("PET_NNODES")) read_kubeflow(v, d);
  else return d;
  if (const auto a = v.text("MASTER_ADDR")) d.master_addr = *a;
  if (d.world_size < 1) user_error("environment: world size {} (from {}): expected >= 1", d.world_size, d.source);
  if (d.local_world_size < 1) d.local_world_size = 1;
  if (d.rank >= d.world_size)
    user_error("environment: rank {} is outside the world of {} ranks (from {})", d.rank, d.world_size, d.source);
  if (d.local_rank >= d.local_world_size)
    user_error("environment: local rank {} is outside the {} ranks on this machine (from {})", d.local_rank,
               d.local_world_size, d.source);
  return d;
}

void write_launcher_error_file(const std::string& message, int exit_code) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return;
  // The form torch.distributed.elastic's @record writes; torchrun names the failure with the
  // earliest timestamp as the root cause and prints its message.
  const nlohmann::json record = {
      {"message",
       {{"message", message},
        {"errorCode", exit_code},
        {"extraInfo", {{"py_callstack", message}, {"timestamp", std::to_string(std::time(nullptr))}}}}}};
  try {
    write_file_atomic(path, record.dump() + "\n", "torchrun's error file (TORCHELASTIC_ERROR_FILE)");
  } catch (const std::exception&) {
    // the error itself is on stderr already; the launcher falls back to the exit code
  }
}

}  // namespace bcd
