// bcdtrain command line: subcommands train, prepare, generate, eval, config, plan, iobench,
// import and export (Hugging Face safetensors).
// Bad input anywhere becomes one line on stderr and exit code 2.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "base/bytes.h"
#include "base/files.h"
#include "io/checkpoint.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "io/iobench.h"
#include "io/state_file.h"
#include "data/tokenizer.h"
#include "model/weights.h"
#include "memory/planner.h"
#include "model/hf_config.h"
#include "model/hf_export.h"
#include "model/hf_import.h"
#include "model/hf_weights.h"
#include "model/llama.h"
#include "base/config.h"
#include "base/error.h"
#include "runtime/cuda_torch.h"
#include "runtime/launcher.h"
#include "runtime/run_setup.h"
#include "runtime/sampler.h"
#include "runtime/trainer.h"

namespace {

using namespace bcd;

// CLI11's range checks let "nan" and "inf" through: every floating-point flag takes this too.
const CLI::Validator kFinite(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double x = std::strtod(text.c_str(), &end);
      return std::isfinite(x) ? std::string() : "expected a finite number, got " + text;
    },
    "FINITE");

// "--section.key=value" and "--section.key value" are config overrides; the rest goes to CLI11.
void split_overrides(int argc, char** argv, std::vector<std::string>& rest,
                     std::vector<std::string>& overrides) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const auto eq = a.find('=');
    const auto dot = a.find('.');
    const bool is_override = a.rfind("--", 0) == 0 && dot != std::string::npos && (eq == std::string::npos || dot < eq);
    if (!is_override) {
      rest.push_back(a);
    } else if (eq != std::string::npos) {
      overrides.push_back(a);
    } else {
      if (i + 1 >= argc) user_error("override {}: missing value (expected {}=VALUE)", a, a);
      overrides.push_back(a + "=" + argv[++i]);
    }
  }
}

// What eval and generate run on: a run directory's finished model (--run DIR: model.h5 and the
// tokenizer.model beside it) or a checkpoint's weights (--checkpoint FILE: a step-N.h5, or any
// weights file, with the tokenizer of its run directory or beside it).
struct TrainedModel {
  Config cfg;                  // the config stored with the weights
  std::string weights, tokenizer;
};

TrainedModel trained_model(const char* command, const std::string& run_dir, const std::string& checkpoint) {
  if (run_dir.empty() == checkpoint.empty())
    user_error("{}: give --run DIR (its finished model) or --checkpoint FILE (one checkpoint), one of them", command);
  TrainedModel m;
  if (!run_dir.empty()) {
    m.weights = run_dir + "/model.h5", m.tokenizer = run_dir + "/tokenizer.model";
  } else {
    m.weights = checkpoint;
    if (const std::string of = checkpoint_of_slice(checkpoint); !of.empty())
      user_error("{}: --checkpoint {}: one rank's slice of the checkpoint {}; give the checkpoint file itself", command,
                 checkpoint, of);
    m.tokenizer = init_from_tokenizer(checkpoint);
    if (m.tokenizer.empty())
      user_error("{}: --checkpoint {}: no tokenizer.model beside it or in its run directory", command, checkpoint);
  }
  apply_config_text(m.cfg, read_weights_config(m.weights), m.weights);
  return m;
}

// The weights as an fp32 model (whatever the run trained in).
LlamaModel load_trained_model(const TrainedModel& m) {
  configure_threads(m.cfg.train.threads);
  LlamaModel model(m.cfg.model, torch::kFloat32, std::nullopt);  // the weights are read next
  load_weights(model, m.weights);
  return model;
}

// A config as "section.key" -> its TOML value.
std::map<std::string, std::string> flat_config(Config c) {
  std::map<std::string, std::string> out;
  std::istringstream in(config_to_toml(c));
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}


