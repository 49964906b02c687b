// Setting a run up: threads and device, data, model shape, memory plan, model, BCD units and
// schedule, optimizer, resume.
#include "runtime/run_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>

#include "base/error.h"
#include "base/files.h"
#include "io/fault_engine.h"
#include "memory/nvme_dirs.h"
#include "model/hf_config.h"
#include "model/hf_import.h"
#include "runtime/cuda_torch.h"
#include "runtime/resume.h"
#include "dist/run_identity.h"

namespace bcd {

namespace {

using Clock = std::chrono::steady_clock;

// Threads and GEMM first, then the device: a device that cannot be used is refused before any data is read.
// Ranks on one node share its cores: threads = 0 gives each rank its share.
torch::Device start_compute(const TrainConfig& tc, const DistEnv& env) {
  configure_compute(tc, env.local_world_size);
  return resolve_device(tc.device, env.local_rank, env.local_world_size);
}

// The dataset in `dir`, a refusal naming [data] `key` when it cannot be opened.
TokenDataset open_dataset(const std::string& dir, const char* key) {
  try {
    return TokenDataset::open(dir);
  } catch (const UserError& e) {
    user_error("config: [data] {}: {}", key, e.what());
  }
}

// [data] path, or paths mixed by weights. A mixture's datasets must share one tokenizer (the same
// ids for the same words) and its vocabulary; the first one's stands for all of them. (How path,
// paths and weights go together is checked when the config loads.)
std::vector<DataSource> open_sources(const DataConfig& data) {
  if (data.paths.empty()) {
    if (data.path.empty())
      user_error("config: [data] path is required (a directory from `bcdtrain prepare`), or paths for a mixture");
    return {DataSource{open_dataset(data.path, "path"), 1.0}};
  }
  double total = 0;
  for (double w : data.weights) total += w;
  std::vector<DataSource> out;
  std::string first_tokenizer;
  for (size_t i = 0; i < data.paths.size(); ++i) {
    DataSource s{open_dataset(data.paths[i], "paths"), data.weights.empty() ? 1.0 : data.weights[i] / total};
    const std::string tok = read_file(s.ds.tokenizer_path(), "tokenizer");
    if (i == 0) {
      first_tokenizer = tok;
    } else if (tok != first_tokenizer || s.ds.vocab_size() != out[0].ds.vocab_size()) {
      user_error("config: [data] paths: {} was tokenized with another tokenizer than {} (a mixture needs one: "
                 "prepare every dataset with --tokenizer {})",
                 data.paths[i], data.paths[0], out[0].ds.tokenizer_path());
    }
    out.push_back(std::move(s));
  }
  return out;
}

// The dataset's tokenizer, checked against the dataset: a tokenizer.model swapped for another
// one would train on ids that mean other words, and fail only when sampling at the end. A resume
// (`resumed_run_dir` not empty) checks it against the run's own (resume.h).
Tokenizer dataset_tokenizer(const TokenDataset& ds, const std::string& resumed_run_dir = "") {
  if (!resumed_run_dir.empty()) check_resume_tokenizer(resumed_run_dir, ds.tokenizer_path());
  Tokenizer tok = Tokenizer::load(ds.tokenizer_path());
  if (tok.vocab_size() != ds.vocab_size())
    user_error("{}: has {} pieces, but the dataset beside it was tokenized with vocab_size {}: it is not the "
               "tokenizer that made this dataset (re-run `bcdtrain prepare`)",
               ds.tokenizer_path(), tok.vocab_size(), ds.vocab_size());
  return tok;
}

}  // namespace

RunPlan plan_for_run(const Config& cfg, const std::vector<DataSource>& sources, const torch::Device& device,
                     int local_ranks, int world_ranks) {
  // Training and validation need at least one window each: checked up front (validation would
  // otherwise fail at the end of the run), the training split first.
  for (Split split : {Split::kTrain, Split::kVal}) DataLoader probe(sources, split, 1, cfg.train.seq_len, 0, false, false);
  // A mistyped NVMe path would surface only when a larger run first needs the tier.
  for (const std::string& p : cfg.memory.nvme_paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec))
      user_error("config: [memory] nvme_paths: {} is not a directory (create it on the NVMe drive first)", p);
  }
  return resolve_plan(cfg, PlanSite{device, device.is_cuda(), local_ranks, world_ranks}, &sources.front().ds);
}

