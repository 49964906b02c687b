// Trainer tests: overfitting a fixed sequence, the tiny demo config learning, determinism, outputs.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <regex>
#include <filesystem>
#include <sstream>
#include <thread>

#include "model/llama.h"
#include "optim/optimizer.h"
#include "report/plots.h"
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
  // `bcdtrain train` on the demo config and the suite's corpus; a test adds its flags.
  static std::string train_tiny() {
    return "train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + data();
  }
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

TEST(Trainer, VisitWarmupRampsTheFirstStepsOfEachVisit) {
  BcdConfig b;
  b.enabled = true;
  b.switch_every = 5;
  b.visit_warmup = 3;
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 0), 0.25);
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 1), 0.5);
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 2), 0.75);
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 3), 1.0);
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 4), 1.0);
  b.visit_warmup = 0;
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 0), 1.0);
  b.visit_warmup = 3;
  b.enabled = false;  // full-parameter training has no visits
  EXPECT_DOUBLE_EQ(visit_lr_factor(b, 0), 1.0);
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
  auto r = test::run_bcdtrain(train_tiny() +
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
  // summary.json: how it ended and the figures a batch of runs is compared on
  const auto sj = nlohmann::json::parse(test::read_text(run + "/summary.json"));
  EXPECT_EQ(sj["status"], "finished");
  EXPECT_EQ(sj["steps"], 30);
  EXPECT_EQ(sj["total_steps"], 30);
  EXPECT_EQ(sj["final_loss"].get<double>(), m.back()["loss"].get<double>());
  EXPECT_EQ(sj["final_val_loss"].get<double>(), m.back()["val_loss"].get<double>());
  EXPECT_GT(sj["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(sj["peak_bytes"]["compute"].get<double>(), 0);
  EXPECT_GT(sj["peak_bytes"]["host"].get<double>(), 0) << "keep: the inactive blocks' moments live on the host";
  for (const char* k : {"rss_peak_bytes", "stall_ms_total", "wall_s"}) EXPECT_TRUE(sj.contains(k)) << k;

  // The saved run is usable by generate and eval.
  auto g = test::run_bcdtrain("generate --run " + run + " --prompt 'The cat' --max-new-tokens 5 --seed 3");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("The cat"), std::string::npos) << g.output;
  // More new tokens than the model's context is refused at once, naming both.
  auto huge = test::run_bcdtrain("generate --run " + run + " --prompt 'The cat' --max-new-tokens 1000000000000");
  EXPECT_EQ(huge.exit_code, 2) << huge.output;
  EXPECT_NE(huge.output.find("--max-new-tokens 1000000000000 exceeds the model's max_seq_len"), std::string::npos)
      << huge.output;
  auto e = test::run_bcdtrain("eval --run " + run + " --batches 4");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto ej = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_NEAR(ej["val_loss"].get<double>(), m[29]["val_loss"].get<double>(), 1e-4);
}

// Instruction data end to end through the binary: prepare a .jsonl with the corpus's tokenizer
// and a template, train, and sample: the prompts are laid out as user turns (the dataset's
// template, "auto"), the validation loss is over responses only, and eval agrees with it.
TEST_F(TrainerRun, InstructionDataTrainsAndSamplesInItsTemplate) {
  std::string jsonl;
  for (int i = 0; i < 80; ++i) {
    nlohmann::json rec = {{"messages",
                           {{{"role", "user"}, {"content", fmt::format("What is {} plus {}?", i, i + 1)}},
                            {{"role", "assistant"}, {"content", fmt::format("{} plus {} is {}.", i, i + 1, 2 * i + 1)}}}}};
    jsonl += rec.dump() + "\n";
  }
  const std::string file = dir_->file("sums.jsonl"), ds = dir_->file("sums");
  test::write_text(file, jsonl);
  auto p = test::run_bcdtrain("prepare --input " + file + " --out " + ds + " --tokenizer " + data() +
                              "/tokenizer.model --chat-template chatml --val-fraction 0.2");
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("instruction data (chatml template; messages records)"), std::string::npos) << p.output;
  const std::string run = run_dir("sums_run");
  auto r = test::run_bcdtrain("train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + ds +
                              " --model.d_model=64 --model.d_ff=128 --train.seq_len=32 --train.batch_size=4"
                              " --train.steps=6 --train.val_every=3 --train.val_batches=1000 --bcd.switch_every=2"
                              " --sample.prompts=\"['What is 2 plus 3?']\" --sample.max_new_tokens=6 --train.run_dir=" + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(run + "/samples.txt").rfind("--- sample 1 ---\n<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n"
                                                       "<|im_start|>assistant\n", 0), 0u)
      << test::read_text(run + "/samples.txt");
  const auto m = read_metrics(run + "/metrics.jsonl");
  ASSERT_TRUE(m.back().contains("val_loss"));
  auto e = test::run_bcdtrain("eval --run " + run + " --batch-size 4");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto ej = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_NEAR(ej["val_loss"].get<double>(), m.back()["val_loss"].get<double>(), 1e-4);
  // "none" continues the prompt as text; a template name that does not exist stops the run first.
  auto g = test::run_bcdtrain("generate --run " + run + " --chat-template none --prompt 'What is' --max-new-tokens 3");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.find("<|im_start|>"), std::string::npos) << g.output;
  auto bad = test::run_bcdtrain("train --config " + test::source_path("configs/tiny.toml") + " --data.path=" + ds +
                                " --sample.chat_template=vicuna --train.run_dir=" + run_dir("sums_bad"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("chat_template"), std::string::npos) << bad.output;
}

