// src/io: engines checked against plain pread/pwrite over every engine x queue depth x extent size x
// buffered/direct combination, requeueing, the io_uring fallback, the extent store (striping,
// checksums, injected faults), byte-size parsing and iobench.
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>
#include <tuple>
#include <vector>

#include "io/bytes.h"
#include "io/direct_io.h"
#include "io/extent_store.h"
#include "io/fault_engine.h"
#include "io/io_engine.h"
#include "io/iobench.h"
#include "io/thread_engine.h"
#include "runtime/error.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::TempDir;

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// ---- Helpers ----

void fill_pattern(void* buf, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto* p = static_cast<unsigned char*>(buf);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<unsigned char>(x >> 32);
  }
}

// Index of the first differing byte, or -1.
int64_t first_mismatch(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return static_cast<int64_t>(i);
  return -1;
}

void pwrite_all(int fd, const void* buf, size_t n, uint64_t off) {
  ASSERT_EQ(::pwrite(fd, buf, n, static_cast<off_t>(off)), static_cast<ssize_t>(n)) << std::strerror(errno);
}

void pread_all(int fd, void* buf, size_t n, uint64_t off) {
  ASSERT_EQ(::pread(fd, buf, n, static_cast<off_t>(off)), static_cast<ssize_t>(n)) << std::strerror(errno);
}

// Skips the calling test when io_uring can't be set up here, saying why.
#define SKIP_WITHOUT_URING(kind)                                                   \
  do {                                                                             \
    std::string why_;                                                              \
    if ((kind) == EngineKind::kUring && !uring_available(&why_))                   \
      GTEST_SKIP() << "io_uring unavailable on this machine: " << why_;            \
  } while (0)

// Submits every request, then waits for all; returns completions by tag.
std::vector<IoCompletion> run_all(IoEngine& engine, const std::vector<IoRequest>& reqs) {
  std::vector<IoCompletion> by_tag(reqs.size(), IoCompletion{~0ull, 1});
  EXPECT_EQ(engine.submit(reqs.data(), reqs.size()), 0);
  std::vector<IoCompletion> out(reqs.size());
  size_t got = 0;
  while (got < reqs.size()) {
    const size_t n = engine.wait(out.data(), out.size(), 1);
    EXPECT_GT(n, 0u);
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) by_tag.at(out[i].tag) = out[i];
    got += n;
  }
  EXPECT_EQ(engine.pending(), 0u);
  return by_tag;
}

// ---- Bytes ----

TEST(Bytes, ParsesUnits) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"4096", 4096},          {"0", 0},           {"4KiB", 4096},      {"4k", 4096},
      {"1MiB", kMiB},          {"1 MiB", kMiB},    {"2GiB", 2ull << 30}, {"2gib", 2ull << 30},
      {"1.5GB", 1500000000ull}, {"1kB", 1000},     {"512B", 512},       {"1.5KiB", 1536},
      {"1TiB", 1ull << 40},    {" 8 M ", 8 * kMiB},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(parse_bytes(text), want) << text;
}

