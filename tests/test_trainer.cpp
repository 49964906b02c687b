// Trainer tests: overfitting a fixed sequence, the tiny demo config learning, determinism, outputs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <sstream>

#include "model/llama.h"
#include "runtime/optimizer.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::read_metrics;

// One dataset of the demo corpus for the whole suite (prepare takes a few seconds).
class TrainerRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("bcd-trainer");
    auto r = test::prepare_fortunes(dir_->file("data"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string data() { return dir_->file("data"); }
  static std::string run_dir(const std::string& name) { return dir_->file(name); }
  static test::TempDir* dir_;
};
test::TempDir* TrainerRun::dir_ = nullptr;

TEST(Trainer, OverfitsAShortFixedSequence) {
  ModelConfig cfg;
  cfg.vocab_size = 64;
  cfg.d_model = 64;
  cfg.n_layers = 2;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.max_seq_len = 64;
  LlamaModel model(cfg);
  model.init_weights(1);
  model.set_trainable(true);
  OptimConfig oc;
  oc.weight_decay = 0.0;
  FullAdamW opt(model, oc);
  torch::manual_seed(2);
  torch::Tensor batch = torch::randint(cfg.vocab_size, {2, 33}, torch::kInt64);
  double loss = 0, first = 0;
  for (int step = 0; step < 150; ++step) {
    model.zero_grad();
    torch::Tensor l = model.loss(batch);
    l.backward();
    clip_grad_norm(model, 1.0);
    opt.step(3e-3);
    loss = l.item<double>();
    if (step == 0) first = loss;
    if (loss < 0.05) break;
  }
  EXPECT_GT(first, 3.5);  // about ln(64) at init
  EXPECT_LT(loss, 0.1);
}

TEST(Trainer, LearningRateWarmupThenCosine) {
  TrainConfig t;
  t.steps = 110;
  t.warmup_steps = 10;
  t.lr = 1.0;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(lr_at(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(t, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(t, 10), 1.0);
  EXPECT_NEAR(lr_at(t, 60), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(t, 110), 0.1, 1e-12);
  for (int64_t s = 11; s < 110; ++s) EXPECT_LE(lr_at(t, s), lr_at(t, s - 1));
}

TEST(Trainer, ClipScalesTheGlobalNorm) {
  ModelConfig cfg;
  cfg.vocab_size = 16;
  cfg.d_model = 16;
  cfg.n_layers = 1;
  cfg.n_heads = 2;
  LlamaModel model(cfg);
  model.set_trainable(true);
  torch::manual_seed(3);
  model.loss(torch::randint(16, {2, 9}, torch::kInt64)).backward();
  const double norm = clip_grad_norm(model, 0.0).item<double>();  // measure only
  ASSERT_GT(norm, 0.0);
  // Under the limit the gradients stay bitwise as they are.
  std::vector<torch::Tensor> before;
  for (Block& b : model.blocks()) before.push_back(b.grad().clone());
  EXPECT_EQ(clip_grad_norm(model, 2 * norm).item<double>(), norm);
  for (int b = 0; b < model.n_blocks(); ++b) EXPECT_TRUE(torch::equal(model.block(b).grad(), before[b]));
  EXPECT_NEAR(clip_grad_norm(model, norm / 4).item<double>(), norm, 1e-9 * norm);
  EXPECT_NEAR(clip_grad_norm(model, 0.0).item<double>(), norm / 4, 1e-4 * norm);
}

TEST_F(TrainerRun, TinyConfigLearnsIn30Steps) {
  const std::string run = run_dir("tiny30");
  auto r = test::run_bcdtrain("train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + data() +
                              " --train.steps=30 --train.warmup_steps=5 --train.val_every=15 --train.val_batches=4 --bcd.switch_every=10"
                              " --train.log_every=1 --sample.max_new_tokens=8 --train.run_dir=" + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto m = read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 30u);
  for (const auto& rec : m)
    for (const char* k : {"step", "loss", "lr", "tokens_per_s", "elapsed_s", "block", "block_id", "block_epoch",
                          "optim_state_bytes", "block_state_bytes"})
      ASSERT_TRUE(rec.contains(k)) << k;
  // the demo trains with BCD: K = 10 steps per visit, so blocks change every 10 steps
  EXPECT_EQ(m[0]["block"], m[9]["block"]);
  EXPECT_TRUE(m[0].contains("state_bytes_by_block"));
  EXPECT_TRUE(m[10].contains("state_bytes_by_block"));
  EXPECT_FALSE(m[11].contains("state_bytes_by_block"));
  EXPECT_EQ(m.front()["step"], 1);
  EXPECT_EQ(m.back()["step"], 30);
  const double first = m.front()["loss"], last = m.back()["loss"];
  EXPECT_GT(first, 7.0);            // ~ln(2048) at init
  EXPECT_LT(last, first - 1.0) << "loss " << first << " -> " << last;
  ASSERT_TRUE(m[14].contains("val_loss"));
  ASSERT_TRUE(m[29].contains("val_loss"));
  EXPECT_LT(m[29]["val_loss"].get<double>(), m[14]["val_loss"].get<double>());
  for (const char* f : {"config.toml", "model.h5", "tokenizer.model", "samples.txt"})
    EXPECT_TRUE(std::filesystem::exists(run + "/" + f)) << f;
  EXPECT_NE(r.output.find("samples:"), std::string::npos);

  // The saved run is usable by generate and eval.
  auto g = test::run_bcdtrain("generate --run " + run + " --prompt 'The cat' --max-new-tokens 5 --seed 3");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("The cat"), std::string::npos) << g.output;
  auto e = test::run_bcdtrain("eval --run " + run + " --batches 4");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto ej = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_NEAR(ej["val_loss"].get<double>(), m[29]["val_loss"].get<double>(), 1e-4);
}

TEST_F(TrainerRun, SameSeedSameLosses) {
  std::vector<std::vector<nlohmann::json>> runs;
  for (const char* name : {"det_a", "det_b"}) {
    const std::string run = run_dir(name);
    auto r = test::run_bcdtrain("train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + data() +
                                " --model.n_layers=2 --train.steps=4 --train.batch_size=4 --train.grad_accum=2"
                                " --train.val_batches=1 --sample.prompts='[]' --quiet --train.run_dir=" + run);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    runs.push_back(read_metrics(run + "/metrics.jsonl"));
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_EQ(runs[0][i]["loss"].get<double>(), runs[1][i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(runs[0][i]["grad_norm"].get<double>(), runs[1][i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
}

// The loss is read on logged steps only (a GPU step is not drained for it), so a run that blows
// up stops at the next logged step, saying where it was first seen, with exit 2 and no model.h5.
TEST_F(TrainerRun, DivergenceStopsAtTheNextLoggedStep) {
  const std::string run = run_dir("diverge");
  auto r = test::run_bcdtrain("train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + data() +
                              " --model.n_layers=2 --train.steps=12 --train.log_every=4 --train.warmup_steps=0"
                              " --train.lr=1e30 --train.grad_clip=0 --train.val_every=0 --sample.prompts='[]' --quiet"
                              " --train.run_dir=" + run);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training diverged at step 4: loss is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("read every 4 steps"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/model.h5"));
}

}  // namespace
}  // namespace bcd