// The trainer applies the per-visit ramp on top of the schedule: metrics.jsonl's lr is the
// schedule's times (i+1)/(W+1) on step i < W of each visit.
TEST_F(TrainerRun, VisitWarmupScalesTheLoggedLr) {
  const std::string run = run_dir("visit-warmup");
  auto r = test::run_bcdtrain(train_tiny() +
                              " --train.steps=9 --train.warmup_steps=2 --train.batch_size=2 --train.seq_len=32"
                              " --bcd.switch_every=3 --bcd.visit_warmup=2 --train.log_every=1 --train.save_model=false"
                              " --train.val_batches=1 --train.run_dir=" + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 9u);
  TrainConfig t;
  t.steps = 9, t.warmup_steps = 2, t.lr = 2e-3, t.min_lr_ratio = 0.1;  // configs/tiny.toml's
  const double ramp[] = {1.0 / 3, 2.0 / 3, 1.0};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(m[i]["lr"].get<double>(), lr_at(t, i) * ramp[i % 3], 1e-12) << "step " << i + 1;
  // and it must fit in a visit
  auto bad = test::run_bcdtrain(train_tiny() +
                                " --bcd.switch_every=3 --bcd.visit_warmup=3 --train.run_dir=" + run_dir("visit-warmup-bad"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("visit_warmup"), std::string::npos) << bad.output;
}

TEST_F(TrainerRun, SameSeedSameLosses) {
  std::vector<std::vector<nlohmann::json>> runs;
  for (const char* name : {"det_a", "det_b"}) {
    const std::string run = run_dir(name);
    auto r = test::run_bcdtrain(train_tiny() +
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
  auto r = test::run_bcdtrain(train_tiny() +
                              " --model.n_layers=2 --train.steps=12 --train.log_every=4 --train.warmup_steps=0"
                              " --train.lr=1e30 --train.grad_clip=0 --train.val_every=0 --sample.prompts='[]' --quiet"
                              " --train.run_dir=" + run);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("training diverged at step 4: loss is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("read every 4 steps"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/model.h5"));
  const auto sj = nlohmann::json::parse(test::read_text(run + "/summary.json"));
  EXPECT_EQ(sj["status"], "failed");
  EXPECT_EQ(sj["steps"], 3) << "steps 1-3 finished; step 4 found the divergence";
  EXPECT_EQ(sj["total_steps"], 12);
  EXPECT_NE(sj["error"].get<std::string>().find("training diverged at step 4"), std::string::npos) << sj.dump();
}

// A step reads no device value on the host (on a GPU each read drains the device's queue)
// except on logged steps: the loss (with the first step's, kept on the device until then) and
// the gradient norm, one read each; the last step's validation loss is one more. Counted through
// the one function every such read goes through (dist/host_read.h).
TEST_F(TrainerRun, OnlyLoggedStepsReadDeviceValues) {
  const std::string run = run_dir("host_reads");
  auto r = test::run_bcdtrain(train_tiny() +
                              " --model.n_layers=2 --train.steps=12 --train.log_every=4 --train.val_every=0"
                              " --train.val_batches=1 --sample.prompts='[]' --train.save_model=false"
                              " --train.run_dir=" + run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["host_reads_total"], 1) << "steps 1-4: step 4's loss and gradient norm, in one read";
  EXPECT_EQ(m[1]["host_reads_total"], 2);
  EXPECT_EQ(m[2]["host_reads_total"], 4) << "step 12 validates too";
  // The first step's loss still reaches the closing line, read with step 4's: about ln(2048).
  std::smatch first;
  ASSERT_TRUE(std::regex_search(r.output, first, std::regex(R"(done: 12 steps in .*, loss ([0-9.]+) -> )"))) << r.output;
  EXPECT_NEAR(std::stod(first[1].str()), std::log(2048.0), 0.5) << r.output;
}

// Scripts repeat one command line: `--resume auto` starts the run in an empty run directory,
// continues a stopped one from its newest checkpoint, leaves a finished one alone, and refuses a
// directory holding a run of another config (naming the key) without touching it. The
// checkpoints it leaves serve eval and generate (--checkpoint).
TEST_F(TrainerRun, ResumeAutoStartsContinuesAndLeavesAFinishedRunAlone) {
  namespace fs = std::filesystem;
  const std::string run = run_dir("auto");
  const std::string cmd = train_tiny() +
                          " --model.n_layers=2 --train.steps=30 --train.checkpoint_every=5 --train.log_every=1"
                          " --train.val_every=0 --sample.prompts='[]' --quiet --train.run_dir=" + run + " --resume auto";
  test::Background bg(cmd, run_dir("auto.log"));
  for (int i = 0; i < 3000; ++i) {  // until a few steps are logged (at most a minute)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(run + "/metrics.jsonl") && read_metrics(run + "/metrics.jsonl").size() >= 7) break;
  }
  ASSERT_EQ(kill(bg.pid, SIGTERM), 0);
  ASSERT_EQ(bg.wait(), 128 + SIGTERM) << test::read_text(run_dir("auto.log"));
  auto sj = nlohmann::json::parse(test::read_text(run + "/summary.json"));
  EXPECT_EQ(sj["status"], "stopped");
  const int64_t stopped_at = sj["steps"].get<int64_t>();
  ASSERT_LT(stopped_at, 30) << "the signal came too late to test anything";

  auto again = test::run_bcdtrain(cmd);  // the same line: continues
  ASSERT_EQ(again.exit_code, 0) << again.output;
  sj = nlohmann::json::parse(test::read_text(run + "/summary.json"));
  EXPECT_EQ(sj["status"], "finished");
  EXPECT_EQ(sj["steps"], 30);
  const auto m = read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 30u);
  for (size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], static_cast<int>(i) + 1);

  const auto model_time = fs::last_write_time(run + "/model.h5");
  auto done = test::run_bcdtrain(cmd.substr(0, cmd.find(" --quiet")) + cmd.substr(cmd.find(" --quiet") + 8));
  EXPECT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("finished already (30 steps); nothing to do"), std::string::npos) << done.output;
  EXPECT_EQ(fs::last_write_time(run + "/model.h5"), model_time);

  auto other = test::run_bcdtrain(cmd + " --train.lr=0.5");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("holds a run of another config"), std::string::npos) << other.output;
  EXPECT_NE(other.output.find("train.lr ("), std::string::npos) << other.output;
  EXPECT_EQ(fs::last_write_time(run + "/model.h5"), model_time);
  EXPECT_EQ(read_metrics(run + "/metrics.jsonl").size(), 30u);

  // Data of another tokenizer: its ids mean other pieces. Refused before anything of the run is
  // written: its summary (finished), tokenizer and metrics stay as they were.
  const std::string other_text = run_dir("other.txt"), other_data = run_dir("other-data");
  std::string lines;
  for (int i = 0; i < 400; ++i) lines += "The quick brown fox jumps over the lazy dog, line " + std::to_string(i) + ".\n\n";
  test::write_text(other_text, lines);
  auto prep = test::run_bcdtrain("prepare --input " + other_text + " --out " + other_data + " --tokenizer " +
                                 test::source_path("../shared/data/tokenizers/llama2/tokenizer.json"));
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::string summary_before = test::read_text(run + "/summary.json");
  const std::string tok_before = test::read_text(run + "/tokenizer.model");
  auto mixed = test::run_bcdtrain("train --resume " + run + " --train.steps=40 --data.path=" + other_data);
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("the data was tokenized with " + other_data), std::string::npos) << mixed.output;
  EXPECT_NE(mixed.output.find("was trained with " + run + "/tokenizer.model"), std::string::npos) << mixed.output;
  EXPECT_EQ(test::read_text(run + "/summary.json"), summary_before);
  EXPECT_EQ(test::read_text(run + "/tokenizer.model"), tok_before);
  EXPECT_EQ(read_metrics(run + "/metrics.jsonl").size(), 30u);

  // eval and generate from a checkpoint (with the run's tokenizer)
  const std::string ckpt = run + "/checkpoints/step-00000030.h5";
  auto e = test::run_bcdtrain("eval --checkpoint " + ckpt + " --batches 2");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto ej = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_NEAR(ej["perplexity"].get<double>(), std::exp(ej["val_loss"].get<double>()), 1e-3 * ej["perplexity"].get<double>());
  auto er = test::run_bcdtrain("eval --run " + run + " --batches 2");
  ASSERT_EQ(er.exit_code, 0) << er.output;
  EXPECT_EQ(nlohmann::json::parse(er.output.substr(er.output.find('{')))["val_loss"], ej["val_loss"])
      << "the last checkpoint holds the finished weights";
  auto g = test::run_bcdtrain("generate --checkpoint " + run + "/checkpoints/step-00000025.h5 --prompt 'The cat'"
                              " --max-new-tokens 4");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_NE(g.output.find("The cat"), std::string::npos) << g.output;
  auto both = test::run_bcdtrain("eval --run " + run + " --checkpoint " + ckpt);
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("give --run DIR"), std::string::npos) << both.output;
}

