// Extent store: object layout and preallocation, the read and write lanes (one thread and one
// engine each), per-extent checksums, ordering of operations on one object.
#include "io/extent_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/bytes.h"
#include "base/error.h"

namespace bcd {

struct ExtentStore::Job {
  Object* obj = nullptr;
  IoOp op = IoOp::kRead;
  char* buf = nullptr;              // the caller's
  std::vector<Extent> extents;      // layout; expected (read) or computed (write) checksums
  AlignedBuffer tail;               // bounce for a last extent that ends inside a 4 KiB page
  size_t next = 0;                  // next extent to submit
  size_t outstanding = 0;           // extents submitted, not completed
  std::string error;                // the first failure
  bool done = false;
};

struct ExtentStore::Lane {
  IoOp op;
  std::unique_ptr<IoEngine> engine;
  std::deque<Job*> queue;                         // new jobs, under mu_
  std::condition_variable cv;                     // queue not empty, or stop_
  bool busy = false;                              // jobs taken and not finished, under mu_
  std::vector<Job*> active;                       // taken from queue, not finished: lane thread
  std::string broken;                             // why the lane stopped working, under mu_
  std::vector<std::pair<Job*, size_t>> slots;     // by request tag: job and extent index
  std::vector<uint64_t> free_slots;
  std::thread thread;
};

namespace {

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

// ---- Construction ----

ExtentStore::ExtentStore(std::vector<std::string> paths, StoreOptions opts, EngineFactory make_engine)
    : paths_(std::move(paths)), opts_(opts) {
  if (paths_.empty()) user_error("extent store: no paths given");
  if (opts_.extent_bytes < kIoAlign || !is_aligned(opts_.extent_bytes) || opts_.extent_bytes > (1ull << 30))
    user_error("extent store: extent size {}: expected a multiple of 4096 bytes up to 1 GiB", opts_.extent_bytes);
  for (const std::string& p : paths_) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) user_error("extent store: path {}: {}", p, errno_text(errno));
    if (!S_ISDIR(st.st_mode)) user_error("extent store: path {} is not a directory", p);
  }
  open_files(opts_.open_existing);
  if (opts_.open_existing) load_table();

  if (!make_engine) make_engine = [](IoOp, const EngineOptions& eo) { return make_io_engine(eo); };
  const EngineOptions eo{opts_.engine, opts_.queue_depth, opts_.extent_bytes};
  for (IoOp op : {IoOp::kRead, IoOp::kWrite}) {
    auto lane = std::make_unique<Lane>();
    lane->op = op;
    lane->engine = make_engine(op, eo);
    for (const DataFile& f : files_) lane->engine->register_file(f.fd.get());  // a speed-up only
    engine_kind_ = lane->engine->kind();
    lanes_[static_cast<int>(op)] = std::move(lane);
  }
  // Threads last: nothing above may throw once they run.
  try {
    for (auto& lane : lanes_) lane->thread = std::thread([this, l = lane.get()] { run_lane(*l); });
  } catch (...) {  // no thread for the second lane: stop the first before unwinding
    stop_lanes();
    throw;
  }
}

void ExtentStore::stop_lanes() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  for (auto& lane : lanes_) {
    lane->cv.notify_all();
    if (lane->thread.joinable()) lane->thread.join();  // after every queued job is done
  }
}

