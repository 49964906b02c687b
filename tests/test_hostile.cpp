// Hostile values for every config key and every flag of every subcommand (the flags: below). A
// config key's run either trains or stops with a UserError (one line, exit 2 in the binary). An
// InternalError, a torch error or std::bad_alloc is a failure: it means a value from the user
// reached a BCD_CHECK or a LibTorch call unchecked.
//
// The keys come from the config's own visit(), so a key added later is swept without editing
// this file. Runs are in-process (a tiny model, two steps) under an address-space limit, so a
// value that slips past the planner shows up as bad_alloc here instead of swapping the machine.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "base/config.h"
#include "base/error.h"
#include "base/printable.h"
#include "cli/app.h"
#include "data/chat.h"
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


// ---- Every flag of every subcommand ----
// The flags come from the binary's own help (`bcdtrain --help`, `bcdtrain SUB --help`; launch's
// from its line in the first, plot's from its usage), so a flag added later is swept without
// editing this file. Each case is one command line with one flag given one hostile value; it must
// end with exit code 0 or 2, and a refusal is one line on stderr, ours ("bcdtrain: error: "),
// naming the flag (or the value, or no worse than the command without the flag: a value it
// accepted, refused later for the reason the bare command is), escaped, and of a sane length.
// The lines run in children forked from this test (the binary's command line, cli/app.h): a start
// of the binary costs half a second of loading LibTorch, a fork some 15 ms. Flags a subcommand requires get a stand-in its
// check takes (a path that does not exist, an empty directory or an empty file), so each case
// reaches the check of the flag under test and then fails at once: none gets to real work.

struct CaseResult {
  int status = -1;       // exit code, or 128 + signal
  std::string out, err;  // stdout, stderr
};

// Runs each command line (words after `bcdtrain`) as bcdtrain would, in `dir` (created): each in
// a child forked from this process, which runs the binary's command line (cli/app.h) with its
// stdout and stderr in files, as many at a time as there are cores.
std::vector<CaseResult> run_cases(const std::vector<std::vector<std::string>>& cases, const std::string& dir) {
  std::filesystem::create_directories(dir + "/cases");
  const auto file = [&](size_t n, const char* ext) { return fmt::format("{}/cases/{}.{}", dir, n, ext); };
  std::vector<CaseResult> results(cases.size());
  std::map<pid_t, size_t> running;  // pid -> case
  const auto wait_one = [&] {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) return running.clear();
    const auto it = running.find(pid);
    if (it == running.end()) return;
    results[it->second].status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    running.erase(it);
  };
  const long jobs = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  std::fflush(nullptr);  // else each child would write this process's buffers again
  for (size_t n = 0; n < cases.size(); ++n) {
    while (static_cast<long>(running.size()) >= jobs) wait_one();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      break;
    }
    if (pid == 0) {
      // In `dir`: a relative path a case is given (an output directory "nonsense") lands there.
      const auto to = [](const std::string& path, int fd) {
        const int f = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f < 0 || ::dup2(f, fd) < 0) ::_exit(127);
        ::close(f);
      };
      const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (null < 0 || ::dup2(null, 0) < 0 || ::chdir(dir.c_str()) != 0) ::_exit(127);
      to(file(n, "out"), 1);
      to(file(n, "err"), 2);
      ::alarm(60);  // a case that started real work ends as SIGALRM, not as a hung test
      std::vector<std::string> words = cases[n];
      std::vector<char*> argv = {const_cast<char*>("bcdtrain")};
      for (std::string& w : words) argv.push_back(w.data());
      argv.push_back(nullptr);
      const int rc = cli::run_command_line(static_cast<int>(argv.size()) - 1, argv.data());
      std::fflush(nullptr);
      ::_exit(rc);
    }
    running[pid] = n;
  }
  while (!running.empty()) wait_one();
  for (size_t n = 0; n < cases.size(); ++n) {
    results[n].out = test::read_text(file(n, "out"));
    results[n].err = test::read_text(file(n, "err"));
  }
  return results;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Flag {
  std::string name;           // --seed
  bool takes_value = false;   // --seed N, not --force
  bool required = false;
};