// One rank: a signal during a step's micro-batches stops the run there, dropping the step's
// partial work (a step of many micro-batches held a stop for its whole length): the checkpoint is
// the last finished step's, its loader where that step ended, so the resume runs the dropped step
// again and gives the uninterrupted run's loss, bitwise.
TEST_F(TrainerRun, ASignalDuringAStepDropsItsPartialWorkAndTheResumeIsExact) {
  namespace fs = std::filesystem;
  const std::string common = train_tiny() +
                             " --model.n_layers=2 --train.steps=2 --train.grad_accum=15 --train.checkpoint_every=1"
                             " --train.log_every=1 --train.val_every=0 --sample.prompts='[]' --quiet --train.run_dir=";
  const std::string ref = run_dir("mid-step-ref"), run = run_dir("mid-step");
  auto r = test::run_bcdtrain(common + ref);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::Background bg(common + run, run_dir("mid-step.log"));
  for (int i = 0; i < 3000; ++i) {  // until step 1 is logged (at most a minute)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (fs::exists(run + "/metrics.jsonl") && read_metrics(run + "/metrics.jsonl").size() >= 1) break;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // into step 2's micro-batches
  ASSERT_EQ(kill(bg.pid, SIGTERM), 0);
  const int rc = bg.wait();
  const std::string log = test::read_text(run_dir("mid-step.log"));
  if (read_metrics(run + "/metrics.jsonl").size() == 2) GTEST_SKIP() << "step 2 ended before the signal came: " << log;
  ASSERT_EQ(rc, 128 + SIGTERM) << log;
  EXPECT_NE(log.find("stopped by signal 15 during step 2 (its partial work dropped) after step 1; continue with"),
            std::string::npos) << log;
  EXPECT_EQ(read_metrics(run + "/metrics.jsonl").size(), 1u);
  const auto sj = nlohmann::json::parse(test::read_text(run + "/summary.json"));
  EXPECT_EQ(sj["status"], "stopped");
  EXPECT_EQ(sj["steps"], 1);
  auto again = test::run_bcdtrain("train --quiet --resume " + run);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto a = read_metrics(ref + "/metrics.jsonl"), b = read_metrics(run + "/metrics.jsonl");
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << "step " << i + 1;
}

// A finished run without checkpoints is known by its summary.json alone: when that cannot be read
// (or is gone beside model.h5), `--resume auto` refuses rather than train over the model; eval and
// generate say what a wrong --run or --checkpoint really is.
TEST_F(TrainerRun, ResumeAutoRefusesAFinishedRunItCannotReadAndEvalNamesWhatItWasGiven) {
  namespace fs = std::filesystem;
  const std::string run = run_dir("auto-summary");
  const std::string cmd = train_tiny() +
                          " --model.n_layers=2 --train.steps=2 --train.val_every=0 --sample.prompts='[]' --quiet"
                          " --train.run_dir=" + run + " --resume auto";
  ASSERT_EQ(test::run_bcdtrain(cmd).exit_code, 0);
  ASSERT_FALSE(fs::exists(run + "/checkpoints/step-00000002.h5")) << "the case is a run without checkpoints";
  const auto model_time = fs::last_write_time(run + "/model.h5");
  for (const char* corrupt : {"{\"status\": \"fini", "[1, 2]", "{\"steps\": 2}", ""}) {
    test::write_text(run + "/summary.json", corrupt);
    auto r = test::run_bcdtrain(cmd);
    EXPECT_EQ(r.exit_code, 2) << corrupt << "\n" << r.output;
    EXPECT_NE(r.output.find(run + "/summary.json: not a run summary"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << "says the way out: " << r.output;
  }
  fs::remove(run + "/summary.json");
  auto lost = test::run_bcdtrain(cmd);
  EXPECT_EQ(lost.exit_code, 2) << lost.output;
  EXPECT_NE(lost.output.find("model.h5 without a summary.json"), std::string::npos) << lost.output;
  EXPECT_EQ(fs::last_write_time(run + "/model.h5"), model_time) << "the finished model is left alone";

  const std::pair<std::string, std::string> wrong[] = {
      {"--checkpoint " + run, "--checkpoint " + run + ": a directory; give a weights file"},
      {"--checkpoint " + run + "/nope.h5", "--checkpoint " + run + "/nope.h5: no such file"},
      {"--run " + run + "/model.h5", "--run " + run + "/model.h5: not a directory"},
      {"--run " + run + "/nope", "--run " + run + "/nope: no such directory"},
      {"--run " + data(), "--run " + data() + ": no model.h5 and no checkpoints"}};
  for (const auto& [flags, says] : wrong)
    for (const char* command : {"eval", "generate"}) {
      auto r = test::run_bcdtrain(std::string(command) + " " + flags);
      EXPECT_EQ(r.exit_code, 2) << command << " " << flags << "\n" << r.output;
      EXPECT_NE(r.output.find(says), std::string::npos) << command << " " << flags << "\n" << r.output;
    }
}

// Progress: on a terminal the step line is redrawn in place and a validation step's line and the
// last one stay; in a pipe (or file) every step is a plain line. Both carry the stall and what
// each memory tier holds.
TEST_F(TrainerRun, OnATerminalTheStepLineIsRedrawnInPlace) {
  if (std::system("command -v script > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no `script` (util-linux) to give the run a terminal";
  const std::string args = train_tiny() +
                           " --model.n_layers=2 --train.steps=6 --train.log_every=1 --train.val_every=3"
                           " --sample.prompts='[]' --train.run_dir=";
  auto tty = test::run_shell("script -qec \"" + std::string(BCD_BINARY) + " " + args + run_dir("tty") + "\" /dev/null");
  ASSERT_EQ(tty.exit_code, 0) << tty.output;
  const std::string redraw = "\r\033[K";
  EXPECT_NE(tty.output.find(redraw + "step 1/6 | loss"), std::string::npos) << tty.output;
  EXPECT_NE(tty.output.find(redraw + "step 2/6"), std::string::npos) << "each step redraws the line";
  for (const char* kept : {"step 3/6", "step 6/6"}) {  // validation steps (and the last) stay
    const size_t at = tty.output.find(kept);
    ASSERT_NE(at, std::string::npos) << tty.output;
    const size_t end = tty.output.find_first_of("\r\n", at);
    ASSERT_NE(end, std::string::npos);
    EXPECT_NE(tty.output.substr(at, end - at).find("| val "), std::string::npos) << kept;
    EXPECT_EQ(tty.output.substr(end, 2), "\r\n") << kept << " ends its line (the terminal turns \\n into \\r\\n)";
  }
  auto pipe = test::run_bcdtrain(args + run_dir("pipe"));
  ASSERT_EQ(pipe.exit_code, 0) << pipe.output;
  EXPECT_EQ(pipe.output.find("\033[K"), std::string::npos) << "no terminal codes in a pipe";
  for (int step = 1; step <= 6; ++step) {
    const size_t at = pipe.output.find("step " + std::to_string(step) + "/6 |");
    ASSERT_NE(at, std::string::npos) << step << "\n" << pipe.output;
    const std::string line = pipe.output.substr(at, pipe.output.find('\n', at) - at);
    EXPECT_NE(line.find(" | stall "), std::string::npos) << line;
    EXPECT_NE(line.find(" | compute "), std::string::npos) << line;
  }
}

// train.plot: a run draws its own plots into <run_dir>/plots when it ends, and says where.
// train.plot, with a run directory named like an attack on the plotting (a newline then
// gnuplot's `!` shell escape, `;`, backticks, $(), a double quote): the name is data, never
// gnuplot program text, so nothing runs and the plots are drawn.
TEST_F(TrainerRun, PlotTrueDrawsThePngsWhenTheRunEnds) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no gnuplot to draw with (scripts/setup.sh installs gnuplot-nox)";
  const std::string base = run_dir("plot");
  std::filesystem::create_directories(base);
  const std::string run = base + "/run\n!touch pwned1; `touch pwned2` $(touch pwned3) \"x";
  auto r = test::run_shell("cd '" + base + "' && " + BCD_BINARY + " " + train_tiny() +
                           " --model.n_layers=2 --train.steps=4 --train.val_every=2 --sample.prompts='[]'"
                           " --train.plot=true '--train.run_dir=" + run + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"loss_vs_step", "loss_vs_time", "tokens_per_s", "memory"}) {
    const std::string png = run + "/plots/" + f + ".png";
    ASSERT_TRUE(std::filesystem::exists(png)) << png << "\n" << r.output;
    EXPECT_EQ(test::read_text(png).substr(0, 8), "\x89PNG\r\n\x1a\n") << png;
    EXPECT_GT(std::filesystem::file_size(png), 1024u) << png;
  }
  for (const char* p : {"pwned1", "pwned2", "pwned3"})
    EXPECT_FALSE(std::filesystem::exists(base + "/" + p)) << p << ": the run directory's name ran as a command";
  EXPECT_NE(r.output.find("plots: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" in " + run + "/plots (loss_vs_step.png"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
}

// Without gnuplot (a PATH that holds none) the plots are a warning: the run itself went well.
TEST_F(TrainerRun, PlotWithoutGnuplotIsAWarning) {
  const std::string run = run_dir("plot-missing");
  auto r = test::run_shell("env PATH=/nonexistent " + std::string(BCD_BINARY) + " " + train_tiny() +
                           " --model.n_layers=2 --train.steps=2 --sample.prompts='[]' --train.plot=true --quiet"
                           " --train.run_dir=" + run);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bcdtrain: warning: train.plot: gnuplot not found (scripts/setup.sh installs it: package "
                          "gnuplot-nox); the run is unaffected; draw them later with bcdtrain plot " + run + "\n"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(run + "/plots"));
  EXPECT_EQ(nlohmann::json::parse(test::read_text(run + "/summary.json"))["status"], "finished");
}

// Legend names: the last path component, more of them where those clash, long ones elided in the
// middle while they stay unique.
TEST(Plots, RunNamesAreShortAndUnique) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(plot_run_names({"/r/a", "/r/b"}), (Names{"a", "b"}));
  EXPECT_EQ(plot_run_names({"/r/x/run", "/r/y/run/"}), (Names{"x/run", "y/run"}));
  EXPECT_EQ(plot_run_names({"/r/a", "/r/./b/../a/"}), (Names{"/r/a (1)", "/r/a (2)"})) << "the same dir twice";
  const std::string x(40, 'x');
  EXPECT_EQ(plot_run_names({"/r/sweep-" + x + "-lr-0.001", "/r/sweep-" + x + "-lr-0.002"}),
            (Names{"sweep-xxxxxxxx..." + x.substr(0, 14) + "-lr-0.001", "sweep-xxxxxxxx..." + x.substr(0, 14) + "-lr-0.002"}));
  const Names middle = {"/r/a-" + x + "-1-" + x, "/r/a-" + x + "-2-" + x};  // elided alike: kept whole
  EXPECT_EQ(plot_run_names(middle), (Names{middle[0].substr(3), middle[1].substr(3)}));
}

// Bad records are named by file:line before anything is drawn or written.
TEST(Plots, ABadRecordIsNamedByFileAndLine) {
  test::TempDir dir("bcd-plots");
  const std::string metrics = dir.file("metrics.jsonl");
  const auto error_for = [&](const std::string& text) {
    test::write_text(metrics, text);
    return test::error_of([&] { draw_plots({dir.path()}, dir.file("plots"), {}, {}); });
  };
  EXPECT_NE(error_for("{\"step\": 1}\n\n{\"step\": 2, \"lo\n{\"step\": 3}\n").find(metrics + ":3: not valid JSON ("),
            std::string::npos);
  EXPECT_NE(error_for("{\"step\": 1}\n{\"step\": 2, \"lo\n").find(metrics + ":2: not valid JSON ("), std::string::npos)
      << "a whole last line (it has its newline) is no cut one";
  EXPECT_NE(error_for("[1]\n").find(metrics + ":1: expected a JSON object, got array"), std::string::npos);
  EXPECT_NE(error_for("{\"step\": 1}\n{\"step\": null}\n").find(metrics + ":2: no numeric \"step\" (got null)"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("plots")));
}

// A run killed while writing a record leaves its last line cut short: the records before it are
// whole, and are plotted; the cut line is named. A run directory whose name starts with "-" is
// given after "--".
TEST(Plots, ACutLastLineIsLeftOutAndADashedRunDirFollowsDashes) {
  if (test::run_shell("command -v gnuplot").exit_code != 0) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh installs it)";
  test::TempDir dir("bcd-plots-cut");
  const std::string run = dir.file("-rdash");
  std::filesystem::create_directories(run);
  test::write_text(run + "/metrics.jsonl", "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"loss\": 2.4}\n{\"step\": 3, \"lo");
  auto r = test::run_shell("cd " + dir.path() + " && " + BCD_BINARY + " plot -- ./-rdash");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl:3: the last line is cut short"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(run + "/plots/loss_vs_step.png")) << r.output;
  auto flag = test::run_shell("cd " + dir.path() + " && " + BCD_BINARY + " plot ./x --bogus");
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_NE(flag.output.find("--bogus: unknown option of `plot`"), std::string::npos) << flag.output;
}

}  // namespace
}  // namespace bcd