RunPlan plan_this_run(const Config& cfg) {
  const DistEnv env = DistEnv::from_environment();
  const torch::Device device = start_compute(cfg.train, env);
  const std::vector<DataSource> sources = open_sources(cfg.data);
  dataset_tokenizer(sources.front().ds);
  return plan_for_run(cfg, sources, device, env.local_world_size, env.world_size);
}

namespace {

// The run's plan, refused when it does not fit. On a GPU the allocator is held to its compute budget.
MemoryPlan fitting_plan(const MemoryPlan& plan, const torch::Device& device) {
  if (!plan.fits) user_error("memory plan does not fit: {} (`bcdtrain plan` prints the table)", plan.why_not);
  // memory.compute_bytes = 24GiB on a bigger card fails an allocation where a 24 GiB card would.
  // The allocator gets the budget less what the CUDA runtime holds beside it (the plan's reserve).
  if (device.is_cuda())
    cap_cuda_allocator(cuda_index(device), plan.compute.budget > plan.compute.reserved
                                               ? plan.compute.budget - plan.compute.reserved
                                               : plan.compute.budget);
  return plan;
}

// The accounting's budgets: the plan's, for the compute tier, the pinned pool and host memory
// (NVMe unlimited).
std::array<uint64_t, kNumPools> plan_budgets(const MemoryPlan& plan) {
  std::array<uint64_t, kNumPools> b{};
  b[static_cast<int>(Pool::kCompute)] = plan.compute.budget;
  b[static_cast<int>(Pool::kPinned)] = plan.pinned.budget;
  b[static_cast<int>(Pool::kHost)] = plan.host.budget;
  return b;
}

// Ranks agree or nobody starts: before the first collective (the streamed weights' barrier),
// every rank's description of the run (run_identity.h: the resolved config, data, tokenizer,
// checkpoint, binary) is compared; ranks of another model shape would abort inside the backend,
// ranks of another learning rate would train on silently. Returns `plan`.
void agree_with_every_rank(ProcessGroup& pg, const MemoryPlan& plan, const Config& cfg,
                           const std::vector<DataSource>& sources, const std::string& resume, const torch::Device& device) {
  if (pg.world_size() > 1) pg.agree(describe_run(cfg, sources, resume, plan, device));
}

torch::TensorOptions working_options(const TrainConfig& tc, const torch::Device& device) {
  return torch::TensorOptions(tc.dtype == Dtype::kBf16 ? torch::kBFloat16 : torch::kFloat32).device(device);
}

// The working weights resident on the compute tier: every block but the streamed ones (whose
// host copy, window and active buffer StreamedWeights charges), and the rotary tables, grown
// first to the run's sequences (as the planner counts them).
uint64_t working_bytes(LlamaModel& model, const StreamedWeights* streamed, int64_t seq_len) {
  model.reserve_positions(seq_len);
  uint64_t bytes = 0;
  for (int i = 0; i < model.n_blocks(); ++i)
    if (!streamed || !streamed->streams(i)) bytes += static_cast<uint64_t>(model.block(i).data().nbytes());
  return bytes + model.rope_bytes();
}

// BCD_NVME_FAULTS: injected NVMe faults for a whole run (io/fault_engine.h), to see what a failing
// drive does to training; the same plan for every store of the run (the stager's, the streamed
// weights'). Said loudly: it is never what a user wants by accident. Empty without the variable.
ExtentStore::EngineFactory nvme_engines(const ProcessGroup& pg) {
  const char* spec = std::getenv("BCD_NVME_FAULTS");
  if (!spec || !*spec) return {};
  auto faults = std::make_shared<FaultPlan>(parse_faults(spec, "BCD_NVME_FAULTS"));  // its counts span the stores
  fmt::print(stderr, "bcdtrain: warning: rank {}: BCD_NVME_FAULTS={}: injecting faults into the NVMe tier\n",
             pg.rank(), spec);
  return [faults](IoOp, const EngineOptions& eo) -> std::unique_ptr<IoEngine> {
    return std::make_unique<FaultEngine>(make_io_engine(eo), faults);
  };
}

// The plan's streamed layers (plan.stream), refused where BCD cannot keep them frozen.
std::unique_ptr<StreamedWeights> make_streamed(const MemoryPlan& plan, const Config& cfg, const torch::Device& device,
                                               MemoryAccounting& acct, ProcessGroup& pg, const DistEnv& env,
                                               const ExtentStore::EngineFactory& engines) {
  if (!plan.stream.on()) return nullptr;
  if (!cfg.bcd.enabled || cfg.optim.impl != OptimImpl::kFused)
    user_error("config: [memory] stream_weights streams frozen layers' weights, which needs block coordinate descent "
               "with the fused optimizer ([bcd] enabled = true, [optim] impl = \"fused\"); set stream_weights = \"off\"");
  return std::make_unique<StreamedWeights>(plan, cfg.model, working_options(cfg.train, device), &acct, pg, env,
                                           nvme_dirs(cfg.memory.nvme_paths, pg.rank(), pg.world_size(), NvmeStore::kWeights),
                                           engines);
}

// [bcd] fixed_order as unit indices (order = "fixed"); UserError naming an unknown block.
std::vector<int> fixed_order(const std::vector<UnitShape>& units, const BcdConfig& bc) {
  std::vector<int> fixed;
  if (!bc.enabled || bc.order != BlockOrder::kFixed) return fixed;
  for (const std::string& name : bc.fixed_order) {
    auto it = std::find_if(units.begin(), units.end(), [&](const UnitShape& u) { return u.name == name; });
    if (it == units.end()) {
      std::string valid;
      for (const auto& u : units) valid += (valid.empty() ? "" : ", ") + u.name;
      user_error("config: [bcd] fixed_order: unknown block \"{}\" (blocks: {})", name, valid);
    }
    fixed.push_back(static_cast<int>(it - units.begin()));
  }
  return fixed;
}

}  // namespace