// "  --seed UINT:>= 0   seed of ..." (CLI11) or "  --out DIR   where ..." (plot's usage).
std::vector<Flag> flags_in_help(const std::string& help) {
  static const std::regex kLine(R"(^\s+(?:-\w,\s?)?(--[A-Za-z0-9][A-Za-z0-9_-]*)(?:\s+(\S+))?(.*)$)");
  std::vector<Flag> flags;
  for (const std::string& line : lines_of(help)) {
    std::smatch m;
    if (!std::regex_match(line, m, kLine) || m[1] == "--help" || m[1] == "--version") continue;
    const std::string type = m[2];
    flags.push_back({m[1], !type.empty() && std::isupper(static_cast<unsigned char>(type[0])),
                     line.find(" REQUIRED") != std::string::npos});
  }
  return flags;
}

// launch lists its flags in its line of `bcdtrain --help`: "[--nproc N ...] [--oversubscribe] ...".
std::vector<Flag> flags_of_launch(const std::string& line) {
  static const std::regex kFlag(R"((--[a-z][a-z-]*)( [A-Z]+\b)?)");
  std::vector<Flag> flags;
  const std::string own = line.substr(0, line.find(" train --config"));
  for (auto it = std::sregex_iterator(own.begin(), own.end(), kFlag); it != std::sregex_iterator(); ++it)
    flags.push_back({(*it)[1], (*it)[2].matched, false});
  return flags;
}

// Whether `text` names `flag` as a word of its own (--seed is not named by --seed-file).
bool names_flag(const std::string& text, const std::string& flag) {
  for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const char next = at + flag.size() < text.size() ? text[at + flag.size()] : ' ';
    if (!std::isalnum(static_cast<unsigned char>(next)) && next != '-' && next != '_') return true;
  }
  return false;
}

// Whether `line` shows `value` (escaped; its head, when long) as a word of its own: "0: not found".
bool names_value(const std::string& line, const std::string& value) {
  const std::string shown = printable_line(value).substr(0, 16);
  if (shown.empty()) return false;
  const auto edge = [](char c) { return c == ' ' || c == '"' || c == '\'' || c == ':' || c == '/' || c == '('; };
  for (size_t at = line.find(shown); at != std::string::npos; at = line.find(shown, at + 1)) {
    const size_t end = at + shown.size();
    if ((at == 0 || edge(line[at - 1])) && (end == line.size() || edge(line[end]) || shown.size() == 16)) return true;
  }
  return false;
}

// The longest run of digits in `text` (a bound printed as 309 digits is no bound for people).
size_t longest_digit_run(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = std::isdigit(static_cast<unsigned char>(c)) ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

// inf, like nan, is no number: RefusalsSayWhatWasExpectedAndWhatCame has it.
const std::vector<std::string> kHostileFlagValues = {
    "", "nonsense", "-1", "0", "1e40", "nan", "99999999999999999999999", std::string(3000, 'x'),
    "line\nbreak\x1b[31mred\x07\xff\xfe"};

class HostileFlags : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = std::make_unique<test::TempDir>("bcd-hostile-flags"); }
  std::unique_ptr<test::TempDir> dir_;
};

