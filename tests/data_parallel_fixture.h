// The multi-rank training tests' fixture (test_dist.cpp, test_dist_torchrun.cpp): a corpus and
// instruction data prepared once per executable, the tiny run both train, and the comparisons of
// a run with an uninterrupted one.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/config.h"
#include "model/llama.h"
#include "model/weights.h"
#include "test_util.h"

namespace bcd::disttest {

using test::read_metrics;
namespace fs = std::filesystem;

// ---- Training on two ranks ----

class DataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("bcd-dist");
    auto r = test::prepare_fortunes(dir_->file("data"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // Instruction data (a loss mask over the answers) with the same tokenizer.
    std::string jsonl;
    for (int i = 0; i < 300; ++i)
      jsonl += "{\"prompt\": \"What is " + std::to_string(i) + " plus " + std::to_string(i % 7) + "?\", \"response\": \"It is " +
               std::to_string(i + i % 7) + ".\"}\n";
    test::write_text(dir_->file("inst.jsonl"), jsonl);
    r = test::run_bcdtrain("prepare --input " + dir_->file("inst.jsonl") + " --out " + dir_->file("inst") +
                           " --tokenizer " + dir_->file("data") + "/tokenizer.model --val-fraction 0.3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
#ifndef BCD_HAVE_GLOO
    GTEST_SKIP() << "built without Gloo's headers (libgloo-dev): no multi-rank training";
#endif
  }
 public:
  // `train` of a small model; `batch` sequences per rank.
  static std::string train(const std::string& run, int batch, const std::string& extra) {
    return "train --quiet --config " + test::source_path("configs/tiny.toml") + " --data.path=" + dir_->file("data") +
           " --train.run_dir=" + dir_->file(run) + " --train.batch_size=" + std::to_string(batch) +
           " --model.d_model=128 --model.d_ff=384 --model.n_kv_heads=2 --train.seq_len=64 --train.log_every=1"
           " --train.val_every=5 --train.val_batches=4 --bcd.switch_every=3 --sample.prompts='[]'"
           " --dist.timeout_s=60 --dist.bucket_bytes=64KiB " + extra;
  }
  static std::string path(const std::string& name) { return dir_->file(name); }

 protected:
  inline static test::TempDir* dir_ = nullptr;
};

// Until the run directory's metrics.jsonl holds `n` records (at most a minute).
inline void wait_for_records(const std::string& run, size_t n) {
  for (int i = 0; i < 3000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(run + "/metrics.jsonl") && read_metrics(run + "/metrics.jsonl").size() >= n) return;
  }
}

// Every block's weights of two runs: ||a - b|| / ||b|| within `tol`. (Elementwise bounds do not
// fit: Adam divides by sqrt(v), so an element whose gradient is near zero moves by up to lr per
// step on a rounding difference; the norm of the difference stays as small as the rounding.)
inline void expect_weights_close(const std::string& a, const std::string& b, double tol) {
  Config cfg;
  apply_config_text(cfg, read_weights_config(a), a);
  LlamaModel wa(cfg.model), wb(cfg.model);
  load_weights(wa, a);
  load_weights(wb, b);
  for (int i = 0; i < wa.n_blocks(); ++i) {
    const torch::Tensor x = wa.block(i).data(), y = wb.block(i).data();
    const double err = (x - y).norm().item<double>() / y.norm().item<double>();
    EXPECT_LE(err, tol) << wa.block(i).name() << ": max |a - b| = " << (x - y).abs().max().item<double>();
  }
}

inline void expect_ended_like(const std::string& run, const std::string& full, size_t steps);

// `run` resumed on 2 ranks from its newest checkpoint to its end: its `steps` losses and final
// weights bitwise those of the uninterrupted run `full`.
inline void expect_resumed_like(const std::string& run, const std::string& full, size_t steps) {
  auto r = test::run_bcdtrain("launch --nproc 2 train --quiet --resume " + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_ended_like(run, full, steps);
}

// `run`, ended, against the uninterrupted run `full`: the same `steps` losses and final weights.
inline void expect_ended_like(const std::string& run, const std::string& full, size_t steps) {
  const auto mf = read_metrics(full + "/metrics.jsonl"), mr = read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(mr.size(), steps);
  ASSERT_EQ(mf.size(), steps);
  for (size_t i = 0; i < steps; ++i) EXPECT_EQ(mr[i]["loss"].get<double>(), mf[i]["loss"].get<double>()) << i + 1;
  expect_weights_close(full + "/model.h5", run + "/model.h5", 0.0);
}

}  // namespace bcd::disttest
