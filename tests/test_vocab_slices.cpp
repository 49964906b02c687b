// Vocabulary slices ([bcd] vocab_slices): the embedding and the LM head trained as row ranges of
// the vocabulary. A slice's gradient is its rows of the whole block's gradient, for tied and untied
// embeddings; an update touches its rows only; and a tiny model with the Llama 3 vocabulary trains
// every slice by BCD and resumes exactly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/llama.h"
#include "optim/bcd_scheduler.h"
#include "optim/block_optimizer.h"
#include "checkpoint_test_helpers.h"
#include "planner_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;

struct SliceCase {
  const char* name;
  bool tied;
  torch::ScalarType dtype;
};

class SliceGrad : public ::testing::TestWithParam<SliceCase> {};

// A small Llama shape (vocabulary 97, prime: slices of unequal rows), checkpointed as the big
// configs are.
ModelConfig slice_model(bool tied) {
  ModelConfig m = plantest::small_shape(0);
  m.tie_embeddings = tied;
  m.activation_checkpointing = true;
  return m;
}

// Loss and backward as the trainer takes them; the gradient sums (fp32 for bf16 blocks) after.
void loss_backward(LlamaModel& model, const torch::Tensor& batch) {
  Batch b;
  b.tokens = batch;
  model.zero_grad();
  model.loss(b, 0, {}, {1.0, true}).backward();
  model.accumulate_grads();
}

// Each slice unit's gradient equals its rows of the gradient of the whole embedding and head
// (fp32: to rounding; bf16: the whole block's embedding gradient is summed in bf16 by autograd,
// a slice's in fp32, so to bf16 rounding).
TEST_P(SliceGrad, EachSlicesGradientIsItsRowsOfTheWholeBlocks) {
  const SliceCase c = GetParam();
  const ModelConfig cfg = slice_model(c.tied);
  LlamaModel model(cfg, c.dtype, 7);
  torch::manual_seed(3);
  const torch::Tensor batch = torch::randint(0, cfg.vocab_size, {3, 13}, torch::kInt64);
  const int head = model.n_blocks() - 1;
  model.block(0).set_trainable(true);
  model.block(head).set_trainable(true);
  loss_backward(model, batch);
  const torch::Tensor whole_embed = model.block(0).grad().clone(), whole_head = model.block(head).grad().clone();
  ASSERT_GT(whole_embed.abs().max().item<double>(), 0.0);
  const double tol = c.dtype == torch::kFloat32 ? 1e-6 : 1e-2;

  BcdConfig bc;
  bc.enabled = true;
  bc.vocab_slices = 4;
  int sliced = 0;
  for (const UnitShape& u : make_units(model, bc)) {
    if (u.name.rfind("embed.", 0) != 0 && u.name.rfind("head", 0) != 0) continue;
    SCOPED_TRACE(u.name);
    model.set_trainable(false);
    for (const UnitPieceShape& p : u.pieces) model.block(p.block).set_trainable(true, p.part, p.begin, p.end);
    loss_backward(model, batch);
    for (const UnitPieceShape& p : u.pieces) {
      const Block& blk = model.block(p.block);
      const torch::Tensor want = (p.block == 0 ? whole_embed : whole_head).narrow(0, p.begin, p.end - p.begin);
      ASSERT_EQ(blk.grad().numel(), p.end - p.begin);
      const double err = (blk.grad() - want).abs().max().item<double>();
      EXPECT_LE(err, tol * std::max(1e-3, want.abs().max().item<double>())) << "block " << blk.name();
    }
    ++sliced;
  }
  EXPECT_EQ(sliced, c.tied ? 5 : 8);  // tied: the head unit is the final norm alone
}

INSTANTIATE_TEST_SUITE_P(Variants, SliceGrad,
                         ::testing::Values(SliceCase{"UntiedFp32", false, torch::kFloat32},
                                           SliceCase{"TiedFp32", true, torch::kFloat32},
                                           SliceCase{"UntiedBf16", false, torch::kBFloat16},
                                           SliceCase{"TiedBf16", true, torch::kBFloat16}),
                         [](const auto& info) { return std::string(info.param.name); });

