// Checkpoint writing and reading of a run's state (layout in train_state.h).
#include "runtime/train_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "base/error.h"
#include "base/progress.h"
#include "io/checkpoint.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;

std::string unit_group(int rank, const UnitShape& u) { return rank_group(rank) + "/optimizer/" + u.name; }

// This rank's slice of every unit's optimizer state (whole units when not sharded), under
// /rank<rank>/optimizer/<unit>: image, steps, elems (the unit's S).
void write_optimizer_state(BlockAdamW& opt, const std::vector<UnitShape>& units, int rank, StateFileWriter& w) {
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    int64_t steps = 0;
    const std::vector<float> img = opt.unit_state(u, &steps);
    if (img.empty() && u != opt.active()) continue;  // nothing to keep yet
    const std::string g = unit_group(rank, units[u]);
    w.floats(g + "/image", img.data(), img.size());
    w.attr(g, "steps", steps);
    w.attr(g, "elems", opt.unit_elems(u));
  }
}

// Every rank's part of a save went well, or every rank stops with an error: the rank that failed
// with its own, the others naming it. `failed`: this rank's error ("" when none); `written`: the
// file this rank committed in this part, removed when the save is given up.
void agree(const TrainState& run, const std::string& failed, const std::string& path, const std::string& written,
           const char* part) {
  const double failures = run.pg.sum_over_ranks({failed.empty() ? 0.0 : 1.0})[0];
  if (failures == 0) return;
  std::error_code ec;
  if (!written.empty()) fs::remove(written, ec);  // a slice of no checkpoint
  if (!failed.empty()) user_error("{}", failed);
  user_error("{}: not written: {} of {} ranks could not write {} (their errors say why)", path,
             static_cast<int>(failures), run.pg.world_size(), part);
}

// Rank 0's checkpoint file: weights, schedule, data position, and the optimizer state itself
// (not sharded) or the token of its slice files.
void write_checkpoint_file(const TrainState& run, int64_t step, const std::string& token, CheckpointWriter& w) {
  BlockAdamW& opt = run.opt;
  w.attr("/", "config", config_to_toml(run.cfg));
  w.attr("/", "step", step);
  w.attr("/", "tokens", step * run.tokens_per_step);
  w.attr("/", "world_size", static_cast<int64_t>(run.pg.world_size()));
  for (int i = 0; i < run.model.n_blocks(); ++i) {
    const Block& b = run.model.block(i);
    const BlockAccess access(run.model, i);  // a streamed block homed on NVMe is read back for this
    torch::Tensor t = b.data().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    w.floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(t.numel()));
  }
  const SchedulerState ss = run.sched.state();
  w.attr("/scheduler", "epoch", static_cast<int64_t>(ss.epoch));
  w.attr("/scheduler", "position", static_cast<int64_t>(ss.position));
  w.attr("/scheduler", "step_in_visit", static_cast<int64_t>(ss.step_in_visit));
  w.attr("/scheduler", "active", static_cast<int64_t>(opt.active()));
  const LoaderState ls = run.train_loader.state();
  const std::string loader = rank_group(0) + "/loader";
  w.attr(loader, "epoch", static_cast<int64_t>(ls.epoch));
  w.attr(loader, "cursor", static_cast<int64_t>(ls.cursor));
  if (!ls.more.empty()) {  // a mixture: windows drawn, and every other dataset's position
    w.attr(loader, "drawn", static_cast<int64_t>(ls.drawn));
    for (size_t i = 0; i < ls.more.size(); ++i) {
      w.attr(loader, fmt::format("epoch_{}", i + 1), static_cast<int64_t>(ls.more[i].epoch));
      w.attr(loader, fmt::format("cursor_{}", i + 1), static_cast<int64_t>(ls.more[i].cursor));
    }
  }
  if (opt.shard_count() == 1) {
    write_optimizer_state(opt, run.units, 0, w);
  } else {
    w.attr("/", "optimizer_shards", static_cast<int64_t>(opt.shard_count()));
    w.attr("/", "shard_token", token);
  }
}

}  // namespace

std::string rank_group(int rank) { return "/rank" + std::to_string(rank); }