TEST(Bytes, RejectsJunk) {
  for (const char* text : {"", "abc", "1.5XB", "-1", "0.3B", "1e3", "GiB", "1 2", "99999999999TiB", "1.5.5K", "nan"}) {
    try {
      parse_bytes(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + text + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Bytes, Formats) {
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(4096), "4 KiB");
  EXPECT_EQ(format_bytes(2ull << 30), "2 GiB");
  EXPECT_EQ(format_bytes(3 * kMiB / 2), "1.5 MiB");
}

// ---- Engines against pread/pwrite ----

using EngineParam = std::tuple<EngineKind, unsigned /*queue depth*/, uint64_t /*extent*/, bool /*direct*/>;

class EngineRoundTrip : public ::testing::TestWithParam<EngineParam> {};

// Requests of mixed sizes (spanning several extents, one page, a few pages), with a one-page hole
// after each so an op landing at a wrong offset shows; many small ones to exceed the queue depth.
std::vector<std::pair<uint64_t, uint64_t>> request_layout(uint64_t extent) {
  std::vector<uint64_t> sizes = {extent + 4 * kKiB, 4 * kKiB, 12 * kKiB, std::max<uint64_t>(4 * kKiB, extent / 2)};
  for (int i = 0; i < 96; ++i) sizes.push_back(8 * kKiB);
  std::vector<std::pair<uint64_t, uint64_t>> out;  // (offset, length)
  uint64_t off = 0;
  for (uint64_t s : sizes) {
    out.emplace_back(off, s);
    off += s + 4 * kKiB;
  }
  return out;
}

TEST_P(EngineRoundTrip, MatchesPreadAndPwrite) {
  const auto [kind, qd, extent, direct] = GetParam();
  SKIP_WITHOUT_URING(kind);
  TempDir dir("bcd-io");
  const std::string path = dir.file("engine.dat");
  const auto layout = request_layout(extent);
  const uint64_t file_bytes = layout.back().first + layout.back().second + 4 * kKiB;

  DataFile f = open_data_file(path, direct, true, true);
  UniqueFd plain(::open(path.c_str(), O_RDWR | O_CLOEXEC));  // the reference: buffered pread/pwrite
  ASSERT_TRUE(plain);
  std::vector<unsigned char> image(file_bytes);
  fill_pattern(image.data(), image.size(), 1);
  pwrite_all(plain.get(), image.data(), image.size(), 0);

  AlignedBuffer buf(file_bytes);
  auto engine = make_io_engine(EngineOptions{kind, qd, extent});
  ASSERT_EQ(engine->kind(), kind);
  if (qd > 1) {  // registered file and buffer on some combinations, plain ones on the rest
    engine->register_file(f.fd.get());
    engine->register_buffer(buf.data(), buf.size());
  }
  auto requests = [&](IoOp op) {
    std::vector<IoRequest> reqs;
    for (const auto& [off, len] : layout) reqs.push_back(IoRequest{op, f.fd.get(), off, len, buf.data() + off, reqs.size()});
    return reqs;
  };

  // Engine writes, pread reads back.
  fill_pattern(buf.data(), buf.size(), 2);
  for (const IoCompletion& c : run_all(*engine, requests(IoOp::kWrite)))
    ASSERT_EQ(c.result, static_cast<int64_t>(layout.at(c.tag).second)) << "write request " << c.tag;
  for (const auto& [off, len] : layout) std::memcpy(image.data() + off, buf.data() + off, len);
  std::vector<unsigned char> got(file_bytes);
  pread_all(plain.get(), got.data(), got.size(), 0);
  ASSERT_EQ(first_mismatch(got.data(), image.data(), file_bytes), -1) << "engine write vs pread";

  // pwrite writes, engine reads back.
  fill_pattern(image.data(), image.size(), 3);
  pwrite_all(plain.get(), image.data(), image.size(), 0);
  ASSERT_EQ(::fdatasync(plain.get()), 0);
  std::memset(buf.data(), 0, buf.size());
  for (const IoCompletion& c : run_all(*engine, requests(IoOp::kRead)))
    ASSERT_EQ(c.result, static_cast<int64_t>(layout.at(c.tag).second)) << "read request " << c.tag;
  for (const auto& [off, len] : layout)
    ASSERT_EQ(first_mismatch(buf.data() + off, image.data() + off, len), -1) << "pwrite vs engine read at " << off;

  const IoStats st = engine->stats();
  EXPECT_GE(st.ops, 2 * layout.size());
  EXPECT_EQ(st.bytes, 2 * (file_bytes - layout.size() * 4 * kKiB));  // the holes are never touched
}

INSTANTIATE_TEST_SUITE_P(
    AllCombinations, EngineRoundTrip,
    ::testing::Combine(::testing::Values(EngineKind::kUring, EngineKind::kThreads), ::testing::Values(1u, 8u, 64u),
                       ::testing::Values(4 * kKiB, kMiB, 16 * kMiB), ::testing::Bool()),
    [](const ::testing::TestParamInfo<EngineParam>& info) {  // e.g. uring_qd8_extent1MiB_direct
      const uint64_t extent = std::get<2>(info.param);
      const std::string size = extent >= kMiB ? fmt::format("{}MiB", extent / kMiB) : fmt::format("{}KiB", extent / kKiB);
      return fmt::format("{}_qd{}_extent{}_{}", to_string(std::get<0>(info.param)), std::get<1>(info.param), size,
                         std::get<3>(info.param) ? "direct" : "buffered");
    });

// ---- Engine behaviour ----

TEST(IoEngine, RejectsMisalignedRequests) {
  TempDir dir("bcd-io");
  DataFile f = open_data_file(dir.file("x.dat"), false, true, true);
  AlignedBuffer buf(8192);
  auto engine = make_io_engine(EngineOptions{EngineKind::kThreads, 4, kMiB});
  const IoRequest good{IoOp::kRead, f.fd.get(), 0, 4096, buf.data(), 0};
  std::vector<IoRequest> bad(5, good);
  bad[0].offset = 512;
  bad[1].length = 100;
  bad[2].buf = buf.data() + 8;
  bad[3].length = 0;
  bad[4].fd = -1;
  for (const IoRequest& b : bad) {
    const IoRequest pair[] = {good, b};
    EXPECT_EQ(engine->submit(pair, 2), -EINVAL);
    EXPECT_EQ(engine->pending(), 0u) << "a refused batch queues nothing";
  }
}

TEST(IoEngine, InFlightCappedAtQueueDepth) {
  TempDir dir("bcd-io");
  DataFile f = open_data_file(dir.file("x.dat"), false, true, true);
  ASSERT_EQ(::ftruncate(f.fd.get(), 64 * 4096), 0);
  std::atomic<int> now{0}, peak{0};
  ThreadEngine engine(EngineOptions{EngineKind::kThreads, 4, 4096}, [&](IoOp, int fd, void* buf, uint64_t len, uint64_t off) {
    const int n = ++now;
    for (int p = peak.load(); n > p && !peak.compare_exchange_weak(p, n);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --now;
    return static_cast<int64_t>(::pread(fd, buf, len, static_cast<off_t>(off)));
  });
  AlignedBuffer buf(64 * 4096);
  std::vector<IoRequest> reqs;
  for (uint64_t i = 0; i < 16; ++i)  // 16 requests of 4 ops each: 64 ops through 4 slots
    reqs.push_back(IoRequest{IoOp::kRead, f.fd.get(), i * 16384, 16384, buf.data() + i * 16384, i});
  for (const IoCompletion& c : run_all(engine, reqs)) EXPECT_EQ(c.result, 16384);
  EXPECT_EQ(peak.load(), 4);
  EXPECT_EQ(engine.stats().ops, 64u);
}

// Short transfers and -EAGAIN are requeued until the request is whole; the data is exact.
TEST(IoEngine, RequeuesShortTransfersAndEagain) {
  TempDir dir("bcd-io");
  const std::string path = dir.file("x.dat");
  DataFile f = open_data_file(path, false, true, true);
  const uint64_t bytes = 256 * kKiB;
  std::vector<unsigned char> image(bytes);
  fill_pattern(image.data(), bytes, 7);
  std::atomic<int> calls{0};
  // Every third call says EAGAIN, every other moves at most 512 bytes less than asked.
  ThreadEngine engine(EngineOptions{EngineKind::kThreads, 8, 64 * kKiB}, [&](IoOp op, int fd, void* buf, uint64_t len, uint64_t off) {
    const int n = calls++;
    if (n % 3 == 0) return static_cast<int64_t>(-EAGAIN);
    const uint64_t take = (n % 2 == 0 && len > 512) ? len - 512 : len;
    const ssize_t r = op == IoOp::kRead ? ::pread(fd, buf, take, static_cast<off_t>(off))
                                        : ::pwrite(fd, buf, take, static_cast<off_t>(off));
    return r < 0 ? static_cast<int64_t>(-errno) : static_cast<int64_t>(r);
  });
  AlignedBuffer buf(bytes);
  std::memcpy(buf.data(), image.data(), bytes);
  std::vector<IoRequest> reqs;
  for (uint64_t i = 0; i < 4; ++i) reqs.push_back(IoRequest{IoOp::kWrite, f.fd.get(), i * 64 * kKiB, 64 * kKiB, buf.data() + i * 64 * kKiB, i});
  for (const IoCompletion& c : run_all(engine, reqs)) EXPECT_EQ(c.result, static_cast<int64_t>(64 * kKiB));
  std::vector<unsigned char> got(bytes);
  pread_all(f.fd.get(), got.data(), bytes, 0);
  EXPECT_EQ(first_mismatch(got.data(), image.data(), bytes), -1);

  std::memset(buf.data(), 0, bytes);
  for (IoRequest& r : reqs) r.op = IoOp::kRead;
  for (const IoCompletion& c : run_all(engine, reqs)) EXPECT_EQ(c.result, static_cast<int64_t>(64 * kKiB));
  EXPECT_EQ(first_mismatch(buf.data(), image.data(), bytes), -1);
  EXPECT_GT(engine.stats().requeued_short, 0u);
  EXPECT_GT(engine.stats().requeued_again, 0u);
}

TEST(IoEngine, ReportsPersistentEagainAndEndOfFile) {
  TempDir dir("bcd-io");
  DataFile f = open_data_file(dir.file("x.dat"), false, true, true);
  ASSERT_EQ(::ftruncate(f.fd.get(), 8192), 0);
  AlignedBuffer buf(16384);
  ThreadEngine stuck(EngineOptions{EngineKind::kThreads, 2, 4096}, [](IoOp, int, void*, uint64_t, uint64_t) {
    return static_cast<int64_t>(-EAGAIN);
  });
  EXPECT_EQ(run_all(stuck, {IoRequest{IoOp::kRead, f.fd.get(), 0, 4096, buf.data(), 0}}).at(0).result, -EAGAIN);

  auto engine = make_io_engine(EngineOptions{EngineKind::kThreads, 2, 4096});
  // 16 KiB from an 8 KiB file: the first two pages come, then end of file.
  EXPECT_EQ(run_all(*engine, {IoRequest{IoOp::kRead, f.fd.get(), 0, 16384, buf.data(), 0}}).at(0).result, -ENODATA);
}

TEST(IoEngine, ParsesNames) {
  EXPECT_EQ(parse_engine_kind("uring"), EngineKind::kUring);
  EXPECT_EQ(parse_engine_kind("threads"), EngineKind::kThreads);
  EXPECT_EQ(parse_io_op("write"), IoOp::kWrite);
  EXPECT_THROW(parse_engine_kind("aio"), UserError);
  EXPECT_THROW(parse_io_op("readwrite"), UserError);
  EXPECT_THROW(make_io_engine(EngineOptions{EngineKind::kThreads, 0, kMiB}), UserError);
  EXPECT_THROW(make_io_engine(EngineOptions{EngineKind::kThreads, 8, 1000}), UserError);
}

TEST(IoEngine, UringRegisteredFilesAndBuffers) {
  SKIP_WITHOUT_URING(EngineKind::kUring);
  TempDir dir("bcd-io");
  const std::string path = dir.file("x.dat");
  DataFile f = open_data_file(path, true, true, true);
  auto engine = make_io_engine(EngineOptions{EngineKind::kUring, 4, 64 * kKiB});
  AlignedBuffer buf(kMiB), back(kMiB);
  const int rf = engine->register_file(f.fd.get());
  const int rb = engine->register_buffer(buf.data(), buf.size());
  if (rf == -EOPNOTSUPP || rb == -EOPNOTSUPP)
    GTEST_SKIP() << "this kernel has no sparse io_uring file/buffer tables (Linux < 5.19)";
  ASSERT_EQ(rf, 0) << errno_text(rf);
  ASSERT_EQ(rb, 0) << errno_text(rb) << " (RLIMIT_MEMLOCK?)";
  fill_pattern(buf.data(), kMiB, 21);
  // Fixed file and fixed buffer, then a plain buffer through the fixed file, then both plain.
  EXPECT_EQ(run_all(*engine, {IoRequest{IoOp::kWrite, f.fd.get(), 0, kMiB, buf.data(), 0}}).at(0).result, int64_t(kMiB));
  EXPECT_EQ(run_all(*engine, {IoRequest{IoOp::kRead, f.fd.get(), 0, kMiB, back.data(), 0}}).at(0).result, int64_t(kMiB));
  EXPECT_EQ(first_mismatch(buf.data(), back.data(), kMiB), -1);
  EXPECT_EQ(engine->unregister_buffer(buf.data()), 0);
  EXPECT_EQ(engine->unregister_file(f.fd.get()), 0);
  std::memset(back.data(), 0, kMiB);
  EXPECT_EQ(run_all(*engine, {IoRequest{IoOp::kRead, f.fd.get(), 0, kMiB, back.data(), 0}}).at(0).result, int64_t(kMiB));
  EXPECT_EQ(first_mismatch(buf.data(), back.data(), kMiB), -1);
}

// ---- io_uring fallback ----

// Runs `body` in a child process whose io_uring_setup fails with `err` (a seccomp filter, as in
// sandboxes); returns the child's exit code and everything it wrote on stderr.
std::pair<int, std::string> run_without_uring(int err, const std::function<int()>& body) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return {-1, "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(err) & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) _exit(90);
    int rc = 91;
    try {
      rc = body();
    } catch (const std::exception& e) {
      fmt::print(stderr, "child: {}\n", e.what());
    }
    std::fflush(stderr);
    _exit(rc);
  }
  ::close(pipefd[1]);
  std::string out;
  char chunk[512];
  for (ssize_t n; (n = ::read(pipefd[0], chunk, sizeof chunk)) > 0;) out.append(chunk, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

TEST(IoEngine, FallsBackToThreadsWithoutUring) {
  for (const int err : {EPERM, ENOSYS}) {
    TempDir dir("bcd-io");
    const std::string path = dir.file("x.dat");
    auto [code, err_text] = run_without_uring(err, [&] {
      if (uring_available()) return 10;
      auto engine = make_io_engine(EngineOptions{EngineKind::kAuto, 4, kMiB});
      if (engine->kind() != EngineKind::kThreads) return 11;
      auto again = make_io_engine(EngineOptions{EngineKind::kAuto, 4, kMiB});  // no second line
      DataFile f = open_data_file(path, true, true, true);
      AlignedBuffer buf(8192), back(8192);
      fill_pattern(buf.data(), 8192, 5);
      if (run_all(*engine, {IoRequest{IoOp::kWrite, f.fd.get(), 0, 8192, buf.data(), 0}}).at(0).result != 8192) return 12;
      if (run_all(*again, {IoRequest{IoOp::kRead, f.fd.get(), 0, 8192, back.data(), 0}}).at(0).result != 8192) return 13;
      if (first_mismatch(buf.data(), back.data(), 8192) != -1) return 14;
      try {
        make_io_engine(EngineOptions{EngineKind::kUring, 4, kMiB});
        return 15;  // forced io_uring must not fall back silently
      } catch (const UserError& e) {
        fmt::print(stderr, "forced: {}\n", e.what());
      }
      return 0;
    });
    SCOPED_TRACE(errno_text(err));
    EXPECT_EQ(code, 0) << err_text;
    const std::string why = "io_uring unavailable (io_uring_queue_init: " + errno_text(err) + "); using the thread-pool";
    const size_t first = err_text.find(why);
    EXPECT_NE(first, std::string::npos) << err_text;
    EXPECT_EQ(err_text.find(why, first + 1), std::string::npos) << "one line per process: " << err_text;
    EXPECT_NE(err_text.find("forced: I/O engine uring: io_uring unavailable"), std::string::npos) << err_text;
  }
}

// ---- Fault engine ----

TEST(FaultEngine, FlipsTheChosenBitOfTheChosenRead) {
  TempDir dir("bcd-io");
  const std::string path = dir.file("x.dat");
  DataFile f = open_data_file(path, true, true, true);
  std::vector<unsigned char> image(3 * 4096);
  fill_pattern(image.data(), image.size(), 9);
  test::write_text(path, std::string(image.begin(), image.end()));
  auto plan = std::make_shared<FaultPlan>(std::vector<Fault>{{IoOp::kRead, 2, FaultKind::kBitFlip, 8 * 100 + 5}});
  FaultEngine engine(make_io_engine(EngineOptions{}), plan);
  AlignedBuffer buf(3 * 4096);
  std::vector<IoRequest> reqs;
  for (uint64_t i = 0; i < 3; ++i) reqs.push_back(IoRequest{IoOp::kRead, f.fd.get(), i * 4096, 4096, buf.data() + i * 4096, i});
  for (const IoCompletion& c : run_all(engine, reqs)) EXPECT_EQ(c.result, 4096);
  image[4096 + 100] ^= 1 << 5;  // the 2nd read's buffer, byte 100, bit 5
  EXPECT_EQ(first_mismatch(buf.data(), image.data(), image.size()), -1);
  EXPECT_EQ(plan->injected(), 1u);
  EXPECT_EQ(plan->seen(IoOp::kRead), 3u);
}

// ---- Extent store ----

class StoreTest : public ::testing::TestWithParam<EngineKind> {};

TEST_P(StoreTest, RoundTripStripedOverTwoPaths) {
  SKIP_WITHOUT_URING(GetParam());
  TempDir a("bcd-io-a"), b("bcd-io-b");
  StoreOptions opts;
  opts.engine = GetParam();
  opts.extent_bytes = 64 * kKiB;
  opts.queue_depth = 4;
  const std::vector<std::pair<std::string, uint64_t>> objects = {
      {"block 7 / adam_m", kMiB + 12345}, {"block 7 / adam_v", 64 * kKiB}, {"embed / master", 3 * 4096}, {"empty", 0}};
  std::vector<AlignedBuffer> data;
  {
    ExtentStore store({a.path(), b.path()}, opts);
    EXPECT_EQ(store.engine_kind(), GetParam());
    EXPECT_TRUE(store.direct());
    std::vector<ObjectId> ids;
    std::vector<Ticket> tickets;
    for (size_t i = 0; i < objects.size(); ++i) {
      ids.push_back(store.create(objects[i].first, objects[i].second));
      data.emplace_back(objects[i].second);
      fill_pattern(data.back().data(), objects[i].second, 100 + i);
      tickets.push_back(store.write_async(ids[i], data.back().data()));
    }
    for (Ticket t : tickets) store.wait(t);

    // Consecutive extents alternate between the two paths; on disk they hold the object's bytes.
    const auto ext = store.extents(ids[0]);
    ASSERT_EQ(ext.size(), 17u);
    UniqueFd fds[2] = {UniqueFd(::open(store.data_files()[0].c_str(), O_RDONLY)), UniqueFd(::open(store.data_files()[1].c_str(), O_RDONLY))};
    for (size_t k = 0; k < ext.size(); ++k) {
      EXPECT_EQ(ext[k].path, store.data_files()[k % 2]) << "extent " << k;
      const uint64_t n = std::min<uint64_t>(ext[k].length, objects[0].second - k * 64 * kKiB);
      std::vector<unsigned char> raw(n);
      pread_all(fds[k % 2].get(), raw.data(), n, ext[k].offset);
      ASSERT_EQ(first_mismatch(raw.data(), data[0].data() + k * 64 * kKiB, n), -1) << "extent " << k;
    }
    EXPECT_EQ(store.data_files()[0].rfind(a.path(), 0), 0u);
    EXPECT_EQ(store.data_files()[1].rfind(b.path(), 0), 0u);

    for (size_t i = 0; i < objects.size(); ++i) {
      AlignedBuffer back(objects[i].second);
      store.read(ids[i], back.data());
      EXPECT_EQ(first_mismatch(back.data(), data[i].data(), objects[i].second), -1) << objects[i].first;
    }
  }
  // The table persisted by the destructor: a reopened store finds and verifies every object.
  opts.open_existing = true;
  ExtentStore store({a.path(), b.path()}, opts);
  ASSERT_EQ(store.object_count(), objects.size());
  for (size_t i = 0; i < objects.size(); ++i) {
    const auto id = store.find(objects[i].first);
    ASSERT_TRUE(id.has_value()) << objects[i].first;
    AlignedBuffer back(objects[i].second);
    store.read(*id, back.data());
    EXPECT_EQ(first_mismatch(back.data(), data[i].data(), objects[i].second), -1) << objects[i].first;
  }
}

TEST_P(StoreTest, ReadAfterWriteOfOneObjectSeesTheNewData) {
  SKIP_WITHOUT_URING(GetParam());
  TempDir a("bcd-io");
  StoreOptions opts;
  opts.engine = GetParam();
  opts.extent_bytes = 64 * kKiB;
  ExtentStore store({a.path()}, opts);
  const ObjectId id = store.create("x", kMiB);
  AlignedBuffer v1(kMiB), v2(kMiB), back(kMiB);
  fill_pattern(v1.data(), kMiB, 1);
  fill_pattern(v2.data(), kMiB, 2);
  store.write(id, v1.data());
  const Ticket w = store.write_async(id, v2.data());
  const Ticket r = store.read_async(id, back.data());  // queued behind the write, on the other lane
  store.wait(r);
  store.wait(w);
  EXPECT_EQ(first_mismatch(back.data(), v2.data(), kMiB), -1);
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreTest, ::testing::Values(EngineKind::kUring, EngineKind::kThreads),
                         [](const ::testing::TestParamInfo<EngineKind>& info) { return std::string(to_string(info.param)); });

TEST(ExtentStore, ChecksumMismatchOnDiskNamesObjectPathAndOffset) {
  TempDir a("bcd-io"), b("bcd-io");
  StoreOptions opts;
  opts.extent_bytes = 64 * kKiB;
  ExtentStore store({a.path(), b.path()}, opts);
  const ObjectId id = store.create("block 3 / master", 256 * kKiB);
  AlignedBuffer data(256 * kKiB), back(256 * kKiB);
  fill_pattern(data.data(), data.size(), 4);
  store.write(id, data.data());

  // Flip one byte of the third extent behind the store's back.
  const ExtentLocation loc = store.extents(id).at(2);
  UniqueFd fd(::open(loc.path.c_str(), O_RDWR));
  ASSERT_TRUE(fd);
  unsigned char byte;
  pread_all(fd.get(), &byte, 1, loc.offset + 777);
  byte ^= 0x10;
  pwrite_all(fd.get(), &byte, 1, loc.offset + 777);
  ASSERT_EQ(::fsync(fd.get()), 0);
  try {
    store.read(id, back.data());
    FAIL() << "a corrupted extent was read without error";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'block 3 / master'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(loc.path), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("offset {}", loc.offset)), std::string::npos) << msg;
  }
  // Rewriting heals it.
  store.write(id, data.data());
  store.read(id, back.data());
  EXPECT_EQ(first_mismatch(back.data(), data.data(), data.size()), -1);
}

// Every injected fault surfaces as an error naming the object; nothing else is damaged.
TEST(ExtentStore, EveryInjectedFaultIsReported) {
  TempDir a("bcd-io"), b("bcd-io");
  const std::vector<Fault> faults = {
      {IoOp::kWrite, 2, FaultKind::kEio},    {IoOp::kWrite, 4, FaultKind::kEnospc}, {IoOp::kWrite, 6, FaultKind::kShort},
      {IoOp::kWrite, 8, FaultKind::kBitFlip, 12345},                               // caught by the read of o8
      {IoOp::kRead, 2, FaultKind::kEio},     {IoOp::kRead, 3, FaultKind::kShort},   {IoOp::kRead, 4, FaultKind::kBitFlip, 5},
  };
  auto plan = std::make_shared<FaultPlan>(faults);
  StoreOptions opts;
  opts.extent_bytes = 64 * kKiB;
  ExtentStore store({a.path(), b.path()}, opts, [&](IoOp, const EngineOptions& eo) {
    return std::make_unique<FaultEngine>(make_io_engine(eo), plan);
  });
  // One extent per object: the k-th write (read) request is the k-th object written (read).
  std::vector<ObjectId> ids;
  std::vector<AlignedBuffer> data;
  for (int i = 1; i <= 8; ++i) {
    ids.push_back(store.create(fmt::format("o{}", i), 64 * kKiB));
    data.emplace_back(64 * kKiB);
    fill_pattern(data.back().data(), 64 * kKiB, 200 + i);
  }
  int detected = 0;
  auto expect_error = [&](const std::function<void()>& op, const std::string& object, const std::string& cause) {
    try {
      op();
      ADD_FAILURE() << object << ": no error (expected " << cause << ")";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'" + object + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(cause), std::string::npos) << msg;
      EXPECT_TRUE(msg.find(a.path()) != std::string::npos || msg.find(b.path()) != std::string::npos) << msg;
      ++detected;
    }
  };
  for (int i = 0; i < 8; ++i) {
    if (i == 1) expect_error([&] { store.write(ids[i], data[i].data()); }, "o2", errno_text(EIO));
    else if (i == 3) expect_error([&] { store.write(ids[i], data[i].data()); }, "o4", errno_text(ENOSPC));
    else if (i == 5) expect_error([&] { store.write(ids[i], data[i].data()); }, "o6", "short write");
    else store.write(ids[i], data[i].data());
  }
  AlignedBuffer back(64 * kKiB);
  store.read(ids[0], back.data());  // read #1: clean
  EXPECT_EQ(first_mismatch(back.data(), data[0].data(), back.size()), -1);
  expect_error([&] { store.read(ids[2], back.data()); }, "o3", errno_text(EIO));           // read #2
  expect_error([&] { store.read(ids[4], back.data()); }, "o5", "short read");              // read #3
  expect_error([&] { store.read(ids[6], back.data()); }, "o7", "checksum mismatch");       // read #4
  expect_error([&] { store.read(ids[7], back.data()); }, "o8", "checksum mismatch");       // read #5
  EXPECT_EQ(plan->injected(), faults.size());
  EXPECT_EQ(detected, static_cast<int>(faults.size())) << "injected " << plan->injected() << ", detected " << detected;

  // A failed write leaves its object unreadable (never silently stale) and the others intact.
  try {
    store.read(ids[1], back.data());
    ADD_FAILURE() << "read of an object whose write failed";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("its last write failed"), std::string::npos) << e.what();
  }
  for (int i : {0, 2, 4, 6}) {  // o1, o3, o5, o7: the faults hit the reads, not the data
    store.read(ids[i], back.data());
    EXPECT_EQ(first_mismatch(back.data(), data[i].data(), back.size()), -1) << "o" << i + 1;
  }
  store.write(ids[1], data[1].data());  // and a failed object can be written again
  store.read(ids[1], back.data());
  EXPECT_EQ(first_mismatch(back.data(), data[1].data(), back.size()), -1);
}

// An engine that breaks (throws) on its 3rd request, like a kernel refusing io_uring_enter.
class BreakingEngine final : public IoEngine {
 public:
  explicit BreakingEngine(std::unique_ptr<IoEngine> inner) : inner_(std::move(inner)) {}
  int submit(const IoRequest* reqs, size_t n) override {
    if ((submitted_ += n) >= 3) throw InternalError("io_uring_enter: simulated failure");
    return inner_->submit(reqs, n);
  }
  size_t poll(IoCompletion* out, size_t max) override { return inner_->poll(out, max); }
  size_t wait(IoCompletion* out, size_t max, size_t min) override { return inner_->wait(out, max, min); }
  size_t pending() const override { return inner_->pending(); }
  EngineKind kind() const override { return inner_->kind(); }
  unsigned queue_depth() const override { return inner_->queue_depth(); }
  IoStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<IoEngine> inner_;
  size_t submitted_ = 0;
};

TEST(ExtentStore, ABrokenQueueFailsItsJobsInsteadOfCrashing) {
  TempDir dir("bcd-io");
  StoreOptions opts;
  opts.extent_bytes = 64 * kKiB;
  ExtentStore store({dir.path()}, opts, [](IoOp queue, const EngineOptions& eo) -> std::unique_ptr<IoEngine> {
    if (queue == IoOp::kWrite) return std::make_unique<BreakingEngine>(make_io_engine(eo));
    return make_io_engine(eo);
  });
  const ObjectId ok = store.create("ok", 128 * kKiB), big = store.create("big", kMiB);
  AlignedBuffer data(kMiB), back(kMiB);
  fill_pattern(data.data(), kMiB, 13);
  store.write(ok, data.data());  // requests 1 and 2
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      store.write(big, data.data());
      FAIL() << "write through a broken queue succeeded";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("write 'big': the write queue failed: io_uring_enter: simulated failure"),
                std::string::npos) << e.what();
    }
  }
  store.read(ok, back.data());  // the read queue is unaffected, the committed object intact
  EXPECT_EQ(first_mismatch(back.data(), data.data(), 128 * kKiB), -1);
}