// Overrides that change what the remaining steps compute make a resumed run differ from the
// uninterrupted one: allowed (e.g. a lower learning rate on purpose), but said.
// What --resume does with overrides, one rule: keys the checkpoint's state is made of (the model's
// shape, the BCD units and their order, the working dtype, the optimizer, the seed) cannot change:
// refused, naming them, before anything runs. Keys that only change what the remaining steps
// compute (LR schedule, batch, Adam's hyper-parameters, data) are applied with a warning: the run
// goes on, no longer as the uninterrupted one. The rest (where and how it runs: paths, logging,
// memory, threads, device, ranks) are applied silently.
void check_resume_overrides(const std::string& ckpt, const Config& stored, const Config& now) {
  const std::set<std::string> fixed = {
      "model.hf_config", "model.vocab_size", "model.d_model", "model.n_layers", "model.n_heads",
      "model.n_kv_heads", "model.d_ff", "model.qkv_bias", "model.tie_embeddings", "train.dtype", "train.seed",
      "optim.impl", "bcd.enabled", "bcd.order", "bcd.fixed_order", "bcd.blocks", "bcd.layers_per_block",
      "bcd.include_embed", "bcd.include_head", "bcd.state_on_switch"};
  const std::set<std::string> harmless = {"train.run_dir", "train.val_every", "train.val_batches",
                                          "train.log_every", "train.threads", "train.checkpoint_every",
                                          "train.keep_checkpoints", "train.device", "train.peak_tflops",
                                          "train.save_model", "train.plot", "model.init_from",
                                          "model.init_std", "model.activation_checkpointing", "memory.",
                                          "sample.", "dist."};
  auto in = [](const std::set<std::string>& set, const std::string& key) {
    for (const auto& h : set)
      if (key == h || (h.back() == '.' && key.rfind(h, 0) == 0)) return true;
    return false;
  };
  const auto a = flat_config(stored), b = flat_config(now);
  std::string refused, changed;
  for (const auto& [key, value] : b) {
    auto it = a.find(key);
    if (it == a.end() || it->second == value || in(harmless, key)) continue;
    std::string& list = in(fixed, key) ? refused : changed;
    list += fmt::format("{}{} ({} -> {})", list.empty() ? "" : ", ", key, it->second, value);
  }
  if (!refused.empty())
    user_error("{}: --resume cannot change {}: the checkpoint's weights, optimizer state and schedule are made of "
               "them; start a new run instead (its weights from this one: --model.init_from={})",
               ckpt, refused, ckpt);
  if (!changed.empty())
    fmt::print(stderr, "bcdtrain: warning: resuming with changed settings: {}; the run continues, but not as the "
                       "uninterrupted run would have\n", changed);
}

int exit_code(const TrainSummary& s) { return s.stopped_by_signal ? 128 + s.stopped_by_signal : 0; }

// train --config FILE [overrides] --resume auto, for scripts that repeat one command line: the run
// directory's run goes on from its newest checkpoint when it holds one of this config, starts
// when it holds none, and is left alone when it has finished. A directory holding a run of
// another config is refused, naming the keys: never overwritten.
int train_resume_auto(const std::string& config_file, const std::vector<std::string>& overrides, bool quiet) {
  namespace fs = std::filesystem;
  if (config_file.empty() && overrides.empty()) user_error("train: --resume auto needs --config FILE and/or --section.key=value");
  const Config given = load_config(config_file, overrides);
  const std::string dir = given.train.run_dir;
  const std::vector<std::string> ckpts = list_checkpoints(dir + "/checkpoints");
  // What says which config the directory's run has: its newest checkpoint, or config.toml.
  std::optional<CheckpointReader> newest;
  std::string held_from, held_text;
  std::error_code ec;
  if (!ckpts.empty()) {
    newest.emplace(ckpts.back());
    held_from = ckpts.back(), held_text = newest->attr_str("/", "config");
  } else if (fs::is_regular_file(dir + "/config.toml", ec)) {
    held_from = dir + "/config.toml", held_text = read_file(held_from, "run config");
  }
  if (held_from.empty()) return exit_code(run_training(given, quiet));  // nothing here yet
  const Config held = load_config_text(held_text, held_from, {});
  // A run stores [model] resolved to the shape it built: compare like with like.
  Config now = given;
  now.model = resolve_model_config(given.model);
  if (now.model.vocab_size == 0) now.model.vocab_size = held.model.vocab_size;  // the dataset's
  const auto a = flat_config(held), b = flat_config(now);
  std::string differ;
  for (const auto& [key, value] : b) {
    const auto it = a.find(key);
    if (key == "train.run_dir" || (it != a.end() && it->second == value)) continue;
    differ += fmt::format("{}{} ({} there, {} given)", differ.empty() ? "" : ", ", key,
                          it == a.end() ? "unset" : it->second, value);
  }
  if (!differ.empty())
    user_error("train --resume auto: {} holds a run of another config ({}: {}); give this one another "
               "train.run_dir, or start afresh there with --overwrite instead of --resume auto",
               dir, held_from, differ);
  const auto finished = [&](int64_t steps) {
    if (!quiet) fmt::print("{}: finished already ({} steps); nothing to do\n", dir, steps);
    return 0;
  };
  if (ckpts.empty()) {  // a run without checkpoints: finished (its summary says), or started afresh
    const std::string summary = dir + "/summary.json";
    if (fs::is_regular_file(summary, ec)) {
      const auto j = nlohmann::json::parse(read_file(summary, "run summary"), nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("status", "") == "finished") return finished(j.value("steps", int64_t{0}));
    }
    return exit_code(run_training(given, quiet));
  }
  const int64_t step = newest->attr_int("/", "step");
  if (step >= held.train.steps) return finished(step);
  Config resumed = held;
  resumed.train.run_dir = dir;
  return exit_code(run_training(resumed, quiet, ckpts.back()));
}

