// Streamed frozen layers: host copy, window and active buffer, and the model's layer hooks.
#include "runtime/streamed_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "base/error.h"
#include "memory/nvme_dirs.h"
#include "runtime/cuda_torch.h"

namespace bcd {

namespace {

// The shared segment's name: the same for every rank of one job on a machine (they share the
// rendezvous address and port), different for two jobs (each holds its own port).
std::string shared_name(const DistEnv& env) {
  return fmt::format("/bcdtrain-weights-{}-{:x}", env.master_port, std::hash<std::string>{}(env.master_addr) & 0xffffffu);
}

}  // namespace

StreamedWeights::StreamedWeights(const MemoryPlan& plan, const ModelConfig& model, torch::TensorOptions working,
                                 MemoryAccounting* acct, ProcessGroup& pg, const DistEnv& env,
                                 const std::vector<std::string>& nvme_dirs, ExtentStore::EngineFactory engines)
    : pg_(pg),
      writer_(env.local_rank == 0),
      meet_(env.local_world_size > 1),
      working_(working) {
  const StreamPlan& sp = plan.stream;
  const std::vector<BlockShape> shapes = block_shapes(model);
  BCD_CHECK(sp.streamed.size() == shapes.size() && sp.home.size() == shapes.size(),
            "stream plan of {} blocks for a model of {}", sp.streamed.size(), shapes.size());
  elem_ = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(working.dtype())));
  int64_t host_elems = 0;
  uint64_t nvme_bytes = 0;
  for (size_t b = 0; b < shapes.size(); ++b) {
    const bool nvme = sp.streamed[b] && sp.home[b] == Tier::kNvme;
    numel_.push_back(shapes[b].numel);
    on_nvme_.push_back(nvme);
    offset_.push_back(sp.streamed[b] && !nvme ? host_elems : -1);
    if (!sp.streamed[b]) continue;
    if (nvme) nvme_bytes += static_cast<uint64_t>(shapes[b].numel * elem_);
    else host_elems += shapes[b].numel;  // a multiple of Block::kAlign elements: every block stays aligned
    slot_numel_ = std::max(slot_numel_, shapes[b].numel);
  }
  written_.assign(shapes.size(), false);
  const auto host_bytes = static_cast<uint64_t>(host_elems * elem_);
  const auto slot_bytes = static_cast<uint64_t>(slot_numel_ * elem_);
  BCD_CHECK(slot_bytes <= sp.slot_bytes, "stream plan: slots of {} bytes for a block of {}", sp.slot_bytes, slot_bytes);
  const int64_t active_elems = static_cast<int64_t>(sp.active_bytes) / elem_;
  const bool cuda = working.device().is_cuda();
  const int w = static_cast<int>(StateKind::kWorking);
  const int depth = static_cast<int>(sp.depth);

  // The host copy: one per machine. Its first rank creates it; the others attach once it exists.
  if (host_bytes > 0) {
    const int sharers = std::max(env.local_world_size, 1);
    if (!meet_) {
      host_ = HostWeights::make_private(host_bytes, cuda);
    } else {
      const std::string name = shared_name(env);
      if (writer_) host_ = HostWeights::create_shared(name, host_bytes, cuda);
      pg_.barrier();
      if (!writer_) host_ = HostWeights::attach_shared(name, host_bytes, cuda);
      pg_.barrier();
      host_.unlink_name();  // mapped by all: nothing stays in /dev/shm however the run ends
    }
    charges_.emplace_back(acct, Pool::kHost, w, (host_bytes + sharers - 1) / sharers);
  }
  // The NVMe homes: this rank's extent store, read into pinned staging buffers (one per window
  // buffer, and one for the synchronous reads and writes of switches and checkpoints).
  if (nvme_bytes > 0) {
    BCD_CHECK(!nvme_dirs.empty(), "stream plan: NVMe homes without memory.nvme_paths");
    create_nvme_dirs(nvme_dirs);  // only when a layer is homed there
    store_ = std::make_unique<ExtentStore>(nvme_dirs, StoreOptions{}, std::move(engines));
    store_->discard_at_close();  // the run's checkpoints hold the weights
    object_.assign(shapes.size(), 0);
    for (size_t b = 0; b < shapes.size(); ++b)
      if (on_nvme_[b]) object_[b] = store_->create("weights." + shapes[b].name, static_cast<uint64_t>(numel_[b] * elem_));
    charges_.emplace_back(acct, Pool::kNvme, w, nvme_bytes);
    stage_bytes_ = (slot_bytes + 4095) / 4096 * 4096;
    staging_ = HostWeights::make_private(static_cast<uint64_t>(depth + 1) * stage_bytes_, cuda,
                                        "the NVMe staging buffers");
    charges_.emplace_back(acct, Pool::kPinned, kUseStaging, static_cast<uint64_t>(depth + 1) * stage_bytes_);
  }

  // Compute tier: the window and the active unit's buffer.
  charges_.emplace_back(acct, Pool::kCompute, w, static_cast<uint64_t>(depth) * slot_bytes);
  window_ = torch::empty({depth * slot_numel_}, working);
  if (active_elems > 0) {
    charges_.emplace_back(acct, Pool::kCompute, w, static_cast<uint64_t>(active_elems * elem_));
    active_ = torch::empty({active_elems}, working);
  }
  std::vector<StreamSource> homes(shapes.size());
  std::vector<uint64_t> bytes(shapes.size(), 0);
  for (size_t b = 0; b < shapes.size(); ++b) {
    if (!streams(static_cast<int>(b))) continue;
    bytes[b] = static_cast<uint64_t>(numel_[b] * elem_);
    if (on_nvme_[b]) homes[b] = StreamSource{nullptr, store_.get(), object_[b]};
    else homes[b] = StreamSource{host_.data() + offset_[b] * elem_};
  }
  std::vector<void*> slots, staging;
  auto* base = static_cast<char*>(window_.data_ptr());
  for (int s = 0; s < depth; ++s) {
    slots.push_back(base + s * slot_numel_ * elem_);
    if (store_) staging.push_back(staging_.data() + static_cast<uint64_t>(s) * stage_bytes_);
  }
  std::unique_ptr<ComputeCopier> copier =
      cuda ? make_cuda_copier(torch_current_cuda_stream(working.device().index() < 0 ? 0 : working.device().index()))
           : make_thread_copier();
  stream_ = std::make_unique<WeightStream>(std::move(homes), std::move(bytes), std::move(slots), slot_bytes,
                                           std::move(copier), std::move(staging));
}

