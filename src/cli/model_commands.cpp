// The commands on a trained model: generate and eval (a run's finished model or a checkpoint),
// import and export (Hugging Face directories).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/bytes.h"
#include "base/config.h"
#include "base/error.h"
#include "base/files.h"
#include "base/printable.h"
#include "cli/command.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "model/hf_config.h"
#include "model/hf_export.h"
#include "model/hf_import.h"
#include "model/hf_weights.h"
#include "model/llama.h"
#include "model/weights.h"
#include "runtime/run_plan.h"
#include "runtime/run_setup.h"
#include "runtime/sampler.h"
#include "runtime/trainer.h"

namespace bcd::cli {
namespace {

// What eval and generate run on: a run directory's finished model (--run DIR: model.h5 and the
// tokenizer beside it, tokenizer.json or tokenizer.model) or a checkpoint's weights (--checkpoint FILE: a step-N.h5, or any
// weights file, with the tokenizer of its run directory or beside it).
struct TrainedModel {
  Config cfg;                  // the config stored with the weights
  std::string weights, tokenizer;
};

TrainedModel trained_model(const char* command, const std::string& run_dir, const std::string& checkpoint) {
  if (run_dir.empty() == checkpoint.empty())
    user_error("{}: give --run DIR (its finished model) or --checkpoint FILE (one checkpoint), one of them", command);
  namespace fs = std::filesystem;
  std::error_code ec;
  TrainedModel m;
  if (!run_dir.empty()) {
    if (!fs::is_directory(run_dir, ec))
      user_error("{}: --run {}: {}", command, run_dir,
                 fs::exists(run_dir, ec) ? "not a directory (--checkpoint takes a weights file)" : "no such directory");
    m.weights = run_dir + "/model.h5";
    if (!fs::exists(m.weights, ec)) {
      const std::vector<std::string> saved = list_checkpoints(run_dir + "/checkpoints");
      if (saved.empty())
        user_error("{}: --run {}: no model.h5 and no checkpoints/step-N.h5 in it: not a run directory, or a run "
                   "that saved nothing",
                   command, run_dir);
      user_error("{}: --run {}: no model.h5 (the run has not finished); its latest checkpoint: --checkpoint {}",
                 command, run_dir, saved.back());
    }
    m.tokenizer = find_tokenizer(run_dir);
    if (m.tokenizer.empty())
      user_error("{}: --run {}: no tokenizer.json or tokenizer.model in it (a run directory keeps its dataset's)", command,
                 run_dir);
  } else {
    if (fs::is_directory(checkpoint, ec))
      user_error("{}: --checkpoint {}: a directory; give a weights file (RUN_DIR/checkpoints/step-N.h5, "
                 "RUN_DIR/model.h5), or --run DIR for a run's finished model",
                 command, checkpoint);
    if (!fs::exists(checkpoint, ec)) user_error("{}: --checkpoint {}: no such file", command, checkpoint);
    m.weights = checkpoint;
    if (const std::string of = checkpoint_of_slice(checkpoint); !of.empty())
      user_error("{}: --checkpoint {}: one rank's slice of the checkpoint {}; give the checkpoint file itself", command,
                 checkpoint, of);
    m.tokenizer = init_from_tokenizer(checkpoint);
    if (m.tokenizer.empty())
      user_error("{}: --checkpoint {}: no tokenizer (tokenizer.json or tokenizer.model) beside it or in its run directory",
                 command, checkpoint);
  }
  apply_config_text(m.cfg, read_weights_config(m.weights), m.weights);
  return m;
}

// The weights as an fp32 model (whatever the run trained in).
LlamaModel load_trained_model(const TrainedModel& m) {
  configure_compute(m.cfg.train);
  LlamaModel model(m.cfg.model, torch::kFloat32, std::nullopt);  // the weights are read next
  load_weights(model, m.weights);
  return model;
}

}  // namespace

Command add_generate(CLI::App& app) {
  struct Flags {
    std::string run_dir, from_checkpoint, chat;
    std::vector<std::string> prompts;
    SampleOptions so;
    uint64_t seed = 1;
  };
  auto f = std::make_shared<Flags>();
  auto* generate = app.add_subcommand("generate", "sample text from a trained run or a checkpoint");
  generate->add_option("--run", f->run_dir, "run directory (holds model.h5 and its tokenizer)")
      ->transform(pathname("a run directory"));
  generate->add_option("--checkpoint", f->from_checkpoint, "a checkpoint (RUN_DIR/checkpoints/step-N.h5) instead of --run")
      ->transform(pathname("a checkpoint file"));
  generate->add_option("--prompt", f->prompts, "prompt text (repeatable)")->transform(text("a prompt"));
  generate->add_option("--max-new-tokens", f->so.max_new_tokens, "tokens to generate")->transform(integer<int64_t>(0));
  generate->add_option("--temperature", f->so.temperature, "sampling temperature; 0 = greedy")->transform(number(0));
  generate->add_option("--top-k", f->so.top_k, "keep the k most likely tokens; 0 = off")->transform(integer<int64_t>(0));
  generate->add_option("--top-p", f->so.top_p, "nucleus mass; 1 = off")->transform(number(1e-6, 1.0));
  generate->add_option("--seed", f->seed, "sampling seed")->transform(integer<uint64_t>());
  generate->add_option("--chat-template", f->chat,
                       "prompts are user turns laid out by this template (plain, llama2, llama3, chatml; none = text to "
                       "continue); default: the run's [sample] chat_template")
      ->transform(choice([](const std::string& name) {
        if (!parse_choice<SampleChat>(name)) throw UserError(name);
      }, choice_list<SampleChat>()));
  auto run = [f](const Overrides&) {
    const TrainedModel m = trained_model("generate", f->run_dir, f->from_checkpoint);
    const Config& cfg = m.cfg;
    LlamaModel model = load_trained_model(m);
    Tokenizer tok = Tokenizer::load(m.tokenizer);
    if (tok.vocab_size() > cfg.model.vocab_size)
      user_error("generate: {} has {} pieces, more than the model's vocab_size {}", m.tokenizer, tok.vocab_size(),
                 cfg.model.vocab_size);
    // Past max_seq_len the model only slides over its own output; an unbounded count (a typo,
    // 1e12) would print nothing for hours.
    if (f->so.max_new_tokens > cfg.model.max_seq_len)
      user_error("generate: --max-new-tokens {} exceeds the model's max_seq_len {} (at most that many tokens)",
                 f->so.max_new_tokens, cfg.model.max_seq_len);
    std::vector<std::string> prompts = f->prompts;
    if (prompts.empty()) prompts = cfg.sample.prompts;
    if (prompts.empty()) user_error("generate: no --prompt given and the run's [sample] prompts are empty");
    SampleChat setting = cfg.sample.chat_template;
    if (!f->chat.empty()) {
      const std::optional<SampleChat> given = parse_choice<SampleChat>(f->chat);
      if (!given) user_error("generate: --chat-template: expected {}, got \"{}\"", choice_list<SampleChat>(), f->chat);
      setting = *given;
    }
    const std::optional<ChatTemplate> chat = sample_chat_template(setting, cfg.data.first());
    // Each piece as its token is drawn, in whole characters, escaped: a prompt, and a model, may
    // hold a terminal's control sequences.
    const TextSink show = [](std::string_view piece) {
      if (piece.empty()) return;
      fmt::print("{}", printable(piece));
      std::fflush(stdout);
    };
    for (size_t i = 0; i < prompts.size(); ++i) {
      fmt::print("--- sample {} ---\n", i + 1);
      if (chat) generate_chat(model, tok, *chat, prompts[i], f->so, f->seed + i, show);
      else generate_text(model, tok, prompts[i], f->so, f->seed + i, show);
      fmt::print("\n");
      std::fflush(stdout);
    }
    return 0;
  };
  return {generate, run, false, {}};
}

Command add_eval(CLI::App& app) {
  struct Flags {
    std::string run_dir, from_checkpoint, data_dir;
    int64_t batches = 1 << 30, batch_size = 0, seq_len = 0;
  };
  auto f = std::make_shared<Flags>();
  auto* eval = app.add_subcommand("eval", "validation loss and perplexity of a trained run or a checkpoint");
  eval->add_option("--run", f->run_dir, "run directory (its finished model.h5)")->transform(pathname("a run directory"));
  eval->add_option("--checkpoint", f->from_checkpoint, "a checkpoint (RUN_DIR/checkpoints/step-N.h5) instead of --run")
      ->transform(pathname("a checkpoint file"));
  eval->add_option("--data", f->data_dir, "dataset directory (default: the run's [data] path)")
      ->transform(pathname("a dataset directory"));
  eval->add_option("--batches", f->batches, "at most this many batches (default: the whole split)")
      ->transform(integer<int64_t>(1));
  eval->add_option("--batch-size", f->batch_size, "sequences per batch (default: the run's)")
      ->transform(integer<int64_t>(1));
  eval->add_option("--seq-len", f->seq_len,
                   "tokens per sequence (default: the run's seq_len; an imported model's is a default, so give it)")
      ->transform(integer<int64_t>(1));
  auto run = [f](const Overrides&) {
    const TrainedModel m = trained_model("eval", f->run_dir, f->from_checkpoint);
    const Config& cfg = m.cfg;
    LlamaModel model = load_trained_model(m);
    TokenDataset ds = TokenDataset::open(f->data_dir.empty() ? cfg.data.first() : f->data_dir);
    // A loss on tokens of another tokenizer means nothing: the dataset must use the run's.
    const std::string& run_tok = m.tokenizer;
    if (!tokenizer_matches(ds.tokenizer_path(), std::filesystem::path(run_tok).parent_path().string()))
      user_error("eval: {} was tokenized with {}, not with the run's {}: its loss would mean nothing "
                 "(prepare it with --tokenizer {})",
                 ds.dir(), ds.tokenizer_path(), run_tok, run_tok);
    if (ds.vocab_size() > cfg.model.vocab_size)
      user_error("eval: {} has vocab_size {}, more than the model's {}", ds.dir(), ds.vocab_size(),
                 cfg.model.vocab_size);
    const int64_t bs = f->batch_size > 0 ? f->batch_size : cfg.train.batch_size;
    const int64_t seq = f->seq_len > 0 ? f->seq_len : cfg.train.seq_len;
    if (seq > cfg.model.max_seq_len)
      user_error("eval: sequences of {} tokens{} are longer than the model's max_seq_len {}: give --seq-len {} or less", seq,
                 f->seq_len > 0 ? "" : " (the run's train.seq_len)", cfg.model.max_seq_len, cfg.model.max_seq_len);
    check_eval_fits(cfg.model, cfg.train, bs, seq);
    const double loss = evaluate_val_loss(model, ds, bs, seq, f->batches);
    fmt::print("{{\"val_loss\": {:.6f}, \"perplexity\": {:.4f}, \"unigram_val_loss\": {:.6f}}}\n", loss,
               std::exp(loss), ds.unigram_val_loss());
    return 0;
  };
  return {eval, run, false, {}};
}

Command add_import(CLI::App& app) {
  struct Flags {
    std::string hf_dir, out;
    bool force = false;
  };
  auto f = std::make_shared<Flags>();
  auto* import_cmd = app.add_subcommand("import", "convert a Hugging Face model directory (config.json + safetensors) into a weights file");
  std::string families;  // every model_type the importer reads (model/hf_config.h)
  for (const char* name : Choices<HfFamily>::names) families += (families.empty() ? "" : ", ") + std::string(name);
  import_cmd->add_option("--hf", f->hf_dir, "HF model directory (config.json model_type: " + families + ")")
      ->required()
      ->transform(existing_dir("a Hugging Face model directory"));
  import_cmd->add_option("--out", f->out, "weights file to write (e.g. runs/llama/model.h5)")
      ->required()
      ->transform(pathname("a file path"));
  import_cmd->add_flag("--force", f->force, "replace an existing --out file");
  auto run = [f](const Overrides&) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(f->out, ec)) && !f->force)
      user_error("{}: already exists (pass --force to replace it)", f->out);
    const HfImportSummary s = import_hf_to_file(f->hf_dir, f->out);
    fmt::print("imported {} ({}, {} parameters, {}, {} safetensors file{}) into {}\n", printable_line(f->hf_dir), s.model_type,
               s.n_params, s.info.dtype, s.info.files.size(), s.info.files.size() == 1 ? "" : "s", printable_line(f->out));
    if (s.tokenizer_files.empty()) {
      fmt::print("no tokenizer.json or tokenizer.model in {}: give `prepare` the tokenizer that matches the model\n",
                 printable_line(f->hf_dir));
    } else {
      std::string names;
      for (const std::string& file : s.tokenizer_files)
        names += (names.empty() ? "" : ", ") + std::filesystem::path(file).filename().string();
      fmt::print("copied {} to {}\n", printable_line(names),
                 printable_line(std::filesystem::path(s.tokenizer).parent_path().string()));
    }
    return 0;
  };
  return {import_cmd, run, false, {}};
}