TEST_F(HostileFlags, EveryFlagOfEverySubcommand) {
  // The subcommands and their flags, from the help.
  const std::vector<CaseResult> top = run_cases({{"--help"}}, dir_->file("top"));
  ASSERT_EQ(top[0].status, 0) << top[0].err;
  std::vector<std::string> subs;
  std::string launch_line;
  bool in_subs = false;
  for (const std::string& line : lines_of(top[0].out)) {
    if (line == "Subcommands:") in_subs = true;
    std::smatch m;
    static const std::regex kSub(R"(^  ([a-z]+)\s+(.*)$)");
    if (in_subs && std::regex_match(line, m, kSub)) {
      subs.push_back(m[1]);
      if (m[1] == "launch") launch_line = m[2];
    }
  }
  ASSERT_GE(subs.size(), 10u) << top[0].out;
  std::vector<std::vector<std::string>> helps;
  for (const std::string& sub : subs)
    if (sub != "launch") helps.push_back({sub, "--help"});
  const std::vector<CaseResult> help = run_cases(helps, dir_->file("help"));

  std::map<std::string, std::vector<Flag>> flags;
  for (size_t i = 0; i < helps.size(); ++i) {
    ASSERT_EQ(help[i].status, 0) << helps[i][0] << " --help: " << help[i].err;
    flags[helps[i][0]] = flags_in_help(help[i].out);
  }
  flags["launch"] = flags_of_launch(launch_line);
  size_t n_flags = 0;
  for (const auto& [sub, fs] : flags) {
    EXPECT_FALSE(fs.empty() && sub != "plot") << sub << " has no flags in its help";
    n_flags += fs.size();
  }
  // The help parses as this test reads it: a few flags of each kind are there.
  const auto has = [&](const std::string& sub, const std::string& name, bool value, bool required) {
    for (const Flag& f : flags[sub])
      if (f.name == name) return f.takes_value == value && f.required == required;
    return false;
  };
  EXPECT_TRUE(has("generate", "--temperature", true, false));
  EXPECT_TRUE(has("prepare", "--input", true, true));
  EXPECT_TRUE(has("prepare", "--force", false, false));
  EXPECT_TRUE(has("plot", "--out", true, false));
  EXPECT_TRUE(has("launch", "--nproc", true, false));
  EXPECT_TRUE(has("launch", "--oversubscribe", false, false));
  EXPECT_GE(n_flags, 40u);

  // A value for each required flag that its check takes and the command then fails on at once:
  // a path that does not exist (an output), else an empty directory, else an empty file.
  const std::vector<std::string> stand_ins = {dir_->file("absent"), dir_->file("empty-dir"), dir_->file("empty-file")};
  std::filesystem::create_directories(stand_ins[1]);
  test::write_text(stand_ins[2], "");
  std::vector<std::vector<std::string>> probes;
  for (const auto& [sub, fs] : flags)
    for (const Flag& f : fs)
      if (f.required)
        for (const std::string& v : stand_ins) probes.push_back({sub, f.name, v});
  const std::vector<CaseResult> probed = run_cases(probes, dir_->file("probe"));
  std::map<std::string, std::string> stand_in;  // "sub --flag" -> value
  for (size_t k = 0; k < probes.size(); ++k) {
    const std::string key = probes[k][0] + " " + probes[k][1];
    if (!stand_in.count(key) && probed[k].err.rfind("bcdtrain: error: " + probes[k][1] + ":", 0) != 0)
      stand_in[key] = probes[k][2];
  }
  // A sub's command line with its required flags (but `except`) given their stand-ins.
  const auto base = [&](const std::string& sub, const std::string& except) {
    std::vector<std::string> words = {sub};
    for (const Flag& f : flags[sub]) {
      if (!f.required || f.name == except) continue;
      EXPECT_TRUE(stand_in.count(sub + " " + f.name)) << sub << " " << f.name << " takes no path: nothing to stand in";
      words.push_back(f.name);
      words.push_back(stand_in[sub + " " + f.name]);
    }
    return words;
  };
  std::vector<std::vector<std::string>> cases;
  std::vector<std::string> what;  // each case as a person would read it
  std::map<std::string, size_t> bare;  // sub -> its case without the flag under test
  for (const auto& [sub, fs] : flags) {
    bare[sub] = cases.size();
    cases.push_back(base(sub, ""));
    what.push_back("bcdtrain " + sub);
    for (const Flag& f : fs) {
      for (const std::string& v : kHostileFlagValues) {
        std::vector<std::string> words = base(sub, f.name);
        if (f.takes_value) words.push_back(f.name), words.push_back(v);
        else words.push_back(f.name + "=" + v);
        cases.push_back(words);
        what.push_back(fmt::format("bcdtrain {} {}{}{}", sub, f.name, f.takes_value ? " " : "=",
                                   printable_line(v).substr(0, 40)));
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<CaseResult> results = run_cases(cases, dir_->file("sweep"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const bool verbose = std::getenv("BCD_HOSTILE_VERBOSE") != nullptr;
  size_t i = 0, refused = 0, accepted = 0;
  for (const auto& [sub, fs] : flags) {
    const CaseResult& bare_result = results[bare[sub]];
    const std::vector<std::string> bare_err = lines_of(bare_result.err);
    EXPECT_TRUE(bare_result.status == 0 || bare_result.status == 2) << what[i] << " (no flags): " << bare_result.err;
    // The stand-ins pass their checks, or every case would end there, before the flag's.
    for (const Flag& f : fs)
      EXPECT_FALSE(f.required && bare_result.err.rfind("bcdtrain: error: " + f.name + ":", 0) == 0)
          << what[i] << ": " << bare_result.err;
    ++i;
    for (const Flag& f : fs) {
      for (const std::string& v : kHostileFlagValues) {
        const CaseResult& r = results[i];
        const std::string& w = what[i++];
        if (verbose) std::printf("%d  %s\n    %s", r.status, w.c_str(), r.err.c_str());
        EXPECT_TRUE(r.status == 0 || r.status == 2) << w << ": exit " << r.status << "\n" << r.err;
        // Nothing a terminal would act on: no control byte but \n, no byte that is not UTF-8.
        EXPECT_EQ(printable(r.err), r.err) << w;
        EXPECT_EQ(printable(r.out), r.out) << w;
        for (const std::string& line : lines_of(r.err)) {
          EXPECT_LE(line.size(), 1024u) << w << ": " << line.substr(0, 200) << "...";
          EXPECT_LE(longest_digit_run(line), 30u) << w << ": " << line;
        }
        if (r.status == 0) {
          ++accepted;
          continue;
        }
        ++refused;
        const std::vector<std::string> err = lines_of(r.err);
        ASSERT_EQ(err.size(), 1u) << w << ": stderr is not one line:\n" << r.err;
        EXPECT_EQ(err[0].rfind("bcdtrain: error: ", 0), 0u) << w << ": " << err[0];
        EXPECT_TRUE(names_flag(err[0], f.name) || names_value(err[0], v) || (bare_err.size() == 1 && err[0] == bare_err[0]))
            << w << ": the refusal names neither the flag nor the value: " << err[0];
      }
    }
  }
  EXPECT_GT(refused, accepted) << "most hostile values are refused";
  std::printf("%zu subcommands, %zu flags, %zu cases (%zu refused, %zu accepted) in %.1f s\n", flags.size(), n_flags,
              cases.size(), refused, accepted, seconds);
}

// The cases of the issue, each in full: one voice, readable bounds.
TEST_F(HostileFlags, RefusalsSayWhatWasExpectedAndWhatCame) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"generate", "--temperature", "-1"}, "--temperature: expected a number >= 0, got -1"},
      {{"generate", "--temperature", "nan"}, "--temperature: expected a number >= 0, got nan"},
      {{"generate", "--top-p", "inf"}, "--top-p: expected a number from 1e-06 to 1, got inf"},
      {{"generate", "--temperature"}, "--temperature: expected a number >= 0, got no value"},
      {{"generate", "--seed", "1e40"}, "--seed: expected an integer >= 0, got 1e40"},
      {{"generate", "--seed", "-1"}, "--seed: expected an integer >= 0, got -1"},
      {{"generate", "--seed", "99999999999999999999"},
       "--seed: expected an integer from 0 to 18446744073709551615, got 99999999999999999999"},
      {{"generate", "--seed", "1", "--seed", "2"}, "--seed: given more than once; expected once"},
      {{"generate", "--max-new-tokens", "abc"}, "--max-new-tokens: expected an integer >= 0, got abc"},
      {{"generate", "--chat-template", ""},
       "--chat-template: expected \"auto\", \"none\", \"plain\", \"llama2\", \"llama3\" or \"chatml\", got \"\""},
      {{"eval", "--batches", "0"}, "--batches: expected a positive integer, got 0"},
      {{"plan", "--nproc", "1025"}, "--nproc: expected an integer from 1 to 1024, got 1025"},
      {{"prepare", "--vocab-size", ""}, "--vocab-size: expected an integer from 64 to 1048576, got \"\""},
      {{"prepare", "--bogus"}, "--bogus: unknown option of `prepare` (see bcdtrain prepare --help)"},
      {{"prepare", "--out", "x"}, "--input: required"},
      {{"prepare", "--force=maybe"}, "--force: expected no value (or true or false), got maybe"},
      {{"iobench", "--path", "x", "--mode", "sideways"}, "--mode: expected read or write, got sideways"},
      {{"iobench", "--path", "x", "--size", "-1"},
       "--size: expected a positive size such as 4096, 4KiB, 1MiB or 1.5GB, got -1"},
      {{"generate", "--seed", "1\x1b[2J"}, "--seed: expected an integer >= 0, got \"1\\x1b[2J\""},
      {{"prepare", "--vocab-size", "0x40"}, "--vocab-size: expected an integer from 64 to 1048576, got 0x40"},
      {{"prepare", "--input", "/no/such/corpus", "--out", "x"},
       "--input: expected a file or directory, got /no/such/corpus (not found)"},
      {{"--bogus"}, "--bogus: unknown option of bcdtrain (see bcdtrain --help)"},
      {{}, "expected a subcommand: train, launch, config, plan, prepare, tokenize, generate, eval, iobench, import, export, plot "
           "(see bcdtrain --help)"},
  };
  std::vector<std::vector<std::string>> lines;
  for (const auto& c : cases) lines.push_back(c.first);
  const std::vector<CaseResult> results = run_cases(lines, dir_->file("known"));
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(results[i].status, 2) << cases[i].second;
    EXPECT_EQ(results[i].err, "bcdtrain: error: " + cases[i].second + "\n");
  }
}

