// Writers on a full file system: a small tmpfs mounted for the test (skipped, saying why, where
// this process may not mount one). Every writer ends with one line naming its file and the
// error, exit 2, no temporary left behind and every earlier output intact; never a crash.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "io/checkpoint.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;

class DiskFull : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("bcd-full");
    auto r = test::prepare_fortunes(dir_->file("data"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // a model small enough to train in seconds: ~0.4M parameters, model.h5 ~1.7 MB
    auto t = test::run_bcdtrain(train_args(dir_->file("source"), " --train.steps=2"));
    ASSERT_EQ(t.exit_code, 0) << t.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void TearDown() override {
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
  }
  // A fresh tmpfs of `size` ("1M") at a new directory; skips the test when it cannot be made.
  std::string full_fs(const std::string& name, const std::string& size) {
    const std::string at = dir_->file("fs-" + name);
    fs::create_directories(at);
    if (::mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      skip_ = std::string("cannot mount a small tmpfs here (") + std::strerror(errno) +
              "): the disk-full cases need one (root or CAP_SYS_ADMIN)";
      return "";
    }
    mounted_ = at;
    return at;
  }
  static std::string train_args(const std::string& run, const std::string& extra) {
    return "train --quiet --config " + test::source_path("configs/tiny.toml") + " --data.path=" + dir_->file("data") +
           " --train.run_dir=" + run + " --sample.prompts='[]' --train.val_batches=1 --model.d_model=64" +
           " --model.d_ff=128 --train.batch_size=2 --train.seq_len=32 --train.val_every=0 " + extra;
  }
  static bool has_temporaries(const std::string& dir) {
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) return true;
    return false;
  }
  static test::TempDir* dir_;
  std::string mounted_, skip_;
};
test::TempDir* DiskFull::dir_ = nullptr;

#define FULL_FS(var, name, size)          \
  const std::string var = full_fs(name, size); \
  if (var.empty()) GTEST_SKIP() << skip_

// Checkpoints fill the disk mid-run: the run stops with the file, the error and where to
// continue from; the checkpoints written before load and resume.
TEST_F(DiskFull, ACheckpointThatDoesNotFitStopsTheRunAndKeepsTheEarlierOnes) {
  FULL_FS(at, "ckpt", "6M");
  const std::string run = at + "/run";
  auto r = test::run_bcdtrain(train_args(run, " --train.steps=6 --train.checkpoint_every=1 --train.keep_checkpoints=0"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot write the checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("training stopped after step"), std::string::npos) << r.output;
  EXPECT_FALSE(has_temporaries(run)) << "the failed checkpoint's temporary file is removed";
  const auto kept = list_checkpoints(run + "/checkpoints");
  ASSERT_FALSE(kept.empty()) << "6 MB hold at least the first checkpoint: " << r.output;
  EXPECT_LT(kept.size(), 6u) << "the disk never filled";
  EXPECT_NE(r.output.find("the newest checkpoint is " + kept.back()), std::string::npos) << r.output;
  // the newest one resumes (elsewhere: there is no room here)
  const std::string moved = dir_->file("ckpt-resumed");
  auto c = test::run_bcdtrain("train --quiet --resume " + kept.back() + " --train.run_dir=" + moved +
                              " --train.checkpoint_every=0");
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

// The same on two ranks with sharded state: each rank writes its slice, and when one rank's
// part (a slice, or rank 0's checkpoint file) does not fit, every rank stops with the error,
// the slices of that save are removed, and each checkpoint kept has both of its slices and
// resumes (on one rank, re-sliced).
TEST_F(DiskFull, AShardedCheckpointThatDoesNotFitStopsEveryRankAndLeavesNoSlice) {
#ifndef BCD_HAVE_GLOO
  GTEST_SKIP() << "built without Gloo's headers (libgloo-dev): no multi-rank training";
#endif
  FULL_FS(at, "sharded", "6M");
  const std::string run = at + "/run";
  auto r = test::run_bcdtrain("launch --nproc 2 " +
                              train_args(run, " --train.steps=8 --train.checkpoint_every=1 --train.keep_checkpoints=0"
                                              " --dist.timeout_s=60"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("training stopped after step"), std::string::npos) << r.output;
  EXPECT_FALSE(has_temporaries(run));
  const auto kept = list_checkpoints(run + "/checkpoints");
  ASSERT_FALSE(kept.empty()) << "6 MB hold at least the first checkpoint: " << r.output;
  EXPECT_LT(kept.size(), 8u) << "the disk never filled";
  size_t slices = 0;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    slices += e.path().filename().string().find(".shard-") != std::string::npos;
  EXPECT_EQ(slices, 2 * kept.size()) << "two slices per checkpoint kept, none of the save that failed";
  auto c = test::run_bcdtrain("train --quiet --resume " + kept.back() + " --train.run_dir=" +
                              dir_->file("sharded-resumed") + " --train.checkpoint_every=0 --train.batch_size=4");
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

// model.h5 at the end of a run, and `import --out`: one line, exit 2, nothing left behind.
TEST_F(DiskFull, AWeightsFileThatDoesNotFitIsOneLineAndReplacesNothing) {
  FULL_FS(at, "weights", "1M");
  const std::string run = at + "/run";
  auto r = test::run_bcdtrain(train_args(run, " --train.steps=2"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(run + "/model.h5: cannot write the weights file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_FALSE(has_temporaries(at));
  EXPECT_FALSE(fs::exists(run + "/model.h5"));

  const std::string hf = dir_->file("hf");
  auto e = test::run_bcdtrain("export --checkpoint " + dir_->file("source") + "/model.h5 --hf " + hf);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto i = test::run_bcdtrain("import --hf " + hf + " --out " + at + "/imported.h5");
  EXPECT_EQ(i.exit_code, 2) << i.output;
  EXPECT_NE(i.output.find(at + "/imported.h5: cannot write the weights file"), std::string::npos) << i.output;
  EXPECT_FALSE(fs::exists(at + "/imported.h5"));
  EXPECT_FALSE(has_temporaries(at));
}

// `export --hf` and `prepare` into a full file system: exit 2 naming the file, no crash.
TEST_F(DiskFull, ExportAndPrepareThatDoNotFitAreOneLine) {
  FULL_FS(at, "export", "300K");
  auto e = test::run_bcdtrain("export --checkpoint " + dir_->file("source") + "/model.h5 --hf " + at + "/hf");
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find(at + "/hf/model.safetensors"), std::string::npos) << e.output;
  EXPECT_NE(e.output.find("No space left on device"), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(at + "/hf")) << "the directory the failed export created goes with it";
  auto p = test::run_bcdtrain("prepare --input /usr/share/games/fortunes --out " + at + "/ds --vocab-size 512");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find(at + "/ds"), std::string::npos) << p.output;
  EXPECT_FALSE(fs::exists(at + "/ds")) << "nothing that looks finished";
}

}  // namespace
}  // namespace bcd