namespace {

RunSite find_run_site(Config cfg, const std::string& resume) {
  RunSite s;
  s.env = DistEnv::from_environment();
  s.device = start_compute(cfg.train, s.env);             // before anything is read; cuda:LOCAL_RANK on GPUs
  s.pg = ProcessGroup::connect(s.env, cfg.dist, s.device);  // the ranks joined before anything is read
  s.sources = open_sources(cfg.data);
  s.tok = dataset_tokenizer(s.sources.front().ds, resume.empty() ? "" : cfg.train.run_dir);
  const RunPlan rp = plan_for_run(cfg, s.sources, s.device, s.env.local_world_size, s.pg->world_size());
  cfg.model = rp.model;  // the shape that is built (HF config.json, init_from, the data's vocabulary)
  s.plan = fitting_plan(rp.plan, s.device);
  agree_with_every_rank(*s.pg, s.plan, cfg, s.sources, resume, s.device);
  s.cfg = std::move(cfg);
  return s;
}

}  // namespace

RunSetup::RunSetup(Config config, const std::string& resume) : RunSetup(find_run_site(std::move(config), resume), resume) {}

RunSetup::RunSetup(RunSite site, const std::string& resume)
    : cfg(std::move(site.cfg)),
      dist_env(site.env),
      device(site.device),
      pg(std::move(site.pg)),
      sources(std::move(site.sources)),
      tok(std::move(*site.tok)),
      plan(std::move(site.plan)),
      acct(plan_budgets(plan)),
      resume_from(resume) {
  // The run, built on its site in this order.
  if (pg->world_size() > 1) reducer = std::make_unique<GradReducer>(*pg, cfg.dist.bucket_bytes.value);
  train_loader_.emplace(sources, Split::kTrain, cfg.train.batch_size, cfg.train.seq_len,
                        static_cast<uint64_t>(cfg.train.seed), /*shuffle=*/true, /*prefetch=*/true, pg->rank(),
                        pg->world_size());
  activations = Charge(&acct, Pool::kCompute, kUseActivations, plan.compute.activations);
  nvme_faults = nvme_engines(*pg);
  streamed = make_streamed(plan, cfg, device, acct, *pg, dist_env, nvme_faults);
  StreamedWeights* const from_host = streamed.get();
  model_.emplace(cfg.model, working_options(cfg.train, device), std::nullopt,  // drawn or read below, once
                 from_host ? LlamaModel::BlockStorage([from_host](int b) { return from_host->storage(b); })
                           : LlamaModel::BlockStorage());
  working = Charge(&acct, Pool::kCompute, static_cast<int>(StateKind::kWorking),
                   working_bytes(*model_, from_host, cfg.train.seq_len));
  units = make_units(*model_, cfg.bcd);
  sched_.emplace(static_cast<int>(units.size()), cfg.bcd, static_cast<uint64_t>(cfg.train.seed), fixed_order(units, cfg.bcd));
  if (streamed) streamed->attach(*model_);
  // The weights: a resume reads them from its checkpoint (below), [model] init_from from its
  // files (HF or .h5), else they are drawn from the seed.
  if (resume_from.empty() && !cfg.model.init_from.empty()) load_initial_weights(*model_, cfg.model.init_from);
  else if (resume_from.empty()) model_->init_weights(static_cast<uint64_t>(cfg.train.seed));
  // Every rank of the machine wrote the shared streamed weights (init zeroes a block before it
  // draws it): none reads them, as activating the first unit does, before all have finished.
  if (streamed && resume_from.empty()) streamed->ready();
  make_optimizer();
  if (cfg.train.peak_tflops > 0) peak_tflops = cfg.train.peak_tflops;
  else if (device.is_cuda()) peak_tflops = gpu_peak_tflops(cuda_device_name(cuda_index(device)), cfg.train.dtype);

  // Resume: weights, schedule, data position, optimizer state per unit.
  if (!resume_from.empty()) {
    const auto t0 = Clock::now();
    first_step = read_train_state(train_state(), resume_from) + 1;
    resume_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (first_step > cfg.train.steps)
      user_error("{}: checkpoint is at step {} but train.steps is {}; give --train.steps=N to go further",
                 resume_from, first_step - 1, cfg.train.steps);
  } else {
    ops_->switch_unit();
  }
  ops_->prefetch();
}

