// Checkpoint writing and reading of a run's state (layout in train_state.h).
#include "runtime/train_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "io/checkpoint.h"
#include "runtime/run_setup.h"

namespace bcd {

namespace {

// Every rank holds the same weights and (global) data position, so rank 0's copy is the
// checkpoint's. The optimizer state of a sharded run is gathered to rank 0 unit by unit: the
// checkpoint holds whole units whatever the world size, and a resume on any number of ranks
// takes its slices from it.
constexpr int kRank = 0;

std::string unit_group(const TrainUnit& u) { return rank_group(kRank) + "/optimizer/" + u.name; }

// The whole state of `unit` (regions of S elements) on rank 0, from every rank's slice; every
// rank takes part. Empty elsewhere, and when the unit holds nothing yet.
std::vector<float> gathered_unit_state(RunSetup& run, int unit, int64_t* steps) {
  BlockAdamW& opt = *run.block_opt;
  std::vector<float> mine = opt.unit_state(unit, steps);
  const int n = opt.shard_count();
  if (n == 1) return mine;
  const int64_t regions = opt.unit_regions(unit), elems = opt.unit_elems(unit);
  if (regions == 0) return {};
  const ShardRange own = opt.shard(unit);
  BCD_CHECK(static_cast<int64_t>(mine.size()) == regions * own.len, "unit {}: {} state elements, expected {} x {}",
            unit, mine.size(), regions, own.len);
  torch::Tensor send = torch::zeros({regions * own.chunk}, torch::kFloat32);
  for (int64_t k = 0; k < regions; ++k)
    send.narrow(0, k * own.chunk, own.len)
        .copy_(torch::from_blob(mine.data() + k * own.len, {own.len}, torch::kFloat32));
  const torch::Device dev = run.pg->device();
  torch::Tensor all;
  if (run.is_root()) all = torch::empty({n * regions * own.chunk}, torch::TensorOptions(torch::kFloat32).device(dev));
  run.pg->gather_to_root(send.to(dev), all);
  if (!run.is_root()) return {};
  all = all.cpu();
  const float* src = all.data_ptr<float>();
  std::vector<float> whole(static_cast<size_t>(regions * elems));
  for (int r = 0; r < n; ++r) {
    const ShardRange sr = shard_range(elems, r, n);
    for (int64_t k = 0; k < regions; ++k)
      std::copy_n(src + (r * regions + k) * own.chunk, sr.len, whole.begin() + k * elems + sr.begin);
  }
  return whole;
}

// This rank's slice of a whole unit state read from a checkpoint.
std::vector<float> own_slice(const BlockAdamW& opt, int unit, std::vector<float> whole, const std::string& where) {
  if (opt.shard_count() == 1 || whole.empty()) return whole;
  const int64_t elems = opt.unit_elems(unit);
  if (static_cast<int64_t>(whole.size()) % elems != 0)
    user_error("{}: unit {} has {} state elements, not a multiple of its {} parameters", where, opt.units()[unit].name,
               whole.size(), elems);
  const ShardRange own = opt.shard(unit);
  const int64_t regions = static_cast<int64_t>(whole.size()) / elems;
  std::vector<float> mine(static_cast<size_t>(regions * own.len));
  for (int64_t k = 0; k < regions; ++k)
    std::copy_n(whole.begin() + k * elems + own.begin, own.len, mine.begin() + k * own.len);
  return mine;
}

// Writes the checkpoint on rank 0 (`w`); the other ranks (w == nullptr) take part in the
// gathers of the optimizer state only.
void write_train_state(RunSetup& run, int64_t step, CheckpointWriter* w) {
  BlockAdamW& opt = *run.block_opt;
  if (w) {
    w->attr("/", "config", config_to_toml(run.cfg));
    w->attr("/", "step", step);
    w->attr("/", "tokens", step * run.tokens_per_step());
    w->attr("/", "world_size", static_cast<int64_t>(run.pg->world_size()));
    for (const Block& b : run.model.blocks()) {
      torch::Tensor t = b.data().detach().to(torch::kCPU, torch::kFloat32).contiguous();
      w->floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(t.numel()));
    }
    const SchedulerState ss = run.sched.state();
    w->attr("/scheduler", "epoch", static_cast<int64_t>(ss.epoch));
    w->attr("/scheduler", "position", static_cast<int64_t>(ss.position));
    w->attr("/scheduler", "step_in_visit", static_cast<int64_t>(ss.step_in_visit));
    w->attr("/scheduler", "active", static_cast<int64_t>(opt.active()));
    const LoaderState ls = run.train_loader.state();
    const std::string loader = rank_group(kRank) + "/loader";
    w->attr(loader, "epoch", static_cast<int64_t>(ls.epoch));
    w->attr(loader, "cursor", static_cast<int64_t>(ls.cursor));
  }
  for (int u = 0; u < static_cast<int>(run.units.size()); ++u) {
    int64_t steps = 0;
    const std::vector<float> img = gathered_unit_state(run, u, &steps);
    if (!w || (img.empty() && u != opt.active())) continue;  // nothing to keep yet
    w->floats(unit_group(run.units[u]) + "/image", img.data(), img.size());
    w->attr(unit_group(run.units[u]), "steps", steps);
  }
}

}  // namespace

