// Files with one rule each (base/files.h): atomic, durable small-file writes and owned
// descriptors; and the NVMe tier's directories, named in one place (memory/nvme_dirs.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "base/files.h"
#include "memory/nvme_dirs.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;

TEST(Files, AnAtomicWriteReplacesTheWholeFileAndLeavesNoTemporary) {
  test::TempDir dir("bcd-files");
  const std::string path = dir.file("summary.json");
  write_file_atomic(path, "first\n", "summary");
  EXPECT_EQ(test::read_text(path), "first\n");
  write_file_atomic(path, std::string(100000, 'x'), "summary");
  EXPECT_EQ(test::read_text(path), std::string(100000, 'x'));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "summary.json");
  }
  EXPECT_EQ(files, 1);
  // A directory that is not there: refused naming what and where; nothing left behind.
  const std::string e = test::error_of([&] { write_file_atomic(dir.file("no/such/file"), "x", "summary"); });
  EXPECT_NE(e.find("summary " + dir.file("no/such/file")), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir.file("no")));
}

TEST(Files, AUniqueFdClosesItsDescriptorOnce) {
  test::TempDir dir("bcd-files");
  int raw = -1;
  {
    UniqueFd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    raw = fd.get();
    UniqueFd moved(std::move(fd));
    EXPECT_FALSE(fd);
    EXPECT_EQ(moved.get(), raw);
    EXPECT_NE(::fcntl(raw, F_GETFD), -1);
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1) << "closed when its owner went";
  UniqueFd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(fd.close(), 0);
  EXPECT_FALSE(fd);
  EXPECT_EQ(fd.close(), 0);  // nothing open: nothing to close
}

TEST(NvmeDirs, OneFunctionNamesEveryStoresDirectory) {
  const std::vector<std::string> paths = {"/nvme0/b", "/nvme1/b"};
  EXPECT_EQ(nvme_dirs(paths, 0, 1, NvmeStore::kState), paths);
  EXPECT_EQ(nvme_dirs(paths, 0, 1, NvmeStore::kWeights), (std::vector<std::string>{"/nvme0/b/weights", "/nvme1/b/weights"}));
  EXPECT_EQ(nvme_dirs(paths, 3, 4, NvmeStore::kState), (std::vector<std::string>{"/nvme0/b/rank3", "/nvme1/b/rank3"}));
  EXPECT_EQ(nvme_dirs(paths, 3, 4, NvmeStore::kWeights),
            (std::vector<std::string>{"/nvme0/b/rank3/weights", "/nvme1/b/rank3/weights"}));
  // What a run removes when it ends: deepest first, never the paths themselves.
  EXPECT_EQ(nvme_run_dirs(paths, 0, 1), (std::vector<std::string>{"/nvme0/b/weights", "/nvme1/b/weights"}));
  EXPECT_EQ(nvme_run_dirs({"/n"}, 1, 2), (std::vector<std::string>{"/n/rank1/weights", "/n/rank1"}));
  test::TempDir dir("bcd-nvme");
  const auto made = nvme_dirs({dir.path()}, 1, 2, NvmeStore::kWeights);
  create_nvme_dirs(made);
  EXPECT_TRUE(fs::is_directory(dir.file("rank1/weights")));
  test::write_text(dir.file("file"), "x");
  const std::string e = test::error_of([&] { create_nvme_dirs({dir.file("file/sub")}); });
  EXPECT_NE(e.find("[memory] nvme_paths"), std::string::npos) << e;
}

}  // namespace
}  // namespace bcd
