// Setting a run up: threads and device, data, model shape, memory plan, model, BCD units and
// schedule, optimizer, resume.
#include "runtime/run_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/adamw_cuda.h"
#include "kernels/host_memory.h"
#endif

#include "base/error.h"
#include "base/files.h"
#include "io/fault_engine.h"
#include "memory/nvme_dirs.h"
#include "model/hf_config.h"
#include "model/hf_import.h"
#include "runtime/cuda_torch.h"
#include "runtime/flops.h"
#include "runtime/run_identity.h"
#include "runtime/train_state.h"

namespace bcd {

namespace {

using Clock = std::chrono::steady_clock;

// Threads first, then the device: a device that cannot be used is refused before any data is read.
// Ranks on one node share its cores: threads = 0 gives each rank its share.
torch::Device start_compute(const TrainConfig& tc, const DistEnv& env) {
  configure_threads(tc.threads, env.local_world_size);
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
// one would train on ids that mean other words, and fail only when sampling at the end.
Tokenizer dataset_tokenizer(const TokenDataset& ds) {
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
  // Validation needs at least one window; checked up front so the run does not fail at the end.
  { DataLoader probe(sources, Split::kVal, 1, cfg.train.seq_len, 0, false, false); }
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

// The run's plan, refused when it does not fit; [model] in `cfg` becomes the shape that is built
// and `acct` takes the plan's budgets.
MemoryPlan plan_run(Config& cfg, const std::vector<DataSource>& sources, const torch::Device& device, int local_ranks,
                    int world_ranks, MemoryAccounting& acct) {
  const RunPlan rp = plan_for_run(cfg, sources, device, local_ranks, world_ranks);
  cfg.model = rp.model;
  const MemoryPlan& plan = rp.plan;
  if (!plan.fits) user_error("memory plan does not fit: {} (`bcdtrain plan` prints the table)", plan.why_not);
  // A GPU's allocator is held to the plan's compute budget: memory.compute_bytes = 24GiB on a
  // bigger card fails an allocation where a 24 GiB card would.
  if (device.is_cuda()) cap_cuda_allocator(cuda_index(device), plan.compute.budget);
  acct.set_budget(Pool::kCompute, plan.compute.budget);
  acct.set_budget(Pool::kPinned, plan.pinned.budget);
  acct.set_budget(Pool::kHost, plan.host.budget);
  return plan;
}

// Ranks agree or nobody starts: before the first collective (the streamed weights' barrier),
// every rank's description of the run (run_identity.h: the resolved config, data, tokenizer,
// checkpoint, binary) is compared; ranks of another model shape would abort inside the backend,
// ranks of another learning rate would train on silently. Returns `plan`.
MemoryPlan agreed_by_every_rank(ProcessGroup& pg, MemoryPlan plan, const Config& cfg,
                                const std::vector<DataSource>& sources, const std::string& resume,
                                const torch::Device& device) {
  if (pg.world_size() > 1) pg.agree(describe_run(cfg, sources, resume, plan, device));
  return plan;
}

torch::TensorOptions working_options(const TrainConfig& tc, const torch::Device& device) {
  return torch::TensorOptions(tc.dtype == Dtype::kBf16 ? torch::kBFloat16 : torch::kFloat32).device(device);
}

// The working weights resident on the compute tier: every block but the streamed ones (whose
// host copy, window and active buffer StreamedWeights charges), and the rotary tables.
uint64_t working_bytes(LlamaModel& model, const StreamedWeights* streamed) {
  uint64_t bytes = 0;
  for (int i = 0; i < model.n_blocks(); ++i)
    if (!streamed || !streamed->streams(i)) bytes += static_cast<uint64_t>(model.block(i).data().nbytes());
  return bytes + static_cast<uint64_t>(model.rope_cos().nbytes() + model.rope_sin().nbytes());
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
std::vector<int> fixed_order(const std::vector<TrainUnit>& units, const BcdConfig& bc) {
  std::vector<int> fixed;
  if (!bc.enabled || bc.order != BlockOrder::kFixed) return fixed;
  for (const std::string& name : bc.fixed_order) {
    auto it = std::find_if(units.begin(), units.end(), [&](const TrainUnit& u) { return u.name == name; });
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

// The tokenizer that came with [model] init_from, where there is one: in an HF directory, beside
// an imported .h5 (import copies it there), in the run directory of a model.h5 or a checkpoint.
std::string init_from_tokenizer(const std::string& init_from) {
  namespace fs = std::filesystem;
  if (init_from.empty()) return "";
  std::vector<fs::path> candidates;
  const std::string hf = hf_init_dir(init_from);
  if (!hf.empty()) {
    candidates.push_back(fs::path(hf));
  } else {
    const fs::path dir = fs::path(init_from).has_parent_path() ? fs::path(init_from).parent_path() : fs::path(".");
    candidates.push_back(dir);
    if (dir.filename() == "checkpoints") candidates.push_back(dir.parent_path());
  }
  std::error_code ec;
  for (const fs::path& c : candidates)
    if (fs::is_directory(c, ec))
      if (std::string tok = find_tokenizer(c.string()); !tok.empty()) return tok;
  return "";
}

RunSetup::RunSetup(Config config, std::string resume)
    : cfg(std::move(config)),
      dist_env(DistEnv::from_environment()),
      device(start_compute(cfg.train, dist_env)),
      pg(ProcessGroup::connect(dist_env, cfg.dist, device)),
      reducer(pg->world_size() > 1 ? std::make_unique<GradReducer>(*pg, cfg.dist.bucket_bytes.value) : nullptr),
      sources(open_sources(cfg.data)),
      ds(sources.front().ds),
      tok(dataset_tokenizer(ds)),
      train_loader(sources, Split::kTrain, cfg.train.batch_size, cfg.train.seq_len, static_cast<uint64_t>(cfg.train.seed),
                   /*shuffle=*/true, /*prefetch=*/true, pg->rank(), pg->world_size()),
      plan(agreed_by_every_rank(*pg, plan_run(cfg, sources, device, dist_env.local_world_size, pg->world_size(), acct),
                                cfg, sources, resume, device)),
      activations(&acct, Pool::kCompute, kUseActivations, plan.compute.activations),
      nvme_faults(nvme_engines(*pg)),
      streamed(make_streamed(plan, cfg, device, acct, *pg, dist_env, nvme_faults)),
      model(cfg.model, working_options(cfg.train, device), std::nullopt,  // drawn or read below, once
            streamed ? LlamaModel::BlockStorage([this](int b) { return streamed->storage(b); }) : LlamaModel::BlockStorage()),
      working(&acct, Pool::kCompute, static_cast<int>(StateKind::kWorking), working_bytes(model, streamed.get())),
      units(make_units(model, cfg.bcd)),
      sched(static_cast<int>(units.size()), cfg.bcd, static_cast<uint64_t>(cfg.train.seed), fixed_order(units, cfg.bcd)),
      resume_from(std::move(resume)) {
  if (streamed) streamed->attach(model);
  // The weights: a resume reads them from its checkpoint (below), [model] init_from from its
  // files (HF or .h5), else they are drawn from the seed.
  if (resume_from.empty() && !cfg.model.init_from.empty()) load_initial_weights(model, cfg.model.init_from);
  else if (resume_from.empty()) model.init_weights(static_cast<uint64_t>(cfg.train.seed));
  // Every rank of the machine wrote the shared streamed weights (init zeroes a block before it
  // draws it): none reads them, as activating the first unit does, before all have finished.
  if (streamed && resume_from.empty()) streamed->ready();
  make_optimizer();
  if (cfg.train.peak_tflops > 0) peak_tflops = cfg.train.peak_tflops;
  else if (device.is_cuda()) peak_tflops = gpu_peak_tflops(cuda_device_name(cuda_index(device)), cfg.train.dtype);

  // Resume: weights, schedule, data position, optimizer state per unit.
  if (!resume_from.empty()) {
    const auto t0 = Clock::now();
    first_step = read_train_state(*this, resume_from) + 1;
    resume_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (first_step > cfg.train.steps)
      user_error("{}: checkpoint is at step {} but train.steps is {}; give --train.steps=N to go further",
                 resume_from, first_step - 1, cfg.train.steps);
  } else if (block_opt) {
    block_opt->activate(sched.current());
  }
  prefetch();
}

void RunSetup::make_optimizer() {
  if (cfg.optim.impl == OptimImpl::kTorch) {
    for (StateKind k : {StateKind::kGrad, StateKind::kAdamM, StateKind::kAdamV})
      torch_state.emplace_back(&acct, Pool::kCompute, static_cast<int>(k), working.bytes());
    model.set_trainable(true);
    torch_opt = std::make_unique<FullAdamW>(model, cfg.optim);
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
    block_opt = std::make_unique<BlockAdamW>(model, units, cfg.optim, cfg.bcd.state_on_switch == StateOnSwitch::kKeep, storage);
    if (streamed)  // the active unit's streamed layers stay on the compute tier for its visit
      block_opt->set_switch_hook([this](const std::vector<int>& prev, const std::vector<int>& next) {
        streamed->switch_blocks(prev, next);
      });
  }
  if (torch_opt && !resume_from.empty())  // checkpoint_every with torch is refused when the config loads
    user_error("config: --resume needs [optim] impl = \"fused\" (got \"torch\")");
}

void RunSetup::switch_unit() {
  if (block_opt) block_opt->activate(sched.current());
}

void RunSetup::prefetch() {
  if (block_opt) block_opt->prefetch(sched.lookahead(static_cast<int>(cfg.memory.prefetch_depth)));
}

int RunSetup::grad_from() const { return cfg.bcd.enabled ? units[sched.current()].lowest_block() : 0; }

void RunSetup::arm_reduction() {
  static const std::vector<GradRange> kNotSharded;
  if (reducer) reducer->arm(model, shards() > 1 ? block_opt->grad_ranges() : kNotSharded);
}

torch::Tensor RunSetup::clip_gradients() {
  if (shards() == 1) return clip_grad_norm(model, cfg.train.grad_clip);
  std::vector<GradRange> mine;
  for (const GradRange& g : block_opt->grad_ranges())
    if (g.rank == pg->rank()) mine.push_back(g);
  return clip_grad_norm(model, cfg.train.grad_clip, mine,
                        [&](double sq) { return pg->sum_over_ranks({sq})[0]; });
}

void RunSetup::reduce_gradients() {
  if (reducer) reducer->finish();
}

void RunSetup::accumulate_gradients(bool final_micro_batch) {
  if (!(final_micro_batch && reducer)) model.accumulate_grads();
}

double RunSetup::step_flops() const {
  return micro_batch_flops(model, grad_from(), cfg.train.batch_size, cfg.train.seq_len).total() *
         static_cast<double>(cfg.train.grad_accum);
}

bool RunSetup::can_run_ahead(int64_t step) const {
  return reducer && cfg.dist.overlap_forward && cfg.bcd.enabled && grad_from() > 0 && step < cfg.train.steps &&
         sched.step_in_visit() + 1 < static_cast<uint64_t>(sched.switch_every());
}

int RunSetup::shards() const {
  return state_shards(cfg, pg->world_size());
}

void RunSetup::update(double lr) {
  if (torch_opt) return torch_opt->step(lr);
  block_opt->step(lr);
  if (block_opt->shard_count() == 1) return;
  const auto t0 = Clock::now();
  const torch::Tensor mine = block_opt->owned_weights();
  const torch::Tensor all = torch::empty({mine.numel() * pg->world_size()}, mine.options());
  // bf16 travels as fp16 bit patterns (a gather copies bytes; every backend carries fp16).
  const auto wire = [](const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kHalf) : t; };
  pg->all_gather(wire(mine), wire(all));
  block_opt->set_gathered_weights(all);
  gather_s += std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t RunSetup::tokens_per_step() const {
  return cfg.train.batch_size * cfg.train.seq_len * cfg.train.grad_accum * pg->world_size();
}

std::vector<std::string> RunSetup::banner() const {
  const ModelConfig& mc = cfg.model;
  const TrainConfig& tc = cfg.train;
  const BcdConfig& bc = cfg.bcd;
  std::vector<std::string> lines;
  lines.push_back(fmt::format("model: {} layers, d_model {}, {} heads ({} kv), vocab {}, {:.2f}M parameters in {} blocks",
                              mc.n_layers, mc.d_model, mc.n_heads, mc.kv_heads(), mc.vocab_size,
                              static_cast<double>(model.num_params()) / 1e6, model.n_blocks()));
  for (const DataSource& s : sources)
    lines.push_back(fmt::format("data: {} train / {} val tokens ({}{}), unigram val loss {:.4f}",
                                s.ds.n_tokens(Split::kTrain), s.ds.n_tokens(Split::kVal), s.ds.dir(),
                                sources.size() > 1 ? fmt::format(", {:.1f}% of the windows", 100 * s.weight) : "",
                                s.ds.unigram_val_loss()));
  lines.push_back(fmt::format("train: {} steps x {} tokens/step, {} AdamW ({}) lr {:g}, {} working weights, on {}{}",
                              tc.steps, tokens_per_step(), name_of(cfg.optim.impl),
                              bc.enabled ? "block coordinate descent" : "full-parameter", tc.lr, name_of(tc.dtype),
                              device.is_cuda() ? "cuda" : "cpu",
                              device.is_cuda() ? "" : fmt::format(" with {} threads", torch::get_num_threads())));
  // What the MFU in metrics.jsonl is measured against, and where that figure came from.
  const std::string gpu = device.is_cuda() ? cuda_device_name(cuda_index(device)) : "";
  if (peak_tflops)
    lines.push_back(fmt::format("utilisation: MFU against a peak of {:g} TFLOP/s ({})", *peak_tflops,
                                tc.peak_tflops > 0 ? "train.peak_tflops" : fmt::format("{}, {} dense", gpu, name_of(tc.dtype))));
  else if (device.is_cuda())
    lines.push_back(fmt::format("utilisation: no MFU: {} is not in the table of known GPUs (set train.peak_tflops)",
                                gpu.empty() ? std::string("the GPU") : gpu));
  if (bc.enabled) {
    std::string names;
    for (const auto& u : units) names += (names.empty() ? "" : " ") + u.name;
    lines.push_back(fmt::format("bcd: {} blocks [{}], {} steps per visit, order {}, moments {} on switch", units.size(),
                                names, bc.switch_every, name_of(bc.order), name_of(bc.state_on_switch)));
  }
  if (block_opt && units.size() > 1) {
    int on_nvme = 0;
    for (Tier t : plan.unit_home) on_nvme += t == Tier::kNvme ? 1 : 0;
    auto gib = [](uint64_t b) { return static_cast<double>(b) / (1 << 30); };
    lines.push_back(fmt::format("memory: compute {:.3f} GiB (plan {:.3f}), pinned pool {} x {:.1f} MiB, state homes: "
                                "{} units in host memory, {} on NVMe",
                                gib(acct.usage(Pool::kCompute).total), gib(plan.compute.total()),
                                block_opt->stager().slab_count(),
                                static_cast<double>(block_opt->stager().slab_bytes()) / (1 << 20),
                                static_cast<int>(units.size()) - on_nvme, on_nvme));
  }
  if (streamed) {
    const StreamPlan& sp = plan.stream;
    lines.push_back(fmt::format("weights: {} of {} layers streamed ({:.2f} GiB from host memory{}{}), window {} x {:.1f} MiB; "
                                "plan: {:.2f} GB per step, {:.1f} ms of copies against {:.1f} ms of compute ({:g} GB/s, "
                                "{:g} TFLOP/s assumed)",
                                streamed->streamed_count(), cfg.model.n_layers,
                                static_cast<double>(streamed->host_bytes()) / (1 << 30),
                                streamed->shared() ? fmt::format(", one copy shared by {} ranks", dist_env.local_world_size) : "",
                                streamed->nvme_count() > 0 ? fmt::format("; {} layers from NVMe", streamed->nvme_count()) : "",
                                streamed->depth(), static_cast<double>(sp.slot_bytes) / (1 << 20),
                                static_cast<double>(sp.bytes_per_step) / 1e9, 1e3 * sp.copy_s_per_step,
                                1e3 * sp.compute_s_per_step, sp.gbps, sp.tflops));
  }
  if (pg->world_size() > 1)
    lines.push_back(fmt::format("dist: {} ranks ({}), {} sequences per rank per micro-batch, gradient buckets of "
                                "{:.0f} MiB, {}",
                                pg->world_size(), pg->backend(), tc.batch_size,
                                static_cast<double>(cfg.dist.bucket_bytes.value) / (1 << 20),
                                shards() > 1 ? fmt::format("block state sharded (each rank owns 1/{})", shards())
                                             : std::string("block state replicated on every rank")));
  if (!resume_from.empty())
    lines.push_back(fmt::format("resumed from {} at step {} (read in {:.2f} s)", resume_from, first_step - 1, resume_s));
  return lines;
}

// ---- Device and threads ----

int cuda_device_for_rank(int local_rank, int local_ranks, int visible) {
  BCD_CHECK(local_rank >= 0 && local_rank < std::max(local_ranks, 1) && visible >= 1,
            "cuda_device_for_rank({}, {}, {})", local_rank, local_ranks, visible);
  if (local_rank < visible && local_ranks <= visible) return local_rank;  // one GPU each, as torchrun
  if (visible == 1) return 0;  // each rank was handed its own (Slurm --gpus-per-task, CUDA_VISIBLE_DEVICES)
  user_error("config: [train] device = \"cuda\": {} ranks on this machine but {} GPUs visible to local rank {}; "
             "each rank needs a GPU of its own (start at most {} ranks here, or give each rank one GPU through "
             "CUDA_VISIBLE_DEVICES)",
             local_ranks, visible, local_rank, visible);
}

torch::Device resolve_device(DeviceChoice device, int local_rank, int local_ranks) {
#ifdef BCD_HAVE_CUDA_KERNELS
  const bool built = true;
#else
  const bool built = false;
#endif
  const bool usable = built && torch::cuda::is_available();
  if (device == DeviceChoice::kCpu || (device == DeviceChoice::kAuto && !usable)) return torch::kCPU;
  if (!usable)
    user_error("config: [train] device = \"cuda\" but {}", built ? "LibTorch finds no usable CUDA device (is this LibTorch built with CUDA, is a GPU visible?)"
                                                                 : "this build has no CUDA kernels (configure with -DBCD_CUDA=ON and a CUDA toolkit)");
  const int index = cuda_device_for_rank(local_rank, local_ranks, static_cast<int>(torch::cuda::device_count()));
  // This rank's GPU is current before anything touches CUDA (no context on another GPU, the
  // allocator initialised for cap_cuda_allocator).
  start_cuda_device(index);
#ifdef BCD_HAVE_CUDA_KERNELS
  const std::string why = adamw_cuda_unsupported_reason(index);
  if (!why.empty()) {
    if (device == DeviceChoice::kAuto) return torch::kCPU;
    user_error("config: [train] device = \"cuda\" but {}", why);
  }
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void apply_device_budget(MemoryConfig& mem, const torch::Device& device) {
  if (!device.is_cuda() || !mem.compute_bytes.is_auto) return;
#ifdef BCD_HAVE_CUDA_KERNELS
  const size_t total = cuda_device_total_bytes(cuda_index(device));
  if (total > 0) mem.compute_bytes = Bytes{total, false};
#endif
}

void share_machine_memory(MemoryConfig& mem, const torch::Device& device, int local_ranks) {
  if (local_ranks <= 1) return;
  const auto share = [&](const char* key) { return Bytes{meminfo_bytes(key) / static_cast<uint64_t>(local_ranks), false}; };
  if (mem.host_bytes.is_auto) mem.host_bytes = share("MemAvailable");
  if (mem.compute_bytes.is_auto && !device.is_cuda()) mem.compute_bytes = share("MemTotal");
}

void configure_threads(int64_t threads, int local_ranks) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  // More threads than a few per core only slow a run down; far more exhaust the machine.
  if (threads > 4 * cores)
    user_error("config: [train] threads = {}: at most 4 per core ({} on this machine; 0 = one per core)", threads,
               4 * cores);
  const int64_t n = threads > 0 ? threads : std::max<int64_t>(1, cores / std::max(1, local_ranks));
  torch::set_num_threads(static_cast<int>(n));
}

}  // namespace bcd
