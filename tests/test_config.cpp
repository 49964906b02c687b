// Config tests: defaults, file + overrides, unknown keys and wrong types named, validation.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "base/config.h"
#include "base/error.h"
#include "test_util.h"

namespace bcd {
namespace {

using test::error_of;

TEST(Config, FileThenOverrides) {
  test::TempDir dir;
  test::write_text(dir.file("c.toml"), R"(
[train]
steps = 10
lr = 1e-3
run_dir = "runs/x"
[model]
d_model = 64
n_heads = 4
n_kv_heads = 2
[sample]
prompts = ["a", "b"]
)");
  Config c = load_config(dir.file("c.toml"), {"--train.steps=40", "train.lr=2e-3", "--data.path=/some/dir",
                                              "--model.tie_embeddings=true", "--sample.prompts=[\"x\"]"});
  EXPECT_EQ(c.train.steps, 40);
  EXPECT_DOUBLE_EQ(c.train.lr, 2e-3);
  EXPECT_EQ(c.train.run_dir, "runs/x");
  EXPECT_EQ(c.data.path, "/some/dir");  // a bare path becomes a string
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.kv_heads(), 2);
  ASSERT_EQ(c.sample.prompts.size(), 1u);
  EXPECT_EQ(c.sample.prompts[0], "x");
}

TEST(Config, IntegerAcceptedWhereAFloatIsExpected) {
  Config c = load_config("", {"--train.lr=1", "--train.grad_clip=0"});
  EXPECT_DOUBLE_EQ(c.train.lr, 1.0);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 0.0);
}

