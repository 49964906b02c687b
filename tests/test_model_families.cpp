// The model families beyond Llama 2/3's shape, trained: a Llama 3.1-style model (llama3 RoPE
// scaling) and Qwen3-style models (q/k norms, a head dimension apart from d_model / n_heads, tied
// and untied), each trained by BCD over every unit with vocabulary slices, checkpointed inside a
// unit's visit and resumed: bit for bit the run straight through. Their q/k norms belong to
// their layer's unit and take its updates.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint_test_helpers.h"
#include "test_util.h"

namespace bcd {
namespace {

namespace fs = std::filesystem;

struct FamilyCase {
  const char* name;
  const char* model;                // [model] overrides
  std::vector<std::string> units;   // every BCD unit, in the order trained
};
void PrintTo(const FamilyCase& c, std::ostream* os) { *os << c.name; }

class ModelFamilyRun : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(ModelFamilyRun, TrainsEveryUnitBySlicesAndResumesExactly) {
  const FamilyCase& c = GetParam();
  test::TempDir tmp("bcd-family");
  auto r = test::prepare_fortunes(tmp.file("data"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string order;
  for (const auto& u : c.units) order += (order.empty() ? "\"" : ", \"") + u + "\"";
  const int steps = 2 * static_cast<int>(c.units.size()), split_at = 5;  // step 5: inside a visit
  auto args = [&](const std::string& run, int every) {
    return fmt::format(
        "train --quiet --config {} --data.path={} --train.run_dir={} --sample.prompts='[]' --train.val_every=0"
        " --train.log_every=1 --model.d_model=32 --model.n_layers=2 --model.n_heads=2 --model.n_kv_heads=1"
        " --model.d_ff=64 --model.max_seq_len=64 {} --train.batch_size=2 --train.seq_len=32 --train.steps={}"
        " --train.warmup_steps=2 --train.checkpoint_every={} --bcd.layers_per_block=1 --bcd.vocab_slices=2"
        " --bcd.switch_every=2 --bcd.order=fixed --bcd.fixed_order='[{}]'",
        test::source_path("configs/tiny.toml"), tmp.file("data"), run, c.model, steps, every, order);
  };
  const std::string straight = tmp.file("straight"), split = tmp.file("split");
  r = test::run_bcdtrain(args(straight, steps));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_bcdtrain(args(split, split_at));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int s = split_at + 1; s <= steps; ++s) fs::remove(split + fmt::format("/checkpoints/step-{:08d}.h5", s));
  {
    auto m = test::read_metrics(split + "/metrics.jsonl");
    std::ofstream out(split + "/metrics.jsonl", std::ios::trunc);
    for (int i = 0; i < split_at; ++i) out << m[i].dump() << "\n";
  }
  r = test::run_bcdtrain("train --quiet --resume " + split);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto ma = test::read_metrics(straight + "/metrics.jsonl"), mb = test::read_metrics(split + "/metrics.jsonl");
  ASSERT_EQ(ma.size(), static_cast<size_t>(steps));
  ASSERT_EQ(mb.size(), static_cast<size_t>(steps));
  std::vector<std::string> visited;
  for (int i = 0; i < steps; ++i) {
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << i + 1;
    const std::string b = ma[i]["block"].get<std::string>();
    if (visited.empty() || visited.back() != b) visited.push_back(b);
  }
  EXPECT_EQ(visited, c.units);
  const std::string last = straight + fmt::format("/checkpoints/step-{:08d}.h5", steps);
  CheckpointReader ck(last);
  for (const std::string& u : c.units) EXPECT_EQ(ck.attr_int("/rank0/optimizer/" + u, "steps"), 2) << u;
  test::expect_same_state(last, split + fmt::format("/checkpoints/step-{:08d}.h5", steps), c.units,
                          {"embed", "layer.0", "layer.1", "head"});
  // The trained model exports to Hugging Face's format as its family.
  r = test::run_bcdtrain("export --checkpoint " + straight + "/model.h5 --hf " + tmp.file("hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto config = nlohmann::json::parse(test::read_text(tmp.file("hf/config.json")));
  const bool qwen3 = std::string(c.name).rfind("qwen3", 0) == 0;
  EXPECT_EQ(config["model_type"], qwen3 ? "qwen3" : "llama");
  if (!qwen3) EXPECT_EQ(config["rope_parameters"]["rope_type"], "llama3");
}

INSTANTIATE_TEST_SUITE_P(
    Families, ModelFamilyRun,
    ::testing::Values(
        FamilyCase{"llama31",
                   "--model.rope_theta=500000.0 --model.rope_type=llama3 --model.rope_factor=8.0"
                   " --model.rope_original_max_len=16",
                   {"head.1", "embed.0", "layer.1", "head.0", "embed.1", "layer.0"}},
        FamilyCase{"qwen3_tied", "--model.qk_norm=true --model.d_head=24 --model.tie_embeddings=true",
                   {"embed.1", "layer.0", "head", "embed.0", "layer.1"}},
        FamilyCase{"qwen3_yarn", "--model.qk_norm=true --model.d_head=8 --model.rope_type=yarn --model.rope_factor=4.0",
                   {"layer.1", "head.0", "embed.1", "head.1", "layer.0", "embed.0"}}),
    [](const ::testing::TestParamInfo<FamilyCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace bcd