std::string rank_group(int rank) { return "/rank" + std::to_string(rank); }

std::string save_checkpoint(RunSetup& run, int64_t step) {
  const std::string dir = run.cfg.train.run_dir + "/checkpoints";
  std::error_code ec;
  if (run.is_root()) std::filesystem::create_directories(dir, ec);
  if (ec) user_error("{}: cannot create ({})", dir, ec.message());
  const std::string path = fmt::format("{}/step-{:08d}.h5", dir, step);
  if (!run.is_root()) {
    write_train_state(run, step, nullptr);
    return "";
  }
  CheckpointWriter w(path);
  write_train_state(run, step, &w);
  w.commit();
  prune_checkpoints(dir, run.cfg.train.keep_checkpoints);
  return path;
}

int64_t read_train_state(RunSetup& run, const std::string& path) {
  CheckpointReader ck(path);
  const int64_t step = ck.attr_int("/", "step");
  for (Block& b : run.model.blocks()) {
    torch::Tensor t = torch::empty({b.numel()}, torch::kFloat32);
    ck.floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(b.numel()));
    torch::NoGradGuard ng;
    b.data().copy_(t);
  }
  SchedulerState ss;
  ss.epoch = static_cast<uint64_t>(ck.attr_int("/scheduler", "epoch"));
  ss.position = static_cast<uint64_t>(ck.attr_int("/scheduler", "position"));
  ss.step_in_visit = static_cast<uint64_t>(ck.attr_int("/scheduler", "step_in_visit"));
  run.sched.restore(ss);
  const int64_t active = ck.attr_int("/scheduler", "active");
  if (active != run.sched.current())
    user_error("{}: /scheduler: active unit {} does not match the schedule's ({}); was the [bcd] config changed?",
               path, active, run.sched.current());
  const std::string loader = rank_group(kRank) + "/loader";
  LoaderState ls;
  ls.epoch = static_cast<uint64_t>(ck.attr_int(loader, "epoch"));
  ls.cursor = static_cast<uint64_t>(ck.attr_int(loader, "cursor"));
  run.train_loader.restore(ls);

  // Inactive units' images go to their homes first; the active one comes into the compute tier.
  BlockAdamW& opt = *run.block_opt;
  auto read_unit = [&](int u) {
    const std::string g = unit_group(run.units[u]);
    if (!ck.has(g)) return;
    std::vector<float> img(ck.length(g + "/image"));
    ck.floats(g + "/image", img.data(), img.size());
    opt.restore_unit_state(u, own_slice(opt, u, std::move(img), path), ck.attr_int(g, "steps"), path);
  };
  for (int u = 0; u < static_cast<int>(run.units.size()); ++u)
    if (u != active) read_unit(u);
  opt.activate(static_cast<int>(active));
  read_unit(static_cast<int>(active));
  return step;
}

}  // namespace bcd