Command add_export(CLI::App& app) {
  struct Flags {
    HfExportOptions xopt;
    std::string shard_size = "5GB";
  };
  auto f = std::make_shared<Flags>();
  auto* export_cmd = app.add_subcommand("export", "write a weights file or checkpoint as a Hugging Face model directory");
  export_cmd->add_option("--checkpoint", f->xopt.checkpoint, "weights file or checkpoint (.h5), e.g. RUN_DIR/model.h5")
      ->required()
      ->transform(pathname("a weights file or checkpoint"));
  export_cmd->add_option("--hf", f->xopt.out_dir, "output directory (created; an existing one must be empty or a previous export)")
      ->required()
      ->transform(pathname("a directory"));
  export_cmd->add_option("--dtype", f->xopt.dtype, "bf16, fp16 or fp32 (default: the dtype it was imported in, else bf16)")
      ->transform(choice([](const std::string& name) { parse_short_dtype(name, "--dtype"); }, "bf16, fp16 or fp32"));
  export_cmd->add_option("--max-shard-size,--shard-size", f->shard_size,
                         "largest safetensors file before sharding into model-0000i-of-0000N.safetensors with "
                         "model.safetensors.index.json, as transformers' save_pretrained (default 5GB; units: 5GB, 2GiB)")
      ->transform(byte_size(1));
  auto run = [f](const Overrides&) {
    HfExportOptions& xopt = f->xopt;
    xopt.shard_bytes = parse_bytes(f->shard_size);
    if (xopt.shard_bytes == 0) user_error("--max-shard-size: expected a positive size, got \"{}\"", f->shard_size);
    if (!xopt.dtype.empty()) parse_short_dtype(xopt.dtype, "--dtype");
    const HfExportReport r = export_hf(xopt);
    fmt::print("exported {} as {} ({}, {:.3f} GB of tensors) to {}:\n", printable_line(xopt.checkpoint), r.model_type, r.dtype,
               static_cast<double>(r.tensor_bytes) / 1e9, printable_line(xopt.out_dir));
    for (const auto& file : r.files) fmt::print("  {}\n", printable_line(file));
    if (r.tokenizer.empty())
      fmt::print("no tokenizer beside {} (nor in its run directory): the export has none; copy the model's "
                 "tokenizer.json (with tokenizer_config.json) into {} before loading it elsewhere\n",
                 printable_line(xopt.checkpoint), printable_line(xopt.out_dir));
    return 0;
  };
  return {export_cmd, run, false, {}};
}

}  // namespace bcd::cli