// An update of a slice unit moves its rows and nothing else, and its state is its rows' only.
TEST(VocabSlices, AnUpdateMovesItsRowsOnly) {
  const ModelConfig cfg = slice_model(false);
  LlamaModel model(cfg, torch::kFloat32, 7);
  BcdConfig bc;
  bc.enabled = true;
  bc.vocab_slices = 3;
  const std::vector<UnitShape> units = make_units(model, bc);
  BlockAdamW opt(model, units, OptimConfig{}, true);
  torch::manual_seed(5);
  const torch::Tensor batch = torch::randint(0, cfg.vocab_size, {2, 13}, torch::kInt64);
  for (const char* name : {"embed.1", "head.0", "head.2"}) {
    SCOPED_TRACE(name);
    const int u = static_cast<int>(std::find_if(units.begin(), units.end(), [&](const UnitShape& t) { return t.name == name; }) -
                                   units.begin());
    ASSERT_LT(u, static_cast<int>(units.size()));
    const UnitPieceShape p = units[u].pieces.front();
    EXPECT_EQ(opt.unit_elems(u), p.end - p.begin);
    std::vector<torch::Tensor> before;
    for (const Block& b : model.blocks()) before.push_back(b.data().clone());
    opt.activate(u);
    loss_backward(model, batch);
    opt.step(1e-2);
    for (int b = 0; b < model.n_blocks(); ++b) {
      const torch::Tensor& now = model.block(b).data();
      if (b != p.block) {
        EXPECT_TRUE(torch::equal(now, before[b])) << model.block(b).name();
        continue;
      }
      EXPECT_TRUE(torch::equal(now.narrow(0, 0, p.begin), before[b].narrow(0, 0, p.begin)));
      EXPECT_TRUE(torch::equal(now.narrow(0, p.end, now.numel() - p.end), before[b].narrow(0, p.end, now.numel() - p.end)));
      EXPECT_FALSE(torch::equal(now.narrow(0, p.begin, p.end - p.begin), before[b].narrow(0, p.begin, p.end - p.begin)));
    }
  }
}

// The backward's rows: a token in the slice goes to its own row; the others (masked to zero)
// spread over the slice, at most ceil(N / rows) a row, never one hot row taking the batch.
TEST(VocabSlices, OutOfSliceTokensSpreadOverTheSlicesRows) {
  torch::manual_seed(12);
  const int64_t first = 100, rows = 50;
  const torch::Tensor tokens = torch::randint(0, 1000, {8, 64}, torch::kInt64);  // ~95% outside
  const torch::Tensor r = slice_embedding_rows(tokens, first, rows), ids = tokens.reshape({-1});
  const torch::Tensor in = (ids >= first) & (ids < first + rows);
  ASSERT_EQ(r.numel(), ids.numel());
  EXPECT_TRUE(torch::equal(r.masked_select(in), ids.masked_select(in) - first));
  EXPECT_GE(r.min().item<int64_t>(), 0);
  EXPECT_LT(r.max().item<int64_t>(), rows);
  const int64_t most = torch::bincount(r.masked_select(~in), {}, rows).max().item<int64_t>();
  EXPECT_LE(most, (ids.numel() + rows - 1) / rows);
}

// A slice's gradient is the same bits every time, with many repeated tokens and enough of them for
// LibTorch to split the work over threads (the bitwise resume rests on it).
TEST(VocabSlices, TheGradientIsTheSameBitsEveryTime) {
  ModelConfig cfg = slice_model(true);
  cfg.vocab_size = 16;  // 1,024 tokens over 16 rows: every row repeated 64 times
  cfg.max_seq_len = 256;
  LlamaModel model(cfg, torch::kFloat32, 7);
  torch::manual_seed(11);
  const torch::Tensor batch = torch::randint(0, cfg.vocab_size, {4, 257}, torch::kInt64);
  BcdConfig bc;
  bc.enabled = true;
  bc.vocab_slices = 2;
  const UnitShape slice = make_units(model, bc).front();  // embed.0
  ASSERT_EQ(slice.name, "embed.0");
  model.block(0).set_trainable(true, Part::kNone, slice.pieces[0].begin, slice.pieces[0].end);
  loss_backward(model, batch);
  const torch::Tensor first = model.block(0).grad().clone();
  for (int i = 0; i < 3; ++i) {
    loss_backward(model, batch);
    EXPECT_TRUE(torch::equal(model.block(0).grad(), first)) << "try " << i;
  }
}