void ExtentStore::open_files(bool existing) {
  for (size_t i = 0; i < paths_.size(); ++i) {
    const std::string path = fmt::format("{}/extents.{}.data", paths_[i], i);
    if (existing && ::access(path.c_str(), F_OK) != 0)
      user_error("extent store: open {}: {} (open_existing needs the files of an earlier store)", path,
                 errno_text(errno));
    DataFile f = open_data_file(path, opts_.direct, /*create=*/true, /*truncate=*/false);
    // Two stores over one path would overwrite each other's extents: the first one holds the lock.
    if (::flock(f.fd.get(), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
      user_error("extent store: {} is in use by another extent store (flock)", path);
    if (!existing && ::ftruncate(f.fd.get(), 0) != 0) user_error("extent store: truncate {}: {}", path, errno_text(errno));
    direct_ = direct_ && f.direct;
    file_paths_.push_back(path);
    files_.push_back(std::move(f));
    file_bytes_.push_back(0);
  }
  if (!existing) ::unlink((paths_[0] + "/extents.meta").c_str());  // a stale table would lie
}

ExtentStore::~ExtentStore() {
  stop_lanes();
  if (discard_) {
    for (const std::string& p : file_paths_) ::unlink(p.c_str());
    if (!paths_.empty()) ::unlink((paths_[0] + "/extents.meta").c_str());
  } else {
    try {
      sync();
    } catch (const std::exception& e) {
      fmt::print(stderr, "bcdtrain: warning: extent store: {}\n", e.what());
    }
  }
  // Unlock explicitly: an io_uring's registered files outlive close() until the kernel finishes
  // tearing the ring down, and the lock would linger with them.
  for (const DataFile& f : files_) ::flock(f.fd.get(), LOCK_UN);
}

// ---- Objects ----

ObjectId ExtentStore::create(const std::string& name, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (name.empty()) user_error("extent store: create: empty object name");
  if (by_name_.count(name)) user_error("extent store: create '{}': an object of that name exists", name);

  auto obj = std::make_unique<Object>();
  obj->name = name;
  obj->bytes = bytes;
  const size_t n_files = files_.size();
  std::vector<uint64_t> begin = file_bytes_, end = file_bytes_;
  for (uint64_t pos = 0, i = 0; pos < bytes; pos += opts_.extent_bytes, ++i) {
    const uint32_t f = static_cast<uint32_t>((next_file_ + i) % n_files);
    const uint64_t len = align_up(std::min(opts_.extent_bytes, bytes - pos));
    obj->extents.push_back(Extent{f, end[f], len, 0});
    end[f] += len;
  }
  // Reserve now, so a full drive shows up here, naming it, and never halfway through a write-back.
  for (size_t f = 0; f < n_files; ++f) {
    if (end[f] == begin[f]) continue;
    const int fd = files_[f].fd.get();
    int rc = ::fallocate(fd, 0, static_cast<off_t>(begin[f]), static_cast<off_t>(end[f] - begin[f]));
    if (rc != 0 && errno == EOPNOTSUPP) rc = ::ftruncate(fd, static_cast<off_t>(end[f]));  // sparse instead
    if (rc != 0) {
      const int err = errno;
      for (size_t g = 0; g <= f; ++g)  // give back what this call took; other objects' space stays
        if (end[g] != begin[g] && ::ftruncate(files_[g].fd.get(), static_cast<off_t>(begin[g])) != 0) break;
      user_error("extent store: create '{}' ({}): reserve {} at offset {} of {}: {}", name, format_bytes(bytes),
                 format_bytes(end[f] - begin[f]), begin[f], file_paths_[f], errno_text(err));
    }
  }
  file_bytes_ = end;
  next_file_ = static_cast<uint32_t>((next_file_ + obj->extents.size()) % n_files);
  const ObjectId id = static_cast<ObjectId>(objects_.size());
  by_name_.emplace(name, id);
  objects_.push_back(std::move(obj));
  return id;
}

std::optional<ObjectId> ExtentStore::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

ExtentStore::Object& ExtentStore::object_locked(ObjectId id) const {
  BCD_CHECK(id < objects_.size(), "object id {} of {}", id, objects_.size());
  return *objects_[id];
}

const std::string& ExtentStore::object_name(ObjectId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return object_locked(id).name;  // never changes once created
}

uint64_t ExtentStore::object_bytes(ObjectId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return object_locked(id).bytes;
}

size_t ExtentStore::object_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return objects_.size();
}

std::vector<ExtentLocation> ExtentStore::extents(ObjectId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ExtentLocation> out;
  for (const Extent& e : object_locked(id).extents)
    out.push_back(ExtentLocation{file_paths_[e.file], e.offset, e.length, e.checksum});
  return out;
}

EngineKind ExtentStore::engine_kind() const { return engine_kind_; }

// ---- Jobs ----

Ticket ExtentStore::write_async(ObjectId id, const void* buf) {
  return submit_job(id, IoOp::kWrite, static_cast<char*>(const_cast<void*>(buf)));  // only read from
}

Ticket ExtentStore::read_async(ObjectId id, void* buf) { return submit_job(id, IoOp::kRead, static_cast<char*>(buf)); }

Ticket ExtentStore::submit_job(ObjectId id, IoOp op, char* buf) {
  std::unique_lock<std::mutex> lock(mu_);
  Object& obj = object_locked(id);
  BCD_CHECK(is_aligned(buf), "{} '{}': buffer {} is not 4096-aligned (use AlignedBuffer)", to_string(op), obj.name,
            static_cast<void*>(buf));
  // A read must see the write before it; a write must not change data under a read or another write.
  done_cv_.wait(lock, [&] { return obj.writers == 0 && (op == IoOp::kRead || obj.readers == 0); });
  if (op == IoOp::kRead && !obj.failed.empty())
    throw IoError(fmt::format("read '{}': no valid data: its last write failed ({})", obj.name, obj.failed));
  if (op == IoOp::kRead && !obj.written) user_error("read '{}': the object was never written", obj.name);

  auto job = std::make_unique<Job>();
  job->obj = &obj;
  job->op = op;
  job->buf = buf;
  job->extents = obj.extents;
  if (!obj.extents.empty() && !is_aligned(obj.bytes)) job->tail = AlignedBuffer(obj.extents.back().length);
  ++(op == IoOp::kRead ? obj.readers : obj.writers);
  if (op == IoOp::kWrite) ++writes_in_flight_;

  const Ticket ticket = next_ticket_++;
  Job* j = job.get();
  jobs_.emplace(ticket, std::move(job));
  Lane& lane = *lanes_[static_cast<int>(op)];
  if (!lane.broken.empty()) j->error = fmt::format("{} '{}': {}", to_string(op), obj.name, lane.broken);
  if (j->extents.empty() || !lane.broken.empty()) {  // nothing to move, or nobody to move it
    finish_job_locked(*j);
  } else {
    lane.queue.push_back(j);
    lane.cv.notify_one();
  }
  return ticket;
}

void ExtentStore::finish_job_locked(Job& job) {
  Object& obj = *job.obj;
  if (job.op == IoOp::kRead) {
    --obj.readers;
  } else {
    --obj.writers;
    --writes_in_flight_;
    obj.written = job.error.empty();
    obj.failed = job.error;
    if (obj.written) obj.extents = job.extents;  // the new checksums
  }
  job.done = true;
  done_cv_.notify_all();
}

void ExtentStore::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = jobs_.find(ticket);
  BCD_CHECK(it != jobs_.end(), "ticket {} is unknown or was waited for already", ticket);
  Job* job = it->second.get();
  done_cv_.wait(lock, [&] { return job->done; });
  std::string error = std::move(job->error);
  jobs_.erase(ticket);  // by key: the iterator may have died in a rehash meanwhile
  if (!error.empty()) throw IoError(error);
}