TEST(ExtentStore, NonexistentPathIsAUserErrorNamingIt) {
  const std::string path = "/nonexistent-bcd-dir/nvme0";
  try {
    ExtentStore store({path});
    FAIL() << "no error for a missing path";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
}

TEST(ExtentStore, UnwritablePathIsAUserErrorNamingIt) {
  TempDir dir("bcd-io");
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  // Root ignores permissions: try as nobody, in a child.
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::geteuid() == 0 && (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)) _exit(90);
    try {
      ExtentStore store({dir.path()});
      _exit(91);
    } catch (const UserError& e) {
      const std::string msg = e.what();
      const bool ok = msg.find(dir.path() + "/extents.0.data") != std::string::npos && msg.find("open") != std::string::npos &&
                      msg.find("Permission denied") != std::string::npos;
      if (!ok) fmt::print(stderr, "message: {}\n", msg);
      _exit(ok ? 0 : 92);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::chmod(dir.path().c_str(), 0755);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ExtentStore, FullDriveAtCreateNamesThePathAndKeepsOtherObjects) {
  TempDir dir("bcd-io");
  StoreOptions opts;
  opts.extent_bytes = 64 * kKiB;
  ExtentStore store({dir.path()}, opts);
  const ObjectId small = store.create("small", 256 * kKiB);
  AlignedBuffer data(256 * kKiB), back(256 * kKiB);
  fill_pattern(data.data(), data.size(), 11);
  store.write(small, data.data());

  // A file-size limit makes fallocate fail as a full drive would (EFBIG instead of ENOSPC).
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit tight = old;
  tight.rlim_cur = 4 * kMiB;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tight), 0);
  std::string msg;
  try {
    store.create("huge", 64 * kMiB);
  } catch (const UserError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("create 'huge'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.path() + "/extents.0.data"), std::string::npos) << msg;
  EXPECT_NE(msg.find(errno_text(EFBIG)), std::string::npos) << msg;
  EXPECT_FALSE(store.find("huge").has_value());

  store.read(small, back.data());
  EXPECT_EQ(first_mismatch(back.data(), data.data(), data.size()), -1);
  const ObjectId next = store.create("next", 64 * kKiB);  // the store carries on
  store.write(next, data.data());
  store.read(next, back.data());
  EXPECT_EQ(first_mismatch(back.data(), data.data(), 64 * kKiB), -1);
}

TEST(ExtentStore, TmpfsFallsBackToBufferedWithAWarning) {
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0 || !S_ISDIR(st.st_mode)) GTEST_SKIP() << "/dev/shm is missing on this machine";
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", "/dev/shm", 1);
  TempDir dir("bcd-io");
  old_tmpdir ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");

  StoreOptions opts;
  opts.direct = true;
  opts.extent_bytes = 64 * kKiB;
  ::testing::internal::CaptureStderr();
  std::unique_ptr<ExtentStore> store;
  try {
    store = std::make_unique<ExtentStore>(std::vector<std::string>{dir.path()}, opts);
  } catch (...) {
    ::testing::internal::GetCapturedStderr();
    throw;
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(store->direct());
  EXPECT_NE(err.find("warning: " + dir.path() + "/extents.0.data"), std::string::npos) << err;
  EXPECT_NE(err.find("tmpfs"), std::string::npos) << err;
  EXPECT_NE(err.find("using buffered I/O"), std::string::npos) << err;
  const ObjectId id = store->create("x", 100 * kKiB + 7);
  AlignedBuffer data(100 * kKiB + 7), back(100 * kKiB + 7);
  fill_pattern(data.data(), 100 * kKiB + 7, 12);
  store->write(id, data.data());
  store->read(id, back.data());
  EXPECT_EQ(first_mismatch(back.data(), data.data(), 100 * kKiB + 7), -1);
}

TEST(ExtentStore, RefusesBadUse) {
  TempDir dir("bcd-io");
  ExtentStore store({dir.path()});
  const ObjectId id = store.create("x", 4096);
  EXPECT_THROW(store.create("x", 4096), UserError);
  AlignedBuffer buf(4096);
  try {
    store.read(id, buf.data());
    FAIL() << "read of a never-written object";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("never written"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ExtentStore({}), UserError);
  StoreOptions odd;
  odd.extent_bytes = 1000;
  EXPECT_THROW(ExtentStore({dir.path()}, odd), UserError);
}

TEST(ExtentStore, RefusesAPathInUseByAnotherStore) {
  TempDir dir("bcd-io");
  ExtentStore first({dir.path()});
  try {
    ExtentStore second({dir.path()});
    FAIL() << "two live stores over one path";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("extents.0.data") + " is in use"), std::string::npos) << e.what();
  }
}