// The Llama 3 vocabulary (128,256 rows) in a tiny model: every embedding and head slice trains by
// BCD, N steps, a checkpoint, a resume and the rest equal the run straight through, bit for bit,
// and the model exports.
TEST(VocabSlicesRun, Llama3VocabularySlicesTrainAndResumeExactly) {
  const std::string tok = test::source_path("../shared/data/tokenizers/llama3/tokenizer.json");
  if (!fs::is_regular_file(tok)) GTEST_SKIP() << "no " << tok << " (shared/data is not checked out here)";
  test::TempDir tmp("bcd-vslices");
  auto r = test::run_bcdtrain("prepare --input /usr/share/games/fortunes/science --out " + tmp.file("data") +
                              " --tokenizer " + tok + " --val-fraction 0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> units = {"embed.0", "embed.1", "layer.0", "layer.1", "head.0", "head.1"};
  auto args = [&](const std::string& run, int every) {
    return fmt::format(
        "train --quiet --config {} --data.path={} --train.run_dir={} --sample.prompts='[]' --train.val_every=0"
        " --train.log_every=1 --model.d_model=32 --model.n_layers=2 --model.n_heads=2 --model.n_kv_heads=1"
        " --model.d_ff=64 --train.batch_size=2 --train.seq_len=32 --train.steps=18 --train.warmup_steps=2"
        " --train.checkpoint_every={} --bcd.layers_per_block=1 --bcd.vocab_slices=2 --bcd.switch_every=3"
        " --bcd.order=fixed --bcd.fixed_order='[\"head.1\", \"embed.0\", \"layer.1\", \"head.0\", \"embed.1\", \"layer.0\"]'",
        test::source_path("configs/tiny.toml"), tmp.file("data"), run, every);
  };
  const std::string straight = tmp.file("straight"), split = tmp.file("split");
  r = test::run_bcdtrain(args(straight, 18));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_bcdtrain(args(split, 10));  // step 10: the first of head.0's 3 steps done
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::remove(split + "/checkpoints/step-00000018.h5");
  {
    auto m = test::read_metrics(split + "/metrics.jsonl");
    std::ofstream out(split + "/metrics.jsonl", std::ios::trunc);
    for (size_t i = 0; i < 10; ++i) out << m[i].dump() << "\n";
  }
  r = test::run_bcdtrain("train --quiet --resume " + split);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ma = test::read_metrics(straight + "/metrics.jsonl"), mb = test::read_metrics(split + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), 18u);
  ASSERT_EQ(mb.size(), 18u);
  std::vector<std::string> visited;
  for (size_t i = 0; i < 18; ++i) {
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ma[i]["block"], mb[i]["block"]) << "step " << i + 1;
    const std::string b = ma[i]["block"].get<std::string>();
    if (visited.empty() || visited.back() != b) visited.push_back(b);
  }
  EXPECT_EQ(visited, (std::vector<std::string>{"head.1", "embed.0", "layer.1", "head.0", "embed.1", "layer.0"}));
  // Every unit took its 3 updates, with state of its own (a slice's rows: half the matrix, the
  // last head slice with the final norm).
  CheckpointReader ck(straight + "/checkpoints/step-00000018.h5");
  for (const std::string& u : units) EXPECT_EQ(ck.attr_int("/rank0/optimizer/" + u, "steps"), 3) << u;
  EXPECT_EQ(ck.attr_int("/rank0/optimizer/embed.0", "elems"), 128256 / 2 * 32);
  EXPECT_EQ(ck.attr_int("/rank0/optimizer/head.0", "elems"), 128256 / 2 * 32);
  EXPECT_EQ(ck.attr_int("/rank0/optimizer/head.1", "elems"), 128256 / 2 * 32 + 32);
  test::expect_same_state(straight + "/checkpoints/step-00000018.h5", split + "/checkpoints/step-00000018.h5", units,
                          {"embed", "layer.0", "layer.1", "head"});
  // The model a sliced run writes is an ordinary model: it exports to Hugging Face's format.
  r = test::run_bcdtrain("export --checkpoint " + straight + "/model.h5 --hf " + tmp.file("hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(tmp.file("hf/config.json"))) << r.output;
}

}  // namespace
}  // namespace bcd