// A bad .jsonl record is quoted in its refusal (a role, JSON's "last read" bytes): written out,
// in one line, whatever bytes it holds.
TEST_F(HostileFlags, ABadRecordsBytesAreWrittenOut) {
  const std::string role = test::error_of([] {
    parse_chat_record(R"({"messages": [{"role": "\u001b[2J\u009bevil", "content": "x"}]})", "f.jsonl", 3);
  });
  EXPECT_NE(role.find("f.jsonl:3: message 1 has role \"\\x1b[2J\\u009bevil\""), std::string::npos) << printable_line(role);
  const std::string bytes = test::error_of([] { parse_chat_record("{\"prompt\": \"a\xff\x1b[31m\n", "f.jsonl", 4); });
  EXPECT_NE(bytes.find("f.jsonl:4: not valid JSON"), std::string::npos) << printable_line(bytes);
  EXPECT_EQ(printable_line(bytes), bytes);
  // Through the binary: one line on stderr, nothing raw.
  const std::string file = dir_->file("bad.jsonl");
  test::write_text(file, "{\"prompt\": \"hi\", \"response\": \"ok\"}\n{\"prompt\": \"a\xff\x1b[31mRED\", \"response\": 1}\n");
  const std::vector<CaseResult> r = run_cases({{"prepare", "--input", file, "--out", dir_->file("out")}}, dir_->file("rec"));
  EXPECT_EQ(r[0].status, 2) << r[0].err;
  EXPECT_EQ(lines_of(r[0].err).size(), 1u) << r[0].err;
  EXPECT_NE(r[0].err.find("bad.jsonl:2: not valid JSON"), std::string::npos) << r[0].err;
  EXPECT_EQ(printable(r[0].err), r[0].err) << printable_line(r[0].err);
}

}  // namespace
}  // namespace bcd