int run(int argc, char** argv) {
  // launch: its own options, then a whole bcdtrain command line for every rank, untouched.
  if (argc > 1 && std::string(argv[1]) == "launch") {
    LaunchOptions lopt;
    const std::vector<std::string> command = parse_launch_args(std::vector<std::string>(argv + 2, argv + argc), lopt);
    return launch_ranks(lopt, command);
  }
  std::vector<std::string> rest, overrides;
  split_overrides(argc, argv, rest, overrides);

  CLI::App app{"bcdtrain: full-parameter LLM training by block coordinate descent"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bcdtrain 0.1");

  // train
  std::string config_file;
  bool quiet = false;
  auto* train = app.add_subcommand("train", "train a model: --config FILE [--section.key=value ...]");
  train->add_option("--config", config_file, "TOML config file")->check(CLI::ExistingFile);
  train->add_flag("--quiet", quiet, "no progress output");
  bool overwrite = false;
  train->add_flag("--overwrite", overwrite,
                  "a fresh run into a run directory holding an earlier run's checkpoints deletes them (else refused)");
  std::string resume;
  train->add_option("--resume", resume,
                    "continue exactly from a checkpoint: a run directory (its newest checkpoint) or a checkpoint file; "
                    "the config stored in it applies, with --section.key=value overrides on top. auto (with --config): "
                    "continue train.run_dir's run if it has one of this config, else start it");

  // launch (handled above; listed here for --help)
  app.add_subcommand("launch", "run a command as N data-parallel ranks: launch --nproc N [--nnodes M --node-rank K "
                               "--master-addr HOST --master-port PORT] train --config FILE ...")
      ->allow_extras();

  // config
  bool reference = false;
  auto* config = app.add_subcommand("config", "print the resolved config (file + overrides) as TOML");
  config->add_option("--config", config_file, "TOML config file")->check(CLI::ExistingFile);
  config->add_flag("--reference", reference, "print the reference of every key (Markdown)");

  // plan
  auto* plan = app.add_subcommand("plan", "memory plan of a run: home tier of every block's state, budgets, fits or not");
  plan->add_option("--config", config_file, "TOML config file")->check(CLI::ExistingFile);
  int plan_ranks = 1;
  plan->add_option("--nproc", plan_ranks, "data-parallel ranks on this machine: they share its RAM")
      ->check(CLI::Range(1, 4096));

  // prepare
  PrepareOptions popt;
  auto* prepare = app.add_subcommand("prepare", "tokenize text files into an HDF5 token dataset");
  prepare->add_option("--input", popt.inputs,
                      "text files or directories (fortune files: one document per % record; .jsonl: {\"text\"} "
                      "records, or instruction records {\"prompt\", \"response\"} or {\"messages\": [...]}, "
                      "trained on responses only)")
      ->required();
  prepare->add_option("--out", popt.out_dir, "output dataset directory")->required();
  prepare->add_option("--tokenizer", popt.tokenizer_model, "existing sentencepiece tokenizer.model (else train BPE)");
  prepare->add_option("--vocab-size", popt.vocab_size, "BPE vocabulary size when training a tokenizer")
      ->check(CLI::Range(64, 1 << 20));
  prepare->add_option("--val-fraction", popt.val_fraction, "fraction of documents held out for validation")
      ->check(kFinite)->check(CLI::Range(0.0, 0.5));
  prepare->add_option("--seed", popt.seed, "seed of the train/validation split");
  prepare->add_flag("--force", popt.force, "replace an existing output directory");
  prepare->add_option("--chat-template", popt.chat_template, "how .jsonl records are laid out: plain, llama2, llama3, chatml")
      ->capture_default_str();
  prepare->add_flag("--skip-bad", popt.skip_bad, "count and skip bad .jsonl records instead of stopping at the first");
  prepare->add_option("--memory-mb", popt.memory_mb, "memory prepare may hold, whatever the corpus size (MiB)")
      ->capture_default_str()->check(CLI::Range(int64_t{16}, int64_t{1} << 30));
  prepare->add_option("--threads", popt.threads, "tokenizing threads (0: every core)")
      ->capture_default_str()->check(CLI::Range(0, 4096));

  // generate
  std::string run_dir;
  std::vector<std::string> prompts;
  SampleOptions so;
  uint64_t seed = 1;
  std::string from_checkpoint;
  auto* generate = app.add_subcommand("generate", "sample text from a trained run or a checkpoint");
  generate->add_option("--run", run_dir, "run directory (holds model.h5 and tokenizer.model)");
  generate->add_option("--checkpoint", from_checkpoint, "a checkpoint (RUN_DIR/checkpoints/step-N.h5) instead of --run");
  generate->add_option("--prompt", prompts, "prompt text (repeatable)");
  generate->add_option("--max-new-tokens", so.max_new_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  generate->add_option("--temperature", so.temperature, "sampling temperature; 0 = greedy")
      ->check(kFinite)
      ->check(CLI::NonNegativeNumber);
  generate->add_option("--top-k", so.top_k, "keep the k most likely tokens; 0 = off")->check(CLI::NonNegativeNumber);
  generate->add_option("--top-p", so.top_p, "nucleus mass; 1 = off")->check(kFinite)->check(CLI::Range(1e-6, 1.0));
  generate->add_option("--seed", seed, "sampling seed");
  std::string gen_chat;
  generate->add_option("--chat-template", gen_chat,
                       "prompts are user turns laid out by this template (plain, llama2, llama3, chatml; none = text to "
                       "continue); default: the run's [sample] chat_template");

  // eval
  std::string data_dir;
  int64_t eval_batches = 1 << 30, eval_batch_size = 0;
  auto* eval = app.add_subcommand("eval", "validation loss and perplexity of a trained run or a checkpoint");
  eval->add_option("--run", run_dir, "run directory (its finished model.h5)");
  eval->add_option("--checkpoint", from_checkpoint, "a checkpoint (RUN_DIR/checkpoints/step-N.h5) instead of --run");
  eval->add_option("--data", data_dir, "dataset directory (default: the run's [data] path)");
  eval->add_option("--batches", eval_batches, "at most this many batches (default: the whole split)")
      ->check(CLI::PositiveNumber);
  eval->add_option("--batch-size", eval_batch_size, "sequences per batch (default: the run's)")
      ->check(CLI::PositiveNumber);
  int64_t eval_seq_len = 0;
  eval->add_option("--seq-len", eval_seq_len,
                   "tokens per sequence (default: the run's seq_len; an imported model's is a default, so give it)")
      ->check(CLI::PositiveNumber);

  // iobench
  IoBenchOptions iopt;
  std::string io_size = "2GiB", io_block = "1MiB", io_mode = "read", io_engine = "auto";
  bool io_buffered = false;
  auto* iobench = app.add_subcommand("iobench", "sequential read/write throughput of a drive through the I/O engine");
  iobench->add_option("--path", iopt.path, "directory on the drive under test")->required();
  iobench->add_option("--size", io_size, "file size (units: 4KiB, 1MiB, 2GiB, 1.5GB)");
  iobench->add_option("--block-size", io_block, "bytes per request");
  iobench->add_option("--queue-depth", iopt.queue_depth, "requests in flight")->check(CLI::Range(1, 4096));
  iobench->add_option("--mode", io_mode, "read or write");
  iobench->add_option("--engine", io_engine, "auto (io_uring, else threads), uring or threads");
  iobench->add_option("--loops", iopt.loops, "passes over the file (at least)")->check(CLI::PositiveNumber);
  iobench->add_option("--seconds", iopt.seconds, "keep making passes until this many seconds went by")
      ->check(kFinite)
      ->check(CLI::NonNegativeNumber);
  iobench->add_flag("--buffered", io_buffered, "go through the page cache instead of O_DIRECT");

  // import / export (Hugging Face)
  std::string hf_dir, import_out;
  auto* import_cmd = app.add_subcommand("import", "convert a Hugging Face model directory (config.json + safetensors) into a weights file");
  import_cmd->add_option("--hf", hf_dir, "HF model directory (llama, mistral, qwen2)")->required();
  import_cmd->add_option("--out", import_out, "weights file to write (e.g. runs/llama/model.h5)")->required();
  bool import_force = false;
  import_cmd->add_flag("--force", import_force, "replace an existing --out file");
  HfExportOptions xopt;
  std::string shard_size = "5GB";
  auto* export_cmd = app.add_subcommand("export", "write a weights file or checkpoint as a Hugging Face model directory");
  export_cmd->add_option("--checkpoint", xopt.checkpoint, "weights file or checkpoint (.h5), e.g. RUN_DIR/model.h5")->required();
  export_cmd->add_option("--hf", xopt.out_dir, "output directory (created; an existing one must be empty or a previous export)")
      ->required();
  export_cmd->add_option("--dtype", xopt.dtype, "bf16, fp16 or fp32 (default: the dtype it was imported in, else bf16)");
  export_cmd->add_option("--shard-size", shard_size, "largest safetensors file before sharding (units: 5GB, 2GiB)");

  if (!rest.empty() && rest[0][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == rest[0];
    }
    if (!known) user_error("unknown subcommand '{}' (expected one of: {})", rest[0], names);
  }
  try {
    std::vector<std::string> args(rest.rbegin(), rest.rend());  // CLI11 takes them reversed
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "bcdtrain: {}\n", e.what());
    return 2;
  }
  if (!overrides.empty() && !train->parsed() && !config->parsed() && !plan->parsed())
    user_error("config overrides ({}) are only accepted by train, config and plan", overrides.front());

  if (train->parsed()) {
    if (resume == "auto") {
      if (overwrite) user_error("train: --overwrite starts afresh; it does not go with --resume auto");
      return train_resume_auto(config_file, overrides, quiet);
    }
    if (!resume.empty()) {
      if (!config_file.empty())
        user_error("train: --resume takes the config stored in the checkpoint; change it with --section.key=value, not --config");
      if (overwrite) user_error("train: --overwrite starts afresh; it does not go with --resume");
      const std::string ckpt = resolve_checkpoint(resume);
      const std::string stored = CheckpointReader(ckpt).attr_str("/", "config");
      Config cfg = load_config_text(stored, ckpt, overrides);
      check_resume_overrides(ckpt, load_config_text(stored, ckpt, {}), cfg);
      // Resuming a run directory continues in it, wherever it has moved.
      if (std::filesystem::is_directory(resume)) cfg.train.run_dir = resume;
      return exit_code(run_training(cfg, quiet, ckpt));
    }
    if (config_file.empty() && overrides.empty()) user_error("train: give --config FILE and/or --section.key=value");
    return exit_code(run_training(load_config(config_file, overrides), quiet, "", overwrite));
  } else if (config->parsed()) {
    if (reference) {
      fmt::print("{}", config_reference());
    } else {
      Config cfg = load_config(config_file, overrides);
      fmt::print("{}", config_to_toml(cfg));
    }
  } else if (plan->parsed()) {
    if (config_file.empty() && overrides.empty()) user_error("plan: give --config FILE and/or --section.key=value");
    Config cfg = load_config(config_file, overrides);
    ModelConfig mc = resolve_model_config(cfg.model);
    if (mc.vocab_size == 0) {
      if (cfg.data.first().empty())
        user_error("plan: [model] vocab_size is 0 and [data] path is empty: set model.vocab_size");
      mc.vocab_size = TokenDataset::open(cfg.data.first()).vocab_size();
    }
    // A GPU run's compute_bytes = auto is the GPU's memory, when one is usable here.
    const torch::Device device = cfg.train.device != "cpu" ? resolve_device("auto") : torch::Device(torch::kCPU);
    if (device.is_cuda()) apply_device_budget(cfg.memory, device);
    share_machine_memory(cfg.memory, device, plan_ranks);  // each of the ranks on this machine
    const int shards = plan_ranks > 1 && cfg.dist.shard_state && cfg.optim.impl == "fused" ? plan_ranks : 1;
    // A run for the GPU is planned as it will run there, GPU at hand or not (a login node).
    const bool on_cuda = device.is_cuda() || cfg.train.device == "cuda";
    const bool fused = !attention_keeps_scores(on_cuda);
    // The weight stream's rates: [memory] stream_gbps / stream_tflops, else this GPU's (a known
    // one's peak), else a 4090-class default.
    const std::optional<double> peak =
        device.is_cuda() ? gpu_peak_tflops(cuda_device_name(cuda_index(device)), cfg.train.dtype) : std::nullopt;
    const StreamRates rates = resolve_stream_rates(cfg.memory, cfg.train, on_cuda, peak);
    const MemoryPlan p = plan_memory(mc, cfg.bcd, cfg.train, cfg.memory, shards, fused, plan_ranks, rates);
    if (plan_ranks > 1)
      fmt::print("per rank, {} ranks on this machine ({})\n", plan_ranks,
                 shards > 1 ? "block state sharded: each rank holds 1/" + std::to_string(shards)
                            : "dist.shard_state = false: each rank holds all the block state");
    fmt::print("{}", format_plan(p));
    if (!p.fits) user_error("plan does not fit: {}", p.why_not);
  } else if (prepare->parsed()) {
    PrepareReport r = prepare_dataset(popt);
    fmt::print("prepared {}: {} train docs / {} tokens, {} val docs / {} tokens, vocab {}, unigram val loss {:.4f}\n",
               popt.out_dir, r.n_docs_train, r.n_tokens_train, r.n_docs_val, r.n_tokens_val, r.vocab_size,
               r.unigram_val_loss);
    if (r.instruct)
      fmt::print("instruction data ({} template): the loss counts {} train / {} val tokens (responses){}\n",
                 popt.chat_template, r.n_targets_train, r.n_targets_val,
                 r.n_bad_records ? fmt::format("; {} bad record(s) skipped", r.n_bad_records) : "");
    else if (r.n_bad_records)
      fmt::print("{} bad record(s) skipped\n", r.n_bad_records);
    if (r.n_docs_cut)
      fmt::print("{} document(s) longer than {} cut into pieces (--memory-mb decides)\n", r.n_docs_cut,
                 format_bytes(static_cast<uint64_t>(popt.memory_mb) << 14));
    fmt::print("tokenized {} of text in {:.1f}s: {:.0f} tokens/s\n", format_bytes(r.bytes_read), r.tokenize_seconds,
               static_cast<double>(r.n_tokens_train + r.n_tokens_val) / std::max(r.tokenize_seconds, 1e-9));
  } else if (generate->parsed()) {
    const TrainedModel m = trained_model("generate", run_dir, from_checkpoint);
    const Config& cfg = m.cfg;
    LlamaModel model = load_trained_model(m);
    Tokenizer tok = Tokenizer::load(m.tokenizer);
    if (tok.vocab_size() > cfg.model.vocab_size)
      user_error("generate: {} has {} pieces, more than the model's vocab_size {}", m.tokenizer, tok.vocab_size(),
                 cfg.model.vocab_size);
    if (prompts.empty()) prompts = cfg.sample.prompts;
    if (prompts.empty()) user_error("generate: no --prompt given and the run's [sample] prompts are empty");
    const std::optional<ChatTemplate> chat =
        sample_chat_template(gen_chat.empty() ? cfg.sample.chat_template : gen_chat, cfg.data.first());
    for (size_t i = 0; i < prompts.size(); ++i) {
      fmt::print("--- sample {} ---\n{}\n", i + 1,
                 chat ? generate_chat(model, tok, *chat, prompts[i], so, seed + i)
                      : generate_text(model, tok, prompts[i], so, seed + i));
      std::fflush(stdout);
    }
  } else if (iobench->parsed()) {
    iopt.size = parse_bytes(io_size);
    iopt.block_size = parse_bytes(io_block);
    iopt.mode = parse_io_op(io_mode);
    iopt.engine = parse_engine_kind(io_engine);
    iopt.direct = !io_buffered;
    return run_iobench(iopt);
  } else if (import_cmd->parsed()) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(import_out, ec)) && !import_force)
      user_error("{}: already exists (pass --force to replace it)", import_out);
    const HfImportSummary s = import_hf_to_file(hf_dir, import_out);
    fmt::print("imported {} ({}, {} parameters, {}, {} safetensors file{}) into {}\n", hf_dir, s.model_type, s.n_params,
               s.info.dtype, s.info.files.size(), s.info.files.size() == 1 ? "" : "s", import_out);
    if (s.tokenizer.empty())
      fmt::print("no tokenizer.model in {}: give `prepare` a sentencepiece tokenizer that matches the model\n", hf_dir);
    else
      fmt::print("copied tokenizer.model to {}\n", s.tokenizer);
  } else if (export_cmd->parsed()) {
    xopt.shard_bytes = parse_bytes(shard_size);
    if (xopt.shard_bytes == 0) user_error("--shard-size: expected a positive size, got \"{}\"", shard_size);
    if (!xopt.dtype.empty()) parse_short_dtype(xopt.dtype, "--dtype");
    const HfExportReport r = export_hf(xopt);
    fmt::print("exported {} as {} ({}, {:.3f} GB of tensors) to {}:\n", xopt.checkpoint, r.model_type, r.dtype,
               static_cast<double>(r.tensor_bytes) / 1e9, xopt.out_dir);
    for (const auto& f : r.files) fmt::print("  {}\n", f);
  } else if (eval->parsed()) {
    const TrainedModel m = trained_model("eval", run_dir, from_checkpoint);
    const Config& cfg = m.cfg;
    LlamaModel model = load_trained_model(m);
    TokenDataset ds = TokenDataset::open(data_dir.empty() ? cfg.data.first() : data_dir);
    // A loss on tokens of another tokenizer means nothing: the dataset must use the run's.
    const std::string& run_tok = m.tokenizer;
    if (read_file(ds.tokenizer_path(), "tokenizer") != read_file(run_tok, "tokenizer"))
      user_error("eval: {} was tokenized with {}, not with the run's {}: its loss would mean nothing "
                 "(prepare it with --tokenizer {})",
                 ds.dir(), ds.tokenizer_path(), run_tok, run_tok);
    if (ds.vocab_size() > cfg.model.vocab_size)
      user_error("eval: {} has vocab_size {}, more than the model's {}", ds.dir(), ds.vocab_size(),
                 cfg.model.vocab_size);
    const int64_t bs = eval_batch_size > 0 ? eval_batch_size : cfg.train.batch_size;
    const int64_t seq = eval_seq_len > 0 ? eval_seq_len : cfg.train.seq_len;
    if (seq > cfg.model.max_seq_len)
      user_error("eval: sequences of {} tokens{} are longer than the model's max_seq_len {}: give --seq-len {} or less", seq,
                 eval_seq_len > 0 ? "" : " (the run's train.seq_len)", cfg.model.max_seq_len, cfg.model.max_seq_len);
    // Forward only: one layer's transients and the logits at a time (the planner's estimate).
    TrainConfig at_bs = cfg.train;
    at_bs.batch_size = bs;
    at_bs.seq_len = seq;
    UnitShape top;
    top.first_layer = static_cast<int>(cfg.model.n_layers) - 1;
    const uint64_t need = estimate_activation_bytes(cfg.model, at_bs, top), avail = meminfo_bytes("MemAvailable");
    if (need > avail)
      user_error("eval: a batch of {} sequences of {} tokens needs about {} of activations, {} of memory is "
                 "available: give a smaller --batch-size",
                 bs, seq, format_bytes(need), format_bytes(avail));
    const double loss = evaluate_val_loss(model, ds, bs, seq, eval_batches);
    fmt::print("{{\"val_loss\": {:.6f}, \"perplexity\": {:.4f}, \"unigram_val_loss\": {:.6f}}}\n", loss,
               std::exp(loss), ds.unigram_val_loss());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // libgomp reads OMP_WAIT_POLICY once, when it is loaded. Its default (spin for a while after
  // every parallel region) steals the second core from the BLAS threads and halves CPU training
  // speed on small machines, so unless the user chose a policy we set PASSIVE and start again.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("BCD_NO_REEXEC")) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
  }
  try {
    return run(argc, argv);
  } catch (const bcd::UserError& e) {
    fmt::print(stderr, "bcdtrain: error: {}\n", e.what());
    if (bcd::state_file_abandoned()) {  // skip HDF5's exit handler: it would flush that file again
      std::fflush(nullptr);
      ::_exit(2);
    }
    return 2;
  } catch (const bcd::InternalError& e) {
    fmt::print(stderr, "bcdtrain: internal error: {}\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    fmt::print(stderr, "bcdtrain: torch error: {}\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bcdtrain: error: {}\n", e.what());
    return 1;
  }
}
