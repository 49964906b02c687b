// iobench: keeps queue_depth block-sized requests in flight over one file, pass after pass, and
// reports GB/s. Sequential offsets, as a stager's prefetch and write-back produce them.
#include "io/iobench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "io/direct_io.h"
#include "base/error.h"

namespace bcd {

namespace {

// Deletes the test file on the way out when iobench created it.
struct RemoveOnExit {
  std::string path;
  bool armed = false;
  ~RemoveOnExit() {
    if (armed) ::unlink(path.c_str());
  }
};

struct Pass {
  IoEngine& engine;
  int fd;
  const std::string& file;
  char* buffers;        // queue_depth blocks
  uint64_t block_size;
  unsigned queue_depth;
};

// Moves [begin, end) of the file sequentially with queue_depth requests in flight.
void run_pass(const Pass& p, IoOp op, uint64_t begin, uint64_t end) {
  std::vector<uint64_t> offset(p.queue_depth), length(p.queue_depth);
  std::vector<uint64_t> free_slots;
  for (unsigned i = p.queue_depth; i-- > 0;) free_slots.push_back(i);
  std::vector<IoCompletion> done(p.queue_depth);
  uint64_t next = begin;
  while (next < end || free_slots.size() < p.queue_depth) {
    while (next < end && !free_slots.empty()) {
      const uint64_t slot = free_slots.back();
      free_slots.pop_back();
      offset[slot] = next;
      length[slot] = std::min(p.block_size, end - next);
      const IoRequest req{op, p.fd, next, length[slot], p.buffers + slot * p.block_size, slot};
      if (const int rc = p.engine.submit(req); rc != 0)
        user_error("iobench: {} {} offset {}: {}", to_string(op), p.file, next, errno_text(rc));
      next += length[slot];
    }
    const size_t n = p.engine.wait(done.data(), done.size(), 1);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t slot = done[i].tag;
      if (done[i].result != static_cast<int64_t>(length[slot])) {
        const std::string why = done[i].result < 0 ? errno_text(static_cast<int>(done[i].result))
                                                   : fmt::format("short {} of {} bytes", done[i].result, length[slot]);
        user_error("iobench: {} {} offset {}: {}", to_string(op), p.file, offset[slot], why);
      }
      free_slots.push_back(slot);
    }
  }
}

void check_options(const IoBenchOptions& o) {
  struct stat st {};
  if (::stat(o.path.c_str(), &st) != 0) user_error("iobench: --path {}: {}", o.path, errno_text(errno));
  if (!S_ISDIR(st.st_mode)) user_error("iobench: --path {} is not a directory", o.path);
  if (o.block_size < kIoAlign || !is_aligned(o.block_size) || o.block_size > (1ull << 30))
    user_error("iobench: --block-size {}: expected a multiple of 4096 bytes up to 1 GiB", o.block_size);
  if (o.size < o.block_size || !is_aligned(o.size))
    user_error("iobench: --size {}: expected a multiple of 4096 bytes, at least the block size ({})", o.size,
               o.block_size);
  if (o.queue_depth < 1 || o.queue_depth > 4096) user_error("iobench: --queue-depth {}: expected 1 to 4096", o.queue_depth);
  if (o.loops < 1) user_error("iobench: loops {}: expected at least 1", o.loops);
  if (o.seconds < 0) user_error("iobench: seconds {}: expected >= 0", o.seconds);
}

}  // namespace

IoBenchResult measure_io(const IoBenchOptions& o) {
  check_options(o);
  const std::string file = o.path + "/bcd-iobench.dat";
  struct stat st {};
  const bool existed = ::stat(file.c_str(), &st) == 0;
  if (existed && !S_ISREG(st.st_mode)) user_error("iobench: {} exists and is not a regular file", file);
  const uint64_t have = existed ? static_cast<uint64_t>(st.st_size) : 0;
  DataFile f = open_data_file(file, o.direct, /*create=*/true, /*truncate=*/false);
  RemoveOnExit remove{file, !existed};

  // Buffers before the engine: the engine (and any I/O into them) must go first.
  AlignedBuffer buffers(static_cast<size_t>(o.block_size) * o.queue_depth);
  uint64_t x = 0x9e3779b97f4a7c15ull;  // non-zero, incompressible data to write
  for (size_t i = 0; i + 8 <= buffers.size(); i += 8) {
    x ^= x << 13;  // xorshift64
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(buffers.data() + i, &x, 8);
  }
  auto engine = make_io_engine(EngineOptions{o.engine, o.queue_depth, o.block_size});
  engine->register_file(f.fd.get());                      // speed-ups where the kernel allows;
  engine->register_buffer(buffers.data(), buffers.size());  // plain I/O otherwise
  const Pass pass{*engine, f.fd.get(), file, buffers.data(), o.block_size, o.queue_depth};

  // Lay the file out first, as fio does: reading never-written blocks would measure nothing.
  if (have < o.size) {
    run_pass(pass, IoOp::kWrite, have / kIoAlign * kIoAlign, o.size);
    if (::fdatasync(f.fd.get()) != 0) user_error("iobench: sync {}: {}", file, errno_text(errno));
  }

  using Clock = std::chrono::steady_clock;
  double seconds = 0;
  unsigned passes = 0;
  do {
    if (!f.direct && o.mode == IoOp::kRead) ::posix_fadvise(f.fd.get(), 0, 0, POSIX_FADV_DONTNEED);
    const auto t0 = Clock::now();
    run_pass(pass, o.mode, 0, o.size);
    if (!f.direct && o.mode == IoOp::kWrite && ::fdatasync(f.fd.get()) != 0)
      user_error("iobench: sync {}: {}", file, errno_text(errno));
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++passes;
  } while (passes < o.loops || seconds < o.seconds);

  IoBenchResult r;
  r.mode = o.mode;
  r.engine = engine->kind();
  r.direct = f.direct;
  r.bytes = o.size * passes;
  r.seconds = seconds;
  r.gb_s = static_cast<double>(r.bytes) / seconds / 1e9;
  engine.reset();  // before the buffers and the file
  return r;
}

int run_iobench(const IoBenchOptions& opts) {
  const IoBenchResult r = measure_io(opts);
  fmt::print("iobench: {} {} of {}/bcd-iobench.dat, {} blocks, queue depth {}, engine {}, {}: {:.3f} s, {:.3f} GB/s\n",
             to_string(r.mode), format_bytes(r.bytes), opts.path, format_bytes(opts.block_size), opts.queue_depth,
             to_string(r.engine), r.direct ? "O_DIRECT" : "buffered", r.seconds, r.gb_s);
  fmt::print(
      "{{\"mode\":\"{}\",\"engine\":\"{}\",\"bytes\":{},\"seconds\":{:.6f},\"gb_s\":{:.4f},\"direct\":{},"
      "\"block_size\":{},\"queue_depth\":{}}}\n",
      to_string(r.mode), to_string(r.engine), r.bytes, r.seconds, r.gb_s, r.direct, opts.block_size, opts.queue_depth);
  std::fflush(stdout);
  return 0;
}

}  // namespace bcd