StreamedWeights::~StreamedWeights() {
  if (model_) model_->set_layer_weights(nullptr);
}

torch::Tensor StreamedWeights::home_view(int block) const {
  return torch::from_blob(host_.data() + offset_[block] * elem_, {numel_[block]}, working_.device(torch::kCPU));
}

torch::Tensor StreamedWeights::idle_view(int block) const {
  // NVMe homes: a tensor without storage, so a read outside open_block fails loudly, never quietly
  return on_nvme_[block] ? torch::empty({numel_[block]}, working_.device(torch::kMeta)) : home_view(block);
}

torch::Tensor StreamedWeights::storage(int block) const { return streams(block) ? idle_view(block) : torch::Tensor(); }

torch::Tensor StreamedWeights::bounce() const {
  return torch::from_blob(staging_.data() + static_cast<uint64_t>(depth()) * stage_bytes_, {slot_numel_},
                          working_.device(torch::kCPU));
}

void StreamedWeights::read_home(int block, const torch::Tensor& dst) {
  if (!on_nvme_[block]) {
    dst.copy_(home_view(block));
    return;
  }
  if (!written_[block]) {  // never written: as a new block, zeros
    dst.zero_();
    return;
  }
  store_->read(object_[block], bounce().data_ptr());
  dst.copy_(bounce().narrow(0, 0, numel_[block]));
}

void StreamedWeights::write_home(int block, const torch::Tensor& src) {
  if (!on_nvme_[block]) {
    if (writer_) home_view(block).copy_(src);  // one copy per machine: its first rank writes it
    return;
  }
  bounce().narrow(0, 0, numel_[block]).copy_(src);
  store_->write(object_[block], bounce().data_ptr());  // every rank keeps its own NVMe copy
  written_[block] = true;
}

void StreamedWeights::attach(LlamaModel& model) {
  BCD_CHECK(model.n_blocks() == static_cast<int>(offset_.size()), "StreamedWeights: a model of {} blocks", model.n_blocks());
  model_ = &model;
  model.set_layer_weights(this);
}

void StreamedWeights::ready() {
  if (meet_) pg_.barrier();
}

int StreamedWeights::streamed_count() const {
  int n = 0;
  for (int b = 0; b < static_cast<int>(offset_.size()); ++b) n += streams(b) ? 1 : 0;
  return n;
}