std::string save_checkpoint(const TrainState& run, int64_t step) {
  const std::string dir = run.cfg.train.run_dir + "/checkpoints";
  const std::string path = fmt::format("{}/step-{:08d}.h5", dir, step);
  BlockAdamW& opt = run.opt;
  const int shards = opt.shard_count(), rank = run.pg.rank();
  std::error_code ec;
  if (run.pg.is_root() || shards > 1) fs::create_directories(dir, ec);
  if (ec) user_error("{}: cannot create ({})", dir, ec.message());

  // Sharded: every rank writes its slice under the token rank 0 draws for this save; the
  // checkpoint file (naming the token) is written only once every slice is committed.
  std::string token, slice;
  if (shards > 1) {
    double drawn = 0;
    if (run.pg.is_root()) {
      std::random_device rd;
      const uint64_t bits = (static_cast<uint64_t>(rd()) << 32 | rd()) ^
                            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      drawn = static_cast<double>(bits & ((uint64_t{1} << 40) - 1));  // exact as a double
    }
    token = fmt::format("{:010x}", static_cast<uint64_t>(run.pg.sum_over_ranks({drawn})[0]));
    std::string failed;
    try {
      CheckpointWriter w(checkpoint_shard_path(path, rank, shards, token));
      w.attr("/", "shard_of", fs::path(path).filename().string());
      w.attr("/", "shard_token", token);
      w.attr("/", "shard_rank", static_cast<int64_t>(rank));
      w.attr("/", "shard_count", static_cast<int64_t>(shards));
      w.attr("/", "step", step);
      write_optimizer_state(opt, run.units, rank, w);
      w.commit();
      slice = checkpoint_shard_path(path, rank, shards, token);
    } catch (const UserError& e) {
      failed = e.what();
    }
    agree(run, failed, path, slice, "their slice of the optimizer state");
  }

  std::string failed;
  if (run.pg.is_root()) {
    try {
      CheckpointWriter w(path);
      write_checkpoint_file(run, step, token, w);
      w.commit();
    } catch (const UserError& e) {
      failed = e.what();
    }
  }
  if (run.pg.world_size() > 1) agree(run, failed, path, slice, "the checkpoint file");
  else if (!failed.empty()) user_error("{}", failed);
  if (!run.pg.is_root()) return "";
  prune_checkpoints(dir, run.cfg.train.keep_checkpoints);
  return path;
}

namespace {

// The data loader's position (of `more` mixed datasets beyond the first) in checkpoint `ck`.
LoaderState read_loader_state(const CheckpointReader& ck, const std::string& path, size_t more) {
  const std::string loader = rank_group(0) + "/loader";
  LoaderState ls;
  ls.epoch = static_cast<uint64_t>(ck.attr_int(loader, "epoch"));
  ls.cursor = static_cast<uint64_t>(ck.attr_int(loader, "cursor"));
  ls.more.resize(more);
  if (!ls.more.empty()) {
    if (!ck.has_attr(loader, "drawn"))
      user_error("{}: {} holds one dataset's position, but this run mixes {} datasets ([data] paths); resume it "
                 "with the data it was saved with",
                 path, loader, ls.more.size() + 1);
    ls.drawn = static_cast<uint64_t>(ck.attr_int(loader, "drawn"));
    for (size_t i = 0; i < ls.more.size(); ++i) {
      const std::string e = fmt::format("epoch_{}", i + 1), c = fmt::format("cursor_{}", i + 1);
      if (!ck.has_attr(loader, e) || !ck.has_attr(loader, c))
        user_error("{}: {} holds the positions of fewer datasets than the {} this run mixes ([data] paths)", path,
                   loader, ls.more.size() + 1);
      ls.more[i] = SourcePosition{static_cast<uint64_t>(ck.attr_int(loader, e)),
                                  static_cast<uint64_t>(ck.attr_int(loader, c))};
    }
  } else if (ck.has_attr(loader, "drawn")) {
    user_error("{}: {} holds a mixture of datasets' positions, but this run reads one dataset ([data] path); "
               "resume it with the data it was saved with",
               path, loader);
  }
  return ls;
}

}  // namespace

