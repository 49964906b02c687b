// src/io engines: checked against plain pread/pwrite over every engine x queue depth x extent size x
// buffered/direct combination, requeueing, the io_uring fallback, fault injection, byte sizes.
#include "io_test_helpers.h"

namespace bcd {
namespace {

using namespace io_test;

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

TEST(Bytes, ParsesCounts) {
  EXPECT_EQ(parse_count("0"), 0);
  EXPECT_EQ(parse_count("29500"), 29500);
  EXPECT_EQ(parse_count("9223372036854775807"), INT64_MAX);
  for (const char* junk : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "9223372036854775808", "99999999999999999999"})
    EXPECT_FALSE(parse_count(junk).has_value()) << junk;
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

}  // namespace
}  // namespace bcd