void StreamedWeights::switch_blocks(const std::vector<int>& prev_blocks, const std::vector<int>& blocks) {
  BCD_CHECK(model_, "StreamedWeights: no model attached");
  torch::NoGradGuard ng;
  // The visit's new weights go home: written once per machine, read by every rank after.
  bool wrote = false;
  for (int b : prev_blocks) {
    if (!streams(b) || !is_active(b)) continue;
    Block& blk = model_->block(b);
    write_home(b, blk.data());
    blk.rebind(idle_view(b));
    stream_->invalidate(b);  // a window copy of the old weights is stale
    wrote = wrote || !on_nvme_[b];
  }
  active_blocks_.clear();
  if (wrote && meet_) pg_.barrier();
  int64_t at = 0;
  for (int b : blocks) {
    if (!streams(b) || is_active(b)) continue;
    BCD_CHECK(active_.defined() && at + numel_[b] <= active_.numel(),
              "stream plan: the active buffer ({} elements) cannot hold block {}", active_.defined() ? active_.numel() : 0, b);
    torch::Tensor view = active_.narrow(0, at, numel_[b]);
    read_home(b, view);
    model_->block(b).rebind(view);
    active_blocks_.push_back(b);
    at += numel_[b];
  }
}

void StreamedWeights::expect(const std::vector<int>& blocks) {
  std::vector<int> order;
  for (int b : blocks)
    if (streams(b) && !is_active(b)) order.push_back(b);
  try {
    stream_->expect(order);
  } catch (const IoError& e) {
    throw failed_read(e);
  }
}

IoError StreamedWeights::failed_read(const IoError& e) const {
  // A read of a layer homed on NVMe failed (its own use, or a prefetch that landed meanwhile):
  // nothing computed with what it returned.
  const int b = stream_->last_failed();
  return IoError(fmt::format("streamed weights of {}: {}", b >= 0 ? model_->block(b).name() : "a layer", e.what()));
}

void StreamedWeights::acquire(int block) {
  if (!streams(block) || is_active(block)) return;
  const bool nested = stream_->held(block);
  // Autograd would keep views of the window buffer, which the next layers overwrite: a frozen
  // layer with autograd runs inside a checkpoint (its forward without grad, its recompute nested
  // in the backward's hold), which the plan makes sure of (model.activation_checkpointing).
  BCD_CHECK(nested || !torch::GradMode::is_enabled(),
            "streamed block {} used with autograd outside activation checkpointing", model_->block(block).name());
  void* p = nullptr;
  try {
    p = stream_->acquire(block);
  } catch (const IoError& e) {
    throw failed_read(e);
  }
  if (nested) return;
  uses_ += 1;
  if (stream_->stats().last_stall_s > step_max_stall_s_)
    step_max_stall_s_ = stream_->stats().last_stall_s, step_max_stall_block_ = block;
  const int64_t slot = (static_cast<char*>(p) - static_cast<char*>(window_.data_ptr())) / (slot_numel_ * elem_);
  model_->block(block).rebind(window_.narrow(0, slot * slot_numel_, numel_[block]));
}

void StreamedWeights::release(int block) {
  if (!streams(block) || is_active(block)) return;
  stream_->release(block);
  if (!stream_->held(block)) model_->block(block).rebind(idle_view(block));
}

void StreamedWeights::open_block(int block) {
  if (!streams(block) || !on_nvme_[block] || is_active(block)) return;
  BCD_CHECK(!open_.count(block) && !stream_->held(block), "open_block: block {} is already in use", block);
  torch::Tensor t = torch::empty({numel_[block]}, working_.device(torch::kCPU));
  read_home(block, t);
  model_->block(block).rebind(t);
  open_[block] = t;
}

void StreamedWeights::close_block(int block, bool commit) {
  auto it = open_.find(block);
  if (it == open_.end()) return;
  const torch::Tensor t = it->second;
  open_.erase(it);
  model_->block(block).rebind(idle_view(block));
  if (commit) {
    write_home(block, t);
    stream_->invalidate(block);
  }
}

StreamStepStats StreamedWeights::take() {
  const WeightStreamStats& now = stream_->stats();
  StreamStepStats s;
  s.bytes = now.bytes - last_.bytes;
  s.uses = uses_ - last_uses_;
  last_uses_ = uses_;
  s.stall_s = now.stall_s - last_.stall_s;
  s.max_layer_stall_s = step_max_stall_s_;
  s.max_stall_block = step_max_stall_block_;
  step_max_stall_s_ = 0, step_max_stall_block_ = -1;
  last_ = now;
  return s;
}

}  // namespace bcd