int64_t read_train_state(const TrainState& run, const std::string& path) {
  CheckpointReader ck(path);
  if (ck.has_attr("/", "shard_of"))
    user_error("{}: one rank's slice of the checkpoint {}: resume from that file, or from the run directory", path,
               ck.attr_str("/", "shard_of"));
  const int64_t step = ck.attr_int("/", "step");
  // the weights of every block, then the optimizer state of every unit
  Progress reading("reading checkpoint " + fs::path(path).filename().string(),
                   run.model.blocks().size() + run.units.size(), "parts");
  for (int i = 0; i < run.model.n_blocks(); ++i) {
    Block& b = run.model.block(i);
    torch::Tensor t = torch::empty({b.numel()}, torch::kFloat32);
    ck.floats("/blocks/" + b.name(), t.data_ptr<float>(), static_cast<uint64_t>(b.numel()));
    torch::NoGradGuard ng;
    BlockAccess access(run.model, i);
    b.data().copy_(t);
    access.commit();
    reading.add();
  }
  if (run.streamed) run.streamed->ready();  // the shared streamed weights are all written before any rank reads them
  SchedulerState ss;
  ss.epoch = static_cast<uint64_t>(ck.attr_int("/scheduler", "epoch"));
  ss.position = static_cast<uint64_t>(ck.attr_int("/scheduler", "position"));
  ss.step_in_visit = static_cast<uint64_t>(ck.attr_int("/scheduler", "step_in_visit"));
  run.sched.restore(ss);
  const int64_t active = ck.attr_int("/scheduler", "active");
  if (active != run.sched.current())
    user_error("{}: /scheduler: active unit {} does not match the schedule's ({}); was the [bcd] config changed?",
               path, active, run.sched.current());
  run.train_loader.restore(read_loader_state(ck, path, run.train_loader.state().more.size()));

  // The optimizer state: whole units in this file (/rank0/optimizer), or rank k of n's slice in
  // its slice file (/rank<k>/optimizer). Each unit's state of this run's slice is cut from the
  // slices it overlaps: the same world size reads its own file, another re-slices.
  BlockAdamW& opt = run.opt;
  const int64_t n = ck.has_attr("/", "optimizer_shards") ? ck.attr_int("/", "optimizer_shards") : 1;
  if (n < 1 || n > (int64_t{1} << 20)) user_error("{}: optimizer_shards = {}: expected 1 to 2^20 slices", path, n);
  const std::string token = n > 1 ? ck.attr_str("/", "shard_token") : "";
  std::vector<std::unique_ptr<CheckpointReader>> slices(static_cast<size_t>(n));
  auto slice_file = [&](int k) -> const CheckpointReader& {
    if (n == 1) return ck;
    if (!slices[k]) {
      const std::string sp = checkpoint_shard_path(path, k, static_cast<int>(n), token);
      try {
        slices[k] = std::make_unique<CheckpointReader>(sp);
      } catch (const UserError& e) {
        user_error("{}: rank {}'s slice of the optimizer state is missing or unreadable: {}", path, k, e.what());
      }
      const CheckpointReader& f = *slices[k];
      if (!f.has_attr("/", "shard_token") || f.attr_str("/", "shard_token") != token ||
          f.attr_int("/", "shard_rank") != k || f.attr_int("/", "shard_count") != n || f.attr_int("/", "step") != step)
        user_error("{}: not rank {} of {}'s slice of {} (another save wrote it)", sp, k, n, path);
    }
    return *slices[k];
  };
  auto read_unit = [&](int u) {
    const UnitShape& tu = run.units[u];
    const int64_t elems = opt.unit_elems(u);
    const ShardRange own = opt.shard(u);
    std::vector<float> mine;
    int64_t steps = 0, regions = 0;
    int looked = 0, found = 0;
    for (int k = 0; k < n; ++k) {
      const ShardRange old = shard_range(elems, k, static_cast<int>(n));
      const int64_t lo = std::max(old.begin, own.begin), hi = std::min(old.begin + old.len, own.begin + own.len);
      if (hi <= lo) continue;
      ++looked;
      const CheckpointReader& f = slice_file(k);
      const std::string g = unit_group(k, tu);
      if (!f.has(g)) continue;
      ++found;
      if (f.has_attr(g, "elems") && f.attr_int(g, "elems") != elems)
        user_error("{}: {}: a unit of {} state elements, the model's {} has {}", f.path(), g, f.attr_int(g, "elems"),
                   tu.name, elems);
      const uint64_t len = f.length(g + "/image");
      if (len % static_cast<uint64_t>(old.len) != 0)
        user_error("{}: unit {} has {} state elements, not a multiple of {} ({} of its {} parameters)", f.path(),
                   tu.name, len, old.len, n > 1 ? "a slice" : "all", elems);
      const int64_t r = static_cast<int64_t>(len) / old.len;
      if (found == 1) {
        regions = r, steps = f.attr_int(g, "steps");
        mine.assign(static_cast<size_t>(r * own.len), 0.0f);
      } else if (r != regions || f.attr_int(g, "steps") != steps) {
        user_error("{}: unit {}: the slices disagree ({} regions after {} updates here, {} after {} in another)",
                   f.path(), tu.name, r, f.attr_int(g, "steps"), regions, steps);
      }
      std::vector<float> img(len);
      f.floats(g + "/image", img.data(), len);
      for (int64_t j = 0; j < r; ++j)
        std::copy_n(img.begin() + j * old.len + (lo - old.begin), hi - lo, mine.begin() + j * own.len + (lo - own.begin));
    }
    if (found == 0) return;
    if (found != looked) user_error("{}: unit {}: only some slices of the optimizer state hold it", path, tu.name);
    opt.restore_unit_state(u, mine, steps, path);
  };
  // Inactive units' images go to their homes first; the active one comes into the compute tier.
  for (int u = 0; u < static_cast<int>(run.units.size()); ++u)
    if (u != active) read_unit(u), reading.add();
  opt.activate(static_cast<int>(active));
  read_unit(static_cast<int>(active));
  reading.add();
  reading.finish();
  return step;
}

}  // namespace bcd