bool ExtentStore::done(Ticket ticket) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(ticket);
  BCD_CHECK(it != jobs_.end(), "ticket {} is unknown or was waited for already", ticket);
  return it->second->done;
}

// ---- Lanes ----

// One thread per direction drives its engine: it feeds extents of queued jobs, reaps completions,
// checks checksums and retires jobs. Keeping two queue depths of extents submitted lets the
// engine refill the kernel queue at once while this thread verifies what came back.
void ExtentStore::run_lane(Lane& lane) {
  try {
    drive_lane(lane);
  } catch (const std::exception& e) {
    // A bug or a kernel refusing io_uring_enter: fail this lane's jobs, now and later, rather
    // than take the process down from a background thread. The engine goes first: its
    // destructor waits for ops in flight, so no transfer outlives its job.
    lane.engine.reset();
    std::lock_guard<std::mutex> lock(mu_);
    lane.broken = fmt::format("the {} queue failed: {}", to_string(lane.op), e.what());
    lane.active.insert(lane.active.end(), lane.queue.begin(), lane.queue.end());
    lane.queue.clear();
    for (Job* j : lane.active) {
      if (j->error.empty()) j->error = fmt::format("{} '{}': {}", to_string(j->op), j->obj->name, lane.broken);
      finish_job_locked(*j);
    }
    lane.active.clear();
    lane.busy = false;
  }
}

void ExtentStore::drive_lane(Lane& lane) {
  const size_t window = 2 * static_cast<size_t>(lane.engine->queue_depth());
  std::vector<IoCompletion> done(window);
  std::vector<Job*>& active = lane.active;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active.empty()) {
        lane.busy = false;
        done_cv_.notify_all();  // register_buffer waits for idle lanes
        lane.cv.wait(lock, [&] { return stop_ || !lane.queue.empty(); });
        if (lane.queue.empty()) return;  // stopping, and everything queued is done
      }
      lane.busy = true;
      active.insert(active.end(), lane.queue.begin(), lane.queue.end());
      lane.queue.clear();
    }
    for (Job* job : active) {
      while (lane.engine->pending() < window && job->next < job->extents.size() && job->error.empty())
        submit_extent(lane, *job);
      if (lane.engine->pending() >= window) break;
    }
    if (lane.engine->pending() > 0) {
      const size_t n = lane.engine->wait(done.data(), done.size(), 1);
      for (size_t i = 0; i < n; ++i) finish_extent(lane, done[i]);
    }
    auto over = [](const Job* j) { return j->outstanding == 0 && (j->next == j->extents.size() || !j->error.empty()); };
    if (std::any_of(active.begin(), active.end(), over)) {
      std::lock_guard<std::mutex> lock(mu_);
      for (Job* j : active)
        if (over(j)) finish_job_locked(*j);
      active.erase(std::remove_if(active.begin(), active.end(), over), active.end());
    }
  }
}

