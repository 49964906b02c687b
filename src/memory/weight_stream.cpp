// The host copy of streamed weights and the compute-tier window they stream through.
#include "memory/weight_stream.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "base/files.h"
#ifdef BCD_HAVE_CUDA_KERNELS
#include "kernels/host_memory.h"
#endif

namespace bcd {

namespace {

uint64_t page_round(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return std::max<uint64_t>((bytes + page - 1) / page * page, page);
}

// Page-locks [p, p + bytes) for a CUDA device's copies when `cuda`. A copy from pageable memory
// is synchronous: the stream would stop hiding behind compute, so a failure is refused (as the
// stager refuses an unlocked slab pool), never a silent slowdown.
bool register_for_cuda(void* p, uint64_t bytes, bool cuda, const std::string& what) {
  if (!cuda) return false;
#ifdef BCD_HAVE_CUDA_KERNELS
  const std::string why = cuda_host_register(p, bytes);
#else
  (void)p;
  const std::string why = "this build has no CUDA kernels";
#endif
  if (why.empty()) return true;
  user_error("streamed weights: {} ({:.2f} GiB) could not be page-locked for the GPU's copies ({}); copies from "
             "pageable memory do not overlap compute. Raise the locked-memory limit (ulimit -l), free host memory, "
             "or set memory.stream_weights = \"off\"",
             what, static_cast<double>(bytes) / (1ull << 30), why);
}

}  // namespace

// ---- HostWeights ----

HostWeights HostWeights::sized(uint64_t bytes, std::string name) {
  HostWeights h;
  h.bytes_ = bytes;
  h.mapped_ = page_round(bytes);
  h.name_ = std::move(name);
  return h;
}

void HostWeights::map_fd(UniqueFd fd, bool cuda) {
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  const int err = errno;
  fd.reset();  // the mapping holds the segment
  if (p == MAP_FAILED) user_error("shared weights {}: cannot map {} bytes ({})", name_, mapped_, std::strerror(err));
  data_ = static_cast<char*>(p);
  registered_ = register_for_cuda(data_, mapped_, cuda, "the shared host copy " + name_);
}

HostWeights HostWeights::make_private(uint64_t bytes, bool cuda, const std::string& what) {
  HostWeights h = sized(bytes, "");
  void* p = ::mmap(nullptr, h.mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    user_error("streamed weights: cannot allocate {} bytes of host memory ({})", h.mapped_, std::strerror(errno));
  h.data_ = static_cast<char*>(p);
  h.registered_ = register_for_cuda(h.data_, h.mapped_, cuda, what);
  return h;
}

HostWeights HostWeights::create_shared(const std::string& name, uint64_t bytes, bool cuda) {
  HostWeights h = sized(bytes, name);
  ::shm_unlink(name.c_str());  // a segment of a run that died before unlinking it
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
  if (!fd) user_error("shared weights {}: cannot create ({})", name, std::strerror(errno));
  // posix_fallocate, not ftruncate: a /dev/shm too small fails here, not with SIGBUS mid-run.
  const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(h.mapped_));
  if (rc != 0) {
    fd.reset();
    ::shm_unlink(name.c_str());
    user_error("shared weights {}: cannot reserve {:.2f} GiB in /dev/shm ({}); the streamed layers' weights live "
               "there, one copy per machine: enlarge /dev/shm or set memory.stream_weights = \"off\"",
               name, static_cast<double>(h.mapped_) / (1ull << 30), std::strerror(rc));
  }
  h.map_fd(std::move(fd), cuda);
  return h;
}

HostWeights HostWeights::attach_shared(const std::string& name, uint64_t bytes, bool cuda) {
  HostWeights h = sized(bytes, name);
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR, 0600));
  if (!fd) user_error("shared weights {}: cannot open ({}); the machine's first rank creates it", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) < h.mapped_) {
    user_error("shared weights {}: holds {} bytes, expected {} (another run's segment?)", name,
               static_cast<uint64_t>(st.st_size), h.mapped_);
  }
  h.map_fd(std::move(fd), cuda);
  return h;
}

