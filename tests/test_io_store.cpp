// src/io extent store (striping, checksums, injected faults, bad paths, full drives) and iobench.
#include "io_test_helpers.h"

namespace bcd {
namespace {

using namespace io_test;

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
// The text form of a fault plan (BCD_NVME_FAULTS), and its errors naming the bad item.
TEST(FaultPlanText, ParsesEveryKindAndRefusesNonsense) {
  const auto f = parse_faults("read:3:bitflip:77,write:5:enospc,,read:1:eio,write:2:short", "ENV");
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].op, IoOp::kRead);
  EXPECT_EQ(f[0].nth, 3u);
  EXPECT_EQ(f[0].kind, FaultKind::kBitFlip);
  EXPECT_EQ(f[0].bit, 77u);
  EXPECT_EQ(f[1].op, IoOp::kWrite);
  EXPECT_EQ(f[1].kind, FaultKind::kEnospc);
  EXPECT_EQ(f[2].kind, FaultKind::kEio);
  EXPECT_EQ(f[3].kind, FaultKind::kShort);
  for (const char* bad : {"read:0:eio", "read:x:eio", "seek:1:eio", "read:1:melt", "read:1:eio:3", "read:1", ""}) {
    std::string e;
    try {
      parse_faults(bad, "ENV");
    } catch (const UserError& err) {
      e = err.what();
    }
    EXPECT_NE(e.find("ENV: "), std::string::npos) << "'" << bad << "': " << e;
  }
}

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