TEST(Config, ErrorsNameTheSourceAndKey) {
  test::TempDir dir;
  test::write_text(dir.file("bad_key.toml"), "[train]\nstepz = 3\n");
  std::string e = error_of([&] { load_config(dir.file("bad_key.toml"), {}); });
  EXPECT_NE(e.find("bad_key.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("stepz"), std::string::npos) << e;
  EXPECT_NE(e.find("steps"), std::string::npos) << "should list valid keys: " << e;

  test::write_text(dir.file("bad_type.toml"), "[train]\nsteps = \"many\"\n");
  e = error_of([&] { load_config(dir.file("bad_type.toml"), {}); });
  EXPECT_NE(e.find("[train] steps"), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;

  test::write_text(dir.file("bad_section.toml"), "[trian]\nsteps = 3\n");
  e = error_of([&] { load_config(dir.file("bad_section.toml"), {}); });
  EXPECT_NE(e.find("trian"), std::string::npos) << e;

  test::write_text(dir.file("syntax.toml"), "[train\nsteps = 3\n");
  e = error_of([&] { load_config(dir.file("syntax.toml"), {}); });
  EXPECT_NE(e.find("syntax.toml:1"), std::string::npos) << e;

  e = error_of([&] { load_config(dir.file("missing.toml"), {}); });
  EXPECT_NE(e.find("missing.toml"), std::string::npos) << e;

  e = error_of([&] { load_config("", {"--train.steps=abc"}); });
  EXPECT_NE(e.find("--train.steps=abc"), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer"), std::string::npos) << e;

  e = error_of([&] { load_config("", {"--train.nope=1"}); });
  EXPECT_NE(e.find("nope"), std::string::npos) << e;

  e = error_of([&] { load_config("", {"--train.steps"}); });
  EXPECT_NE(e.find("expected --section.key=value"), std::string::npos) << e;
}

// Every float key of the config, through its own visitor.
struct FloatKeys {
  std::vector<std::string> keys;
  std::string section;
  void operator()(const char* key, double&, const char*, Resume) { keys.push_back(section + "." + key); }
  template <class T>
  void operator()(const char*, T&, const char*, Resume) {}
  template <class S>
  void operator()(const char* name, S& s) {
    section = name;
    s.visit(*this);
  }
};

// TOML's nan and inf are refused by name for every float key (a range check like `x < 0` would
// let NaN through).
TEST(Config, EveryFloatKeyRefusesNanAndInfinity) {
  FloatKeys v;
  Config c;
  c.visit_sections(v);
  ASSERT_GE(v.keys.size(), 10u) << "lr, grad_clip, betas, eps, init_std, sampling...";
  for (const std::string& k : v.keys)
    for (const char* value : {"nan", "inf", "-inf", "+nan"}) {
      const std::string e = error_of([&] { load_config("", {"--" + k + "=" + value}); });
      const std::string section = k.substr(0, k.find('.')), key = k.substr(k.find('.') + 1);
      EXPECT_NE(e.find("[" + section + "] " + key + ": expected a finite number"), std::string::npos)
          << k << "=" << value << ": " << e;
    }
}

TEST(Config, ValidationNamesTheKey) {
  std::string e = error_of([] { load_config("", {"--model.n_heads=4", "--model.n_kv_heads=3"}); });
  EXPECT_NE(e.find("n_kv_heads"), std::string::npos) << e;
  e = error_of([] { load_config("", {"--model.d_model=30", "--model.n_heads=4"}); });
  EXPECT_NE(e.find("d_model"), std::string::npos) << e;
  e = error_of([] { load_config("", {"--train.steps=0"}); });
  EXPECT_NE(e.find("steps"), std::string::npos) << e;
  e = error_of([] { load_config("", {"--train.dtype=\"fp8\""}); });
  EXPECT_NE(e.find("[train] dtype: expected \"fp32\" or \"bf16\", got \"fp8\""), std::string::npos) << e;
  // seq_len against the model's max_seq_len is checked once, where the shape is resolved (a shape
  // from an HF config.json or init_from is known only there): by the plan, which a run makes too.
  const auto r = test::run_bcdtrain("plan --train.seq_len=4096 --model.max_seq_len=128 --model.vocab_size=100");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("[train] seq_len (4096) exceeds the model's max_seq_len (128)"), std::string::npos) << r.output;
}

// Sizes a typo makes absurd are refused when the config loads, naming the bound: a step of 1.28e14
// tokens would run for days deaf to SIGTERM; 2048 vocabulary slices print a 40,000-character
// line; slices with BCD off would be ignored without a word.
TEST(Config, AbsurdSizesAreRefusedNamingTheBound) {
  std::string e = error_of([] { load_config("", {"--train.grad_accum=1000000000000"}); });
  EXPECT_NE(e.find("[train] batch_size x seq_len x grad_accum = 8 x"), std::string::npos) << e;
  EXPECT_NE(e.find("expected at most 2147483648 (2^31)"), std::string::npos) << e;
  EXPECT_NO_THROW(load_config("", {"--train.grad_accum=64", "--train.batch_size=16", "--train.seq_len=4096"}));
  e = error_of([] { load_config("", {"--bcd.enabled=true", "--bcd.vocab_slices=2048"}); });
  EXPECT_NE(e.find("[bcd] vocab_slices: expected 1 up to 256, got 2048"), std::string::npos) << e;
  e = error_of([] { load_config("", {"--bcd.vocab_slices=4"}); });
  EXPECT_NE(e.find("block coordinate descent is off (enabled = false): set vocab_slices = 1"), std::string::npos) << e;
  e = error_of([] { load_config("", {"--bcd.enabled=true", "--bcd.blocks=\"whole\"", "--bcd.vocab_slices=4"}); });
  EXPECT_NE(e.find("blocks = \"whole\" trains the model as one unit"), std::string::npos) << e;
  e = error_of([] {
    load_config("", {"--bcd.enabled=true", "--bcd.include_embed=false", "--bcd.include_head=false", "--bcd.vocab_slices=4"});
  });
  EXPECT_NE(e.find("neither is trained"), std::string::npos) << e;
  EXPECT_NO_THROW(load_config("", {"--bcd.enabled=true", "--bcd.vocab_slices=256"}));
  e = error_of([] { load_config("", {"--sample.max_new_tokens=1000000000"}); });
  EXPECT_NE(e.find("[sample] max_new_tokens: expected 0 up to 1048576, got 1000000000"), std::string::npos) << e;
}

// A closed set's names are parsed once, when the config loads, into its enum; the dump writes
// the names back.
TEST(Config, ClosedSetsAreEnumsParsedOnLoad) {
  const Config c = load_config("", {"--train.dtype=bf16", "--bcd.order=fixed", "--bcd.fixed_order=['head']",
                                    "--memory.stream_home=nvme", "--sample.chat_template=none", "--dist.backend=gloo"});
  EXPECT_EQ(c.train.dtype, Dtype::kBf16);
  EXPECT_EQ(c.bcd.order, BlockOrder::kFixed);
  EXPECT_EQ(c.memory.stream_home, Home::kNvme);
  EXPECT_EQ(c.sample.chat_template, SampleChat::kNone);
  EXPECT_EQ(named_template(SampleChat::kChatML), ChatTemplate::kChatML);
  EXPECT_FALSE(named_template(SampleChat::kAuto).has_value());
  Config copy = c;
  const std::string dump = config_to_toml(copy);
  for (const char* line : {"dtype = 'bf16'", "order = 'fixed'", "stream_home = 'nvme'", "chat_template = 'none'", "backend = 'gloo'"})
    EXPECT_NE(dump.find(line), std::string::npos) << line << "\n" << dump;
  std::string e = error_of([] { load_config("", {"--bcd.blocks=7"}); });
  EXPECT_NE(e.find("[bcd] blocks: expected one of \"layer\", \"attn_mlp\" or \"whole\", found an integer"), std::string::npos) << e;
}

// Every key declares what --resume may do with it, where it is declared: the rule
// (cli/train_commands.cpp) reads these, so a key added later has its class from the start.
TEST(Config, EveryKeyHasAResumeClass) {
  const auto classes = resume_classes();
  std::map<std::string, Resume> by_key(classes.begin(), classes.end());
  EXPECT_EQ(by_key.size(), classes.size()) << "a key declared twice";
  Config c;
  std::istringstream dump(config_to_toml(c));
  std::string line, section;
  int keys = 0;
  while (std::getline(dump, line)) {
    if (line.size() > 2 && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    ++keys;
    EXPECT_TRUE(by_key.count(section + "." + line.substr(0, eq))) << section << "." << line.substr(0, eq);
  }
  EXPECT_EQ(keys, static_cast<int>(classes.size()));
  EXPECT_EQ(by_key.at("model.d_model"), Resume::kFixed);
  EXPECT_EQ(by_key.at("bcd.state_on_switch"), Resume::kFixed);
  EXPECT_EQ(by_key.at("train.lr"), Resume::kChanges);
  EXPECT_EQ(by_key.at("data.path"), Resume::kChanges);
  EXPECT_EQ(by_key.at("memory.host_bytes"), Resume::kPlacement);
  EXPECT_EQ(by_key.at("dist.nproc"), Resume::kPlacement);
}

TEST(Config, DumpRoundTrips) {
  Config a = load_config("", {"--train.steps=77", "--model.qkv_bias=true", "--sample.prompts=[\"q\"]"});
  std::string text = config_to_toml(a);
  Config b;
  apply_config_text(b, text, "dump");
  EXPECT_EQ(config_to_toml(b), text);
  EXPECT_EQ(b.train.steps, 77);
  EXPECT_TRUE(b.model.qkv_bias);
}

TEST(Config, ReferenceListsEveryKey) {
  std::string ref = config_reference();
  for (const char* k : {"[train]", "`steps`", "`batch_size`", "`seq_len`", "`lr`", "`run_dir`", "`seed`", "[data]",
                        "`path`", "[model]", "`n_kv_heads`", "`rope_theta`"})
    EXPECT_NE(ref.find(k), std::string::npos) << k;
}

TEST(Config, ReadmeReferenceIsCurrent) {
  // README.md carries the output of `bcdtrain config --reference`; regenerate it when keys change.
  std::string ref = config_reference();
  while (!ref.empty() && ref.front() == '\n') ref.erase(ref.begin());
  while (!ref.empty() && ref.back() == '\n') ref.pop_back();
  EXPECT_NE(test::read_text(test::source_path("README.md")).find(ref), std::string::npos)
      << "README.md's configuration reference is stale: paste `build/bcdtrain config --reference` into it";
}

TEST(Config, ShippedConfigsLoad) {
  for (const char* f : {"configs/tiny.toml", "configs/finetune-tiny.toml"})
    EXPECT_NO_THROW(load_config(test::source_path(f), {})) << f;
}

}  // namespace
}  // namespace bcd