void HostWeights::unlink_name() {
  if (!name_.empty()) ::shm_unlink(name_.c_str());
}

void HostWeights::reset() {
  if (!data_) return;
#ifdef BCD_HAVE_CUDA_KERNELS
  if (registered_) cuda_host_unregister(data_);
#endif
  ::munmap(data_, mapped_);
  data_ = nullptr;
}

HostWeights::~HostWeights() { reset(); }

HostWeights::HostWeights(HostWeights&& o) noexcept { *this = std::move(o); }

HostWeights& HostWeights::operator=(HostWeights&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = o.bytes_, mapped_ = o.mapped_;
    name_ = std::move(o.name_);
    registered_ = o.registered_;
  }
  return *this;
}

// ---- WeightStream ----

WeightStream::WeightStream(std::vector<StreamSource> homes, std::vector<uint64_t> bytes, std::vector<void*> slots,
                           uint64_t slot_bytes, std::unique_ptr<ComputeCopier> copier, std::vector<void*> staging)
    : homes_(std::move(homes)), bytes_(std::move(bytes)), slot_bytes_(slot_bytes), copier_(std::move(copier)) {
  BCD_CHECK(homes_.size() == bytes_.size() && slots.size() >= 2 && copier_ && (staging.empty() || staging.size() == slots.size()),
            "WeightStream: {} homes, {} sizes, {} slots, {} staging buffers", homes_.size(), bytes_.size(), slots.size(),
            staging.size());
  for (size_t b = 0; b < bytes_.size(); ++b) {
    const StreamSource& h = homes_[b];
    BCD_CHECK(bytes_[b] <= slot_bytes_ && (bytes_[b] == 0 || h.host || h.on_nvme()) && (!h.on_nvme() || !staging.empty()),
              "WeightStream: block {} ({} bytes) vs slots of {}", b, bytes_[b], slot_bytes_);
  }
  for (size_t s = 0; s < slots.size(); ++s) slots_.push_back(Slot{slots[s], staging.empty() ? nullptr : staging[s]});
}

WeightStream::~WeightStream() {
  for (Slot& s : slots_)
    if (s.read) try {
        homes_[s.block].store->wait(s.read);
      } catch (const std::exception&) {  // nothing uses it any more
      }
  if (copier_) copier_->fence();
}

int WeightStream::slot_of(int block) const {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].block == block) return static_cast<int>(s);
  return -1;
}

bool WeightStream::held(int block) const {
  const int s = slot_of(block);
  return s >= 0 && slots_[s].users > 0;
}

int WeightStream::free_slot(const std::vector<int>& keep) const {
  // Prefer an empty slot, then one whose block is not wanted soon.
  int best = -1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& sl = slots_[s];
    if (sl.users > 0 || std::find(keep.begin(), keep.end(), sl.block) != keep.end()) continue;
    if (sl.block < 0) return static_cast<int>(s);
    if (best < 0) best = static_cast<int>(s);
  }
  return best;
}

void WeightStream::copy_into(int slot, int block) {
  Slot& s = slots_[slot];
  const StreamSource& h = homes_[block];
  if (s.read) land(s);  // (a slot is never refilled while its read is in flight; kept safe)
  s.block = block;
  stats_.bytes += bytes_[block];
  stats_.copies += 1;
  if (h.on_nvme()) {
    // The staging buffer's last copy out must be over before a read overwrites it.
    copier_->wait(s.token);
    s.token = 0;
    s.read = h.store->read_async(h.object, s.staging);
    stats_.nvme_bytes += bytes_[block];
    return;
  }
  // Ordered after the compute side's work so far: the slot's last user has finished with it.
  s.token = copier_->copy_in(s.ptr, h.host, bytes_[block]);
}

