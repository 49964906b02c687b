// Hostile values for every config key: each run either trains or stops with a UserError (one
// line, exit 2 in the binary). An InternalError, a torch error or std::bad_alloc is a failure:
// it means a value from the user reached a BCD_CHECK or a LibTorch call unchecked.
//
// The keys come from the config's own visit(), so a key added later is swept without editing
// this file. Runs are in-process (a tiny model, two steps) under an address-space limit, so a
// value that slips past the planner shows up as bad_alloc here instead of swapping the machine.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "base/config.h"
#include "base/error.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "runtime/trainer.h"
#include "test_util.h"

namespace bcd {
namespace {

enum class Kind { kInt, kFloat, kBool, kString, kList, kFloatList, kBytes, kChoice };

// Collects (key, kind) of one section through its visit().
struct KeyLister {
  std::vector<std::pair<std::string, Kind>> keys;
  void operator()(const char* k, int64_t&, const char*, Resume) { keys.push_back({k, Kind::kInt}); }
  void operator()(const char* k, double&, const char*, Resume) { keys.push_back({k, Kind::kFloat}); }
  void operator()(const char* k, bool&, const char*, Resume) { keys.push_back({k, Kind::kBool}); }
  void operator()(const char* k, std::string&, const char*, Resume) { keys.push_back({k, Kind::kString}); }
  void operator()(const char* k, std::vector<std::string>&, const char*, Resume) { keys.push_back({k, Kind::kList}); }
  void operator()(const char* k, std::vector<double>&, const char*, Resume) { keys.push_back({k, Kind::kFloatList}); }
  void operator()(const char* k, Bytes&, const char*, Resume) { keys.push_back({k, Kind::kBytes}); }
  template <class E, std::enable_if_t<is_choice<E>::value, int> = 0>
  void operator()(const char* k, E&, const char*, Resume) {
    keys.push_back({k, Kind::kChoice});
  }
};

// Values at the edges of each type (non-finite floats are refused by the parser: test_config).
std::vector<std::string> hostile_values(Kind k) {
  switch (k) {
    case Kind::kInt: return {"-1", "0", "1", "4611686018427387904"};
    case Kind::kFloat: return {"-1.0", "0.0", "1e-300", "1e300"};
    case Kind::kBool: return {"true", "false"};
    case Kind::kString: return {"''", "'nonsense'"};
    case Kind::kList: return {"[]", "['nonsense']"};
    case Kind::kFloatList: return {"[]", "[-1.0]", "[0.0]", "[1e300, 1e300]"};
    case Kind::kBytes: return {"0", "1", "'1TiB'", "'auto'"};
    case Kind::kChoice: return {"''", "'nonsense'", "1"};  // refused when the config loads
  }
  return {};
}

// Values that only ask for more work, not more memory: a huge one trains (or samples) for as long
// as asked, which is right, so it is not swept.
const std::set<std::string> kWorkNotMemory = {"train.steps", "train.grad_accum", "sample.max_new_tokens"};

class HostileConfig : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir("bcd-hostile");
    PrepareOptions p;
    p.inputs = {"/usr/share/games/fortunes/science"};
    p.out_dir = dir_->file("data");
    p.vocab_size = 512;
    prepare_dataset(p);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    // A wrong size must fail as bad_alloc here, not take the machine's memory.
    rlimit lim{};
    getrlimit(RLIMIT_AS, &lim);
    const rlim_t cap = rlim_t{16} << 30;
    if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > cap) lim.rlim_cur = cap;
    setrlimit(RLIMIT_AS, &lim);
    old_cwd_ = std::filesystem::current_path();
    std::filesystem::current_path(dir_->path());  // relative paths from the values land here
  }
  void TearDown() override { std::filesystem::current_path(old_cwd_); }

  // The tiny run every case starts from, then `extra` (the value under test last: it wins).
  static std::vector<std::string> base_overrides(const std::string& run_dir, std::vector<std::string> extra) {
    std::vector<std::string> ov = {
        "--data.path=" + dir_->file("data"), "--train.run_dir=" + run_dir, "--train.steps=2",
        "--train.batch_size=2", "--train.seq_len=16", "--train.val_batches=1", "--train.threads=1",
        "--train.warmup_steps=0", "--model.d_model=32", "--model.n_heads=2", "--model.n_kv_heads=1",
        "--model.n_layers=2", "--model.d_ff=64", "--model.max_seq_len=32", "--bcd.enabled=true",
        "--bcd.switch_every=1", "--sample.prompts=['x']", "--sample.max_new_tokens=3"};
    ov.insert(ov.end(), extra.begin(), extra.end());
    return ov;
  }

  // Whether `msg` names `key` as a word of its own (seq_len is not named by max_seq_len).
  static bool names(const std::string& msg, const std::string& key) {
    auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = msg.find(key); at != std::string::npos; at = msg.find(key, at + 1))
      if ((at == 0 || !word(msg[at - 1])) && (at + key.size() == msg.size() || !word(msg[at + key.size()])))
        return true;
    return false;
  }

  // Trains with `ov`; true when it trained, false when refused with a UserError that names one of
  // `keys` (the key under test, however the message spells its section); a failure of the test
  // (naming `what`) for anything else.
  static bool trains(const std::vector<std::string>& ov, const std::string& what, const std::vector<std::string>& keys) {
    const bool verbose = std::getenv("BCD_HOSTILE_VERBOSE") != nullptr;
    try {
      run_training(load_config("", ov), /*quiet=*/true);
      if (verbose) std::printf("trained  %s\n", what.c_str());
      return true;
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(std::any_of(keys.begin(), keys.end(), [&](const std::string& k) { return names(msg, k); }))
          << what << ": the refusal does not name the key: " << msg;
      if (verbose) std::printf("refused  %s: %s\n", what.c_str(), e.what());
    } catch (const c10::Error& e) {
      ADD_FAILURE() << what << ": torch error: " << e.what_without_backtrace();
    } catch (const InternalError& e) {
      ADD_FAILURE() << what << ": internal error: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
    return false;
  }

  // Sweeps every key of `section`; returns how many runs trained (the rest were refused).
  int sweep(const std::string& section) {
    Config defaults;
    KeyLister lister;
    auto list = [&](const char* name, auto& s) {
      if (name == section) s.visit(lister);
    };
    defaults.visit_sections(list);
    EXPECT_FALSE(lister.keys.empty()) << section;
    int trained = 0, n = 0;
    for (const auto& [key, kind] : lister.keys) {
      const std::string full = section + "." + key;
      for (const std::string& value : hostile_values(kind)) {
        if (kWorkNotMemory.count(full) && value.size() > 4) continue;
        const std::string run_dir = dir_->file("run" + std::to_string(n++));
        const std::string what = "--" + full + "=" + value;
        trained += trains(base_overrides(run_dir, {what}), what, {key}) ? 1 : 0;
        std::error_code ec;
        std::filesystem::remove_all(run_dir, ec);
      }
    }
    return trained;
  }

  static test::TempDir* dir_;
  std::filesystem::path old_cwd_;
};
test::TempDir* HostileConfig::dir_ = nullptr;