void RunSetup::make_optimizer() {
  // The trainer's pass is the only one that computes gradients (trainer.cpp: grad_into_blocks).
  model_->set_direct_sums(true);
  if (cfg.optim.impl == OptimImpl::kTorch) {
    for (StateKind k : {StateKind::kGrad, StateKind::kAdamM, StateKind::kAdamV})
      torch_state.emplace_back(&acct, Pool::kCompute, static_cast<int>(k), working.bytes());
    model_->set_trainable(true);
    opt_ = std::make_unique<FullAdamW>(*model_, cfg.optim);
  } else {
    StateStorage storage;
    storage.accounting = &acct;
    storage.unit_home = plan.unit_home;
    storage.stager.prefetch_depth = static_cast<int>(cfg.memory.prefetch_depth);
    // every rank stages its own state
    storage.stager.nvme_paths = nvme_dirs(cfg.memory.nvme_paths, pg->rank(), pg->world_size(), NvmeStore::kState);
    create_nvme_dirs(storage.stager.nvme_paths);
    storage.shard_rank = shards() > 1 ? pg->rank() : 0;
    storage.shard_count = shards();
    if (device.is_cuda()) storage.stager.compute_stream = torch_current_cuda_stream(cuda_index(device));
    storage.stager.engine_factory = nvme_faults;
    auto blocks = std::make_unique<BlockAdamW>(*model_, units, cfg.optim, cfg.bcd.state_on_switch == StateOnSwitch::kKeep, storage);
    if (StreamedWeights* const from_host = streamed.get())  // the active unit's streamed layers stay on the compute tier for its visit
      blocks->set_switch_hook([from_host](const std::vector<int>& prev, const std::vector<int>& next) {
        from_host->switch_blocks(prev, next);
      });
    opt_ = std::move(blocks);
  }
  ops_.emplace(StepOps::Parts{cfg, *pg, *model_, units, *sched_, reducer.get(), *opt_, shards()});
  if (!opt_->checkpointable() && !resume_from.empty())  // checkpoint_every with torch is refused when the config loads
    user_error("config: --resume needs [optim] impl = \"fused\" (got \"torch\")");
}

TrainState RunSetup::train_state() {
  // Checkpoints are the block optimizer's format (can_checkpoint()).
  auto* blocks = dynamic_cast<BlockAdamW*>(opt_.get());
  BCD_CHECK(blocks, "train_state: checkpoints need the fused optimizer");
  return TrainState{cfg, *pg, *model_, units, *sched_, *train_loader_, *blocks, streamed.get(), tokens_per_step()};
}

RunGuard::Parts RunSetup::guard_parts() {
  std::function<TrainState()> state;
  if (can_checkpoint()) state = [this] { return train_state(); };
  return RunGuard::Parts{cfg, dist_env, *pg, *model_, *train_loader_, *ops_, first_step, std::move(state)};
}

int RunSetup::shards() const {
  return state_shards(cfg, pg->world_size());
}

int64_t RunSetup::tokens_per_step() const {
  return cfg.train.batch_size * cfg.train.seq_len * cfg.train.grad_accum * pg->world_size();
}

}  // namespace bcd
