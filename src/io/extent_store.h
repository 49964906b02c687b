// The extent store: named objects ("block 7 / adam_m") in preallocated files striped over several
// paths, written and read asynchronously through two engines (a write-back never queues ahead of
// a prefetch), every extent checksummed with XXH3-64 and verified on each read.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "io/direct_io.h"
#include "io/io_engine.h"

namespace bcd {

// Layout on disk, for paths P0..Pn-1 (directories that must exist):
//   Pi/extents.<i>.data  one file per path, grown with fallocate as objects are created. An
//                        object is cut into extents of extent_bytes (the last one shorter, padded
//                        to 4 KiB); consecutive extents go to consecutive files, round-robin, so a
//                        sequential read or write keeps every drive busy.
//   P0/extents.meta      the table: objects, where each extent lives, its XXH3-64 (JSON). The
//                        checksums live in memory and reach this file through sync() (atomically:
//                        temporary file, fsync, rename), which the destructor also calls.
struct StoreOptions {
  EngineKind engine = EngineKind::kAuto;  // io_uring if it can be set up, else threads (one stderr line)
  unsigned queue_depth = 8;               // ops in flight per queue (the read and the write queue each)
  uint64_t extent_bytes = 1 << 20;        // unit of checksums, of I/O ops and of striping; multiple of 4 KiB
  bool direct = true;                     // O_DIRECT; where a filesystem can't, buffered with a warning
  bool open_existing = false;             // load P0/extents.meta (left by sync()); else start empty,
                                          // replacing a store left in these paths
};

using ObjectId = uint32_t;
using Ticket = uint64_t;

struct ExtentLocation {
  std::string path;   // data file
  uint64_t offset;    // in that file
  uint64_t length;    // on disk (a multiple of 4 KiB)
  uint64_t checksum;  // XXH3-64 of those bytes as last written
};

// Thread-safe. Buffers are the caller's: aligned to 4096 (see AlignedBuffer), object_bytes(id)
// long, untouched by the caller until the ticket is waited for. Operations on one object are
// ordered: a read waits for that object's write in flight, a write for its reads and writes.
class ExtentStore {
 public:
  // Makes the engine of each queue; the default is make_io_engine. Tests wrap it in a FaultEngine.
  using EngineFactory = std::function<std::unique_ptr<IoEngine>(IoOp queue, const EngineOptions&)>;

  // UserError naming the path and operation for a missing or unwritable path, a path in use by
  // another live store (flock), and a table that doesn't match its files (open_existing).
  ExtentStore(std::vector<std::string> paths, StoreOptions opts = {}, EngineFactory make_engine = {});
  ~ExtentStore();
  ExtentStore(const ExtentStore&) = delete;
  ExtentStore& operator=(const ExtentStore&) = delete;

  // Reserves space (fallocate) for a new object. UserError naming the path when a drive is full,
  // and on a duplicate name.
  ObjectId create(const std::string& name, uint64_t bytes);
  std::optional<ObjectId> find(const std::string& name) const;

  // Start a transfer of the whole object. read_async throws at once (UserError) when the object
  // holds no valid data: never written, or its last write failed.
  Ticket write_async(ObjectId id, const void* buf);
  Ticket read_async(ObjectId id, void* buf);
  // Blocks until the transfer is over; UserError naming the object, the file, the offset and the
  // cause on an I/O error, a short transfer or a checksum mismatch. A failed write leaves the
  // object without valid data (reads refuse it) and every other object untouched.
  void wait(Ticket ticket);
  bool done(Ticket ticket) const;  // wait() would not block

  void write(ObjectId id, const void* buf) { wait(write_async(id, buf)); }
  void read(ObjectId id, void* buf) { wait(read_async(id, buf)); }

  // Waits for writes in flight, makes the data durable (fdatasync) and writes the table.
  void sync();
  // At close, remove the data files (and no table is written): the store's contents are not
  // wanted after this process (a run whose checkpoints hold its state).
  void discard_at_close() { discard_ = true; }

  // Registers a long-lived buffer (a slab pool) with both engines: io_uring then skips pinning
  // its pages on every op. 0 or -errno; I/O works the same without. Waits until the store is idle.
  int register_buffer(void* buf, size_t bytes);

  const std::string& object_name(ObjectId id) const;
  uint64_t object_bytes(ObjectId id) const;
  size_t object_count() const;
  std::vector<ExtentLocation> extents(ObjectId id) const;
  const std::vector<std::string>& data_files() const { return file_paths_; }
  bool direct() const { return direct_; }  // every data file is open with O_DIRECT
  EngineKind engine_kind() const;          // of the engines (both queues are made alike)

 private:
  struct Extent {
    uint32_t file;
    uint64_t offset;
    uint64_t length;
    uint64_t checksum;
  };
  struct Object {
    std::string name;
    uint64_t bytes = 0;
    std::vector<Extent> extents;  // checksums as of the last successful write
    bool written = false;         // holds data that checksums vouch for
    std::string failed;           // why its data is unusable (its last write failed), else ""
    int readers = 0;              // jobs in flight
    int writers = 0;
  };
  struct Job;
  struct Lane;

  void open_files(bool existing);
  void load_table();
  std::string table_json_locked() const;
  Object& object_locked(ObjectId id) const;
  Ticket submit_job(ObjectId id, IoOp op, char* buf);
  void finish_job_locked(Job& job);
  void stop_lanes();  // lets the lane threads finish every queued job, then joins them
  void run_lane(Lane& lane);
  void drive_lane(Lane& lane);
  void submit_extent(Lane& lane, Job& job);
  void finish_extent(Lane& lane, const IoCompletion& c);

  std::vector<std::string> paths_;
  StoreOptions opts_;
  std::vector<std::string> file_paths_;
  std::vector<DataFile> files_;
  std::vector<uint64_t> file_bytes_;  // allocated so far, per file
  uint32_t next_file_ = 0;            // where the next object's first extent goes
  bool direct_ = true;
  bool discard_ = false;
  EngineKind engine_kind_ = EngineKind::kAuto;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;  // a job finished (objects may have become idle)
  std::vector<std::unique_ptr<Object>> objects_;
  std::unordered_map<std::string, ObjectId> by_name_;
  std::unordered_map<Ticket, std::unique_ptr<Job>> jobs_;
  Ticket next_ticket_ = 1;
  uint64_t writes_in_flight_ = 0;
  bool stop_ = false;
  std::unique_ptr<Lane> lanes_[2];  // by IoOp; last: the threads stop before the rest goes
};

}  // namespace bcd