// Each section trains for some values (the sweep is not refusing everything for one reason).
TEST_F(HostileConfig, Model) { EXPECT_GT(sweep("model"), 0); }
TEST_F(HostileConfig, Train) { EXPECT_GT(sweep("train"), 0); }
TEST_F(HostileConfig, Optim) { EXPECT_GT(sweep("optim"), 0); }
TEST_F(HostileConfig, Bcd) { EXPECT_GT(sweep("bcd"), 0); }
// No path but the prepared one is a dataset; paths = [] and weights = [] are the defaults.
TEST_F(HostileConfig, Data) { EXPECT_EQ(sweep("data"), 2); }
TEST_F(HostileConfig, Sample) { EXPECT_GT(sweep("sample"), 0); }
TEST_F(HostileConfig, Memory) { EXPECT_GT(sweep("memory"), 0); }
TEST_F(HostileConfig, Dist) { EXPECT_GT(sweep("dist"), 0); }

// Every key of an HF config.json ([model] hf_config, init_from = "hf:DIR", import) with values
// of every JSON type at the edges: each is refused naming the file or trains.
TEST_F(HostileConfig, HfConfigJson) {
  const nlohmann::json base = {{"model_type", "llama"},        {"hidden_size", 32},
                               {"num_hidden_layers", 2},       {"num_attention_heads", 2},
                               {"num_key_value_heads", 1},     {"intermediate_size", 64},
                               {"max_position_embeddings", 32}, {"vocab_size", 512},
                               {"rope_theta", 10000.0},        {"rms_norm_eps", 1e-5},
                               {"tie_word_embeddings", false}, {"hidden_act", "silu"},
                               {"rope_scaling", nullptr},      {"head_dim", 16},
                               {"attention_bias", false},      {"mlp_bias", false}};
  const std::vector<nlohmann::json> values = {-1, 0, 1, int64_t{1} << 62, 1e300, "x", nullptr, true, nlohmann::json::array()};
  const std::string file = dir_->file("config.json");
  int trained = 0, n = 0;
  for (const auto& [key, _] : base.items()) {
    for (const nlohmann::json& v : values) {
      nlohmann::json j = base;
      j[key] = v;
      test::write_text(file, j.dump());
      const std::string run_dir = dir_->file("hf" + std::to_string(n++));
      const std::string what = "config.json " + key + " = " + v.dump();
      // Past the file, the shape is bcdtrain's: a size refused there is named as in [model].
      static const std::map<std::string, std::string> kOurs = {
          {"hidden_size", "d_model"}, {"num_hidden_layers", "n_layers"}, {"num_attention_heads", "n_heads"},
          {"num_key_value_heads", "n_kv_heads"}, {"intermediate_size", "d_ff"}, {"max_position_embeddings", "max_seq_len"}};
      std::vector<std::string> keys = {key};
      if (kOurs.count(key)) keys.push_back(kOurs.at(key));
      trained += trains(base_overrides(run_dir, {"--model.hf_config=" + file}), what, keys) ? 1 : 0;
      std::error_code ec;
      std::filesystem::remove_all(run_dir, ec);
    }
  }
  EXPECT_GT(trained, 0);
}

// Every section of the config is swept above.
TEST(HostileConfigCoverage, EverySectionHasATest) {
  std::vector<std::string> names;
  Config c;
  auto list = [&](const char* name, auto&) { names.push_back(name); };
  c.visit_sections(list);
  EXPECT_EQ(names, (std::vector<std::string>{"model", "train", "optim", "bcd", "data", "sample", "memory", "dist"}));
}

}  // namespace
}  // namespace bcd
