// Suites whose tests train through the bcdtrain binary: the demo corpus in a temporary directory
// per suite, `train` of configs/tiny.toml with overrides into a run directory of that name, and
// bitwise comparisons of weights files.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/config.h"
#include "model/llama.h"
#include "model/weights.h"
#include "test_util.h"

namespace bcd::test {

class TrainRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("bcd-run");
    auto r = prepare_fortunes(dir_->file("data"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // Trains tiny.toml on the corpus into run directory `name`, quietly, logging every step, one
  // validation batch, no samples; then `args` (which win).
  static RunResult train(const std::string& name, const std::string& args) {
    return run_bcdtrain("train --quiet --config " + source_path("configs/tiny.toml") + " --data.path=" +
                        dir_->file("data") + " --train.run_dir=" + dir_->file(name) +
                        " --sample.prompts='[]' --train.val_batches=1 --train.log_every=1 " + args);
  }
  static std::string run(const std::string& name) { return dir_->file(name); }
  // A directory for an NVMe tier (memory.nvme_paths), made.
  static std::string nvme(const std::string& name) {
    std::filesystem::create_directories(dir_->file("nvme-" + name));
    return dir_->file("nvme-" + name);
  }
  // What a run left in the NVMe directory `name` (file and directory names, depth first): a run
  // that keeps no NVMe state leaves nothing there, however it ends.
  static std::vector<std::string> nvme_leftovers(const std::string& name) {
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_->file("nvme-" + name)))
      left.push_back(std::filesystem::relative(e.path(), dir_->file("nvme-" + name)).string());
    return left;
  }
  // Two weights files (or checkpoints) hold the same model, bit for bit.
  static void expect_same_weights(const std::string& a, const std::string& b) {
    Config cfg;
    apply_config_text(cfg, read_weights_config(a), a);
    LlamaModel wa(cfg.model), wb(cfg.model);
    load_weights(wa, a);
    load_weights(wb, b);
    for (int i = 0; i < wa.n_blocks(); ++i)
      EXPECT_TRUE(torch::equal(wa.block(i).data(), wb.block(i).data())) << a << " vs " << b << ": " << wa.block(i).name();
  }
  inline static TempDir* dir_ = nullptr;
};

}  // namespace bcd::test