namespace {

// Where extent i's bytes live in memory: the caller's buffer, or the bounce page for a tail.
char* extent_memory(char* buf, AlignedBuffer& tail, size_t i, size_t n, uint64_t extent_bytes) {
  return (i + 1 == n && tail.size() > 0) ? tail.data() : buf + i * extent_bytes;
}

}  // namespace

void ExtentStore::submit_extent(Lane& lane, Job& job) {
  const size_t i = job.next++;
  Extent& e = job.extents[i];
  char* mem = extent_memory(job.buf, job.tail, i, job.extents.size(), opts_.extent_bytes);
  if (job.op == IoOp::kWrite) {
    if (mem == job.tail.data()) std::memcpy(mem, job.buf + i * opts_.extent_bytes, job.obj->bytes - i * opts_.extent_bytes);
    e.checksum = XXH3_64bits(mem, e.length);
  }
  uint64_t tag;
  if (!lane.free_slots.empty()) {
    tag = lane.free_slots.back();
    lane.free_slots.pop_back();
    lane.slots[tag] = {&job, i};
  } else {
    tag = lane.slots.size();
    lane.slots.emplace_back(&job, i);
  }
  const IoRequest req{job.op, files_[e.file].fd.get(), e.offset, e.length, mem, tag};
  if (const int rc = lane.engine->submit(req); rc != 0) {
    lane.free_slots.push_back(tag);
    job.error = fmt::format("{} '{}': {} offset {} ({}): {}", to_string(job.op), job.obj->name, file_paths_[e.file],
                            e.offset, format_bytes(e.length), errno_text(rc));
    return;
  }
  ++job.outstanding;
}

void ExtentStore::finish_extent(Lane& lane, const IoCompletion& c) {
  auto [job, i] = lane.slots[c.tag];
  lane.free_slots.push_back(c.tag);
  --job->outstanding;
  const Extent& e = job->extents[i];
  const std::string where = fmt::format("{} offset {} ({})", file_paths_[e.file], e.offset, format_bytes(e.length));
  if (c.result != static_cast<int64_t>(e.length)) {
    if (!job->error.empty()) return;  // report the first failure of a job
    const std::string why = c.result < 0 ? errno_text(static_cast<int>(c.result))
                                         : fmt::format("short {}: {} of {} bytes", to_string(job->op), c.result, e.length);
    job->error = fmt::format("{} '{}': {}: {}", to_string(job->op), job->obj->name, where, why);
    return;
  }
  if (job->op == IoOp::kWrite) return;
  char* mem = extent_memory(job->buf, job->tail, i, job->extents.size(), opts_.extent_bytes);
  const uint64_t sum = XXH3_64bits(mem, e.length);
  if (sum != e.checksum) {
    if (job->error.empty())
      job->error = fmt::format("checksum mismatch reading '{}' (extent {} of {}): {}: stored xxh3 {}, read {}",
                               job->obj->name, i + 1, job->extents.size(), where, hex64(e.checksum), hex64(sum));
    return;
  }
  if (mem == job->tail.data()) std::memcpy(job->buf + i * opts_.extent_bytes, mem, job->obj->bytes - i * opts_.extent_bytes);
}

// ---- Buffers ----

int ExtentStore::register_buffer(void* buf, size_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  // The engines belong to the lane threads; touch them only while both sleep (they need mu_ to wake).
  done_cv_.wait(lock, [&] {
    return std::all_of(std::begin(lanes_), std::end(lanes_), [](const auto& l) { return !l->busy && l->queue.empty(); });
  });
  int rc = 0;
  for (auto& lane : lanes_) {
    const int r = lane->engine ? lane->engine->register_buffer(buf, bytes) : -EIO;
    if (r != 0 && rc == 0) rc = r;
  }
  return rc;
}

}  // namespace bcd