void WeightStream::land(Slot& s) {
  const Ticket t = std::exchange(s.read, 0);
  try {
    homes_[s.block].store->wait(t);  // UserError on an I/O error or a checksum mismatch
  } catch (...) {
    last_failed_ = s.block;
    s.block = -1;  // holds nothing usable
    throw;
  }
  s.token = copier_->copy_in(s.ptr, s.staging, bytes_[s.block]);
}

void WeightStream::poll() {
  for (Slot& s : slots_)
    if (s.read && homes_[s.block].store->done(s.read)) land(s);
}

void WeightStream::expect(const std::vector<int>& order) {
  order_.clear();
  for (int b : order)
    if (streamed(b)) order_.push_back(b);
  cursor_ = 0;
  if (!order_.empty()) prefetch_ahead(-1);
}

void WeightStream::prefetch_ahead(int current) {
  poll();
  // The next depth - 1 uses (depth when nothing is held), from the cursor, wrapping around.
  std::vector<int> want;
  if (current >= 0) want.push_back(current);
  for (size_t k = 0; k < order_.size() && static_cast<int>(want.size()) < depth(); ++k) {
    const int b = order_[(cursor_ + k) % order_.size()];
    if (std::find(want.begin(), want.end(), b) == want.end()) want.push_back(b);
  }
  for (int b : want) {
    if (slot_of(b) >= 0) continue;
    const int s = free_slot(want);
    if (s < 0) break;  // every slot is in use or wanted sooner
    copy_into(s, b);
  }
}

void* WeightStream::acquire(int block) {
  BCD_CHECK(streamed(block), "WeightStream::acquire: block {} is not streamed", block);
  int s = slot_of(block);
  if (s >= 0 && slots_[s].users > 0) {  // nested use
    slots_[s].users += 1;
    return slots_[s].ptr;
  }
  // Follow the announced order: this use is the next expected one, or (a pass that went another
  // way) the next occurrence of the block; anything else leaves the cursor alone.
  for (size_t k = 0; k < order_.size(); ++k) {
    const size_t at = (cursor_ + k) % order_.size();
    if (order_[at] == block) {
      cursor_ = (at + 1) % order_.size();
      break;
    }
  }
  if (s < 0) {  // not on its way: copy it now
    stats_.misses += 1;
    s = free_slot({});
    BCD_CHECK(s >= 0, "WeightStream: all {} window buffers are in use (uses nest deeper than the window)", depth());
    copy_into(s, block);
  }
  Slot& sl = slots_[s];
  const auto t0 = std::chrono::steady_clock::now();
  if (sl.read) land(sl);  // an NVMe read still in flight: wait for it, then copy
  sl.users = 1;
  stats_.acquires += 1;
  // The slot's own copy, not the later prefetches into other slots (CPU: the training thread
  // waits; CUDA: the compute stream waits on the copy's event, the host goes on).
  copier_->fence(sl.token);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.stall_s += waited;
  stats_.last_stall_s = waited;
  if (waited > stats_.max_stall_s) stats_.max_stall_s = waited, stats_.max_stall_block = block;
  prefetch_ahead(block);
  return sl.ptr;
}

void WeightStream::release(int block) {
  const int s = slot_of(block);
  BCD_CHECK(s >= 0 && slots_[s].users > 0, "WeightStream::release: block {} is not held", block);
  slots_[s].users -= 1;
}

void WeightStream::invalidate(int block) {
  const int s = slot_of(block);
  if (s < 0) return;
  BCD_CHECK(slots_[s].users == 0, "WeightStream::invalidate: block {} is in use", block);
  Slot& sl = slots_[s];
  if (sl.read) {  // a read of the old weights: its result is not wanted, nor its error
    try {
      homes_[block].store->wait(std::exchange(sl.read, 0));
    } catch (const UserError&) {
    }
  }
  copier_->wait(sl.token);  // a copy still reading the old home finishes first
  sl.block = -1;
}

}  // namespace bcd