TEST(ExtentStore, RefusesADamagedTable) {
  TempDir dir("bcd-io");
  {
    ExtentStore store({dir.path()});
    AlignedBuffer buf(4096);
    store.write(store.create("x", 4096), buf.data());
  }
  std::string table = test::read_text(dir.file("extents.meta"));
  const size_t at = table.find("\"x\"");
  ASSERT_NE(at, std::string::npos);
  table[at + 1] = 'y';  // renames the object without updating the table's checksum
  test::write_text(dir.file("extents.meta"), table);
  StoreOptions opts;
  opts.open_existing = true;
  try {
    ExtentStore store({dir.path()}, opts);
    FAIL() << "a damaged table was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("extents.meta")), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
  }
}

// ---- iobench ----

TEST(IoBench, MeasuresBothDirectionsAndCleansUp) {
  TempDir dir("bcd-io");
  for (EngineKind kind : {EngineKind::kAuto, EngineKind::kThreads}) {
    for (IoOp mode : {IoOp::kWrite, IoOp::kRead}) {
      IoBenchOptions o;
      o.path = dir.path();
      o.size = 8 * kMiB;
      o.block_size = kMiB;
      o.queue_depth = 4;
      o.mode = mode;
      o.engine = kind;
      ::testing::internal::CaptureStdout();
      EXPECT_EQ(run_iobench(o), 0);
      const std::string out = ::testing::internal::GetCapturedStdout();
      const size_t last = out.rfind('{');
      ASSERT_NE(last, std::string::npos) << out;
      const std::string json = out.substr(last);
      EXPECT_EQ(json.back(), '\n');
      EXPECT_EQ(out.find('\n', last), out.size() - 1) << "the JSON object is the last line: " << out;
      EXPECT_NE(json.find(fmt::format("\"mode\":\"{}\"", to_string(mode))), std::string::npos) << json;
      EXPECT_NE(json.find("\"bytes\":8388608"), std::string::npos) << json;
      EXPECT_NE(json.find("\"gb_s\":"), std::string::npos) << json;
      EXPECT_NE(json.find("\"seconds\":"), std::string::npos) << json;
      const char* engine = kind == EngineKind::kThreads || !uring_available() ? "threads" : "uring";
      EXPECT_NE(json.find(fmt::format("\"engine\":\"{}\"", engine)), std::string::npos) << json;
      EXPECT_FALSE(std::filesystem::exists(dir.file("bcd-iobench.dat"))) << "iobench left its file behind";
    }
  }
  IoBenchOptions o;
  o.path = dir.path();
  o.size = 4 * kMiB;
  o.mode = IoOp::kRead;
  o.direct = false;
  const IoBenchResult r = measure_io(o);
  EXPECT_FALSE(r.direct);
  EXPECT_EQ(r.bytes, 4 * kMiB);
  EXPECT_GT(r.gb_s, 0);
}

TEST(IoBench, BadOptionsAreUserErrors) {
  IoBenchOptions o;
  o.path = "/nonexistent-bcd-dir";
  try {
    measure_io(o);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-bcd-dir"), std::string::npos) << e.what();
  }
  TempDir dir("bcd-io");
  o.path = dir.path();
  o.block_size = 1000;
  EXPECT_THROW(measure_io(o), UserError);
  o.block_size = kMiB;
  o.size = 4096;
  EXPECT_THROW(measure_io(o), UserError);
}

}  // namespace
}  // namespace bcd
