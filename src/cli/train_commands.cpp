// train: a fresh run, --resume (a checkpoint's config, with the rules for overrides) and
// --resume auto; config: the resolved config or the reference of every key.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "base/config.h"
#include "base/error.h"
#include "base/files.h"
#include "base/printable.h"
#include "cli/command.h"
#include "io/checkpoint.h"
#include "io/dir_lock.h"
#include "model/hf_config.h"
#include "runtime/process_group.h"
#include "runtime/run_setup.h"
#include "runtime/trainer.h"

namespace bcd::cli {
namespace {

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


// What --resume does with overrides, one rule read from each key's declaration (its Resume class
// in base/config.h): keys the checkpoint's state is made of (the model's shape, the BCD units and
// their order, the working dtype, the optimizer, the seed) cannot change: refused, naming them,
// before anything runs. Keys that only change what the remaining steps compute (LR schedule,
// batch, Adam's hyper-parameters, data) are applied with a warning: the run goes on, no longer as
// the uninterrupted one. The rest (where and how it runs: paths, logging, memory, threads,
// device, ranks) are applied silently.
void check_resume_overrides(const std::string& ckpt, const Config& stored, const Config& now) {
  std::map<std::string, Resume> resume;
  for (const auto& [key, r] : resume_classes()) resume[key] = r;
  const auto a = flat_config(stored), b = flat_config(now);
  std::string refused, changed;
  for (const auto& [key, value] : b) {
    auto it = a.find(key);
    const Resume r = resume.at(key);
    if (it == a.end() || it->second == value || r == Resume::kPlacement) continue;
    std::string& list = r == Resume::kFixed ? refused : changed;
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

// train --dry-run: the plan a run of `cfg` makes here, printed as `bcdtrain plan` prints it.
int dry_run(const Config& cfg) {
  const RunPlan rp = plan_this_run(cfg);
  fmt::print("{}", format_run_plan(rp));
  if (!rp.plan.fits) user_error("plan does not fit: {}", rp.plan.why_not);  // as `plan` says it
  return 0;
}

// A run directory another process trains in holds half a run, not what a resume would find in
// it: refused, naming the holder. Rank 0 holds a launched run's lock; the other ranks of that
// run see it held by their own rank 0, and do not look.
void refuse_busy_run_dir(const std::string& dir) {
  if (DistEnv::from_environment().rank == 0) DirLock::check_free(dir, "run directory");
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
  refuse_busy_run_dir(dir);
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
    if (!quiet) fmt::print("{}: finished already ({} steps); nothing to do\n", printable_line(dir), steps);
    return 0;
  };
  if (ckpts.empty()) {  // a run without checkpoints: finished (its summary says), or started afresh
    // A finished run's model.h5 is not trained over on a word the summary cannot give.
    const std::string summary = dir + "/summary.json";
    const auto refuse = [&](const std::string& why) {
      user_error("train --resume auto: {}; its run may have finished: look at {}, then give another train.run_dir, or "
                 "start afresh there with --overwrite instead of --resume auto",
                 why, dir);
    };
    if (fs::exists(summary, ec)) {
      const auto j = nlohmann::json::parse(read_file(summary, "run summary"), nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
        refuse(fmt::format("{}: not a run summary (corrupt: expected a JSON object with a \"status\")", summary));
      if (j["status"] == "finished") {
        const auto steps = j.find("steps");
        return finished(steps != j.end() && steps->is_number_integer() ? steps->get<int64_t>() : int64_t{0});
      }
    } else if (fs::exists(dir + "/model.h5", ec)) {
      refuse(fmt::format("{}/model.h5 without a summary.json (a run that ended after writing its model, or whose "
                         "summary was removed)",
                         dir));
    }
    return exit_code(run_training(given, quiet));
  }
  const int64_t step = newest->attr_int("/", "step");
  if (step >= held.train.steps) return finished(step);
  Config resumed = held;
  resumed.train.run_dir = dir;
  return exit_code(run_training(resumed, quiet, ckpts.back()));
}

}  // namespace

Command add_train(CLI::App& app) {
  struct Flags {
    std::string config_file, resume;
    bool quiet = false, overwrite = false, dry_run = false;
  };
  auto f = std::make_shared<Flags>();
  auto* train = app.add_subcommand("train", "train a model: --config FILE [--section.key=value ...]");
  train->add_option("--config", f->config_file, "TOML config file")->transform(existing_file("a TOML config file"));
  train->add_flag("--quiet", f->quiet, "no progress output");
  train->add_flag("--overwrite", f->overwrite,
                  "a fresh run into a run directory holding an earlier run's checkpoints deletes them (else refused)");
  train->add_flag("--dry-run", f->dry_run,
                  "set the run up to its memory plan (device, data and tokenizer checked as the run checks them), "
                  "print the plan as `bcdtrain plan` does, and stop: nothing is allocated or written");
  train->add_option("--resume", f->resume,
                    "continue exactly from a checkpoint: a run directory (its newest checkpoint) or a checkpoint file; "
                    "the config stored in it applies, with --section.key=value overrides on top. auto (with --config): "
                    "continue train.run_dir's run if it has one of this config, else start it")
      ->transform(pathname("a run directory, a checkpoint file or auto"));
  auto run = [f](const Overrides& overrides) {
    const std::string& resume = f->resume;
    if (f->dry_run) {
      if (!resume.empty()) user_error("train: --dry-run plans a fresh run; it does not go with --resume");
      if (f->config_file.empty() && overrides.empty()) user_error("train: give --config FILE and/or --section.key=value");
      return dry_run(load_config(f->config_file, overrides));
    }
    if (resume == "auto") {
      if (f->overwrite) user_error("train: --overwrite starts afresh; it does not go with --resume auto");
      return train_resume_auto(f->config_file, overrides, f->quiet);
    }
    if (!resume.empty()) {
      if (!f->config_file.empty())
        user_error("train: --resume takes the config stored in the checkpoint; change it with --section.key=value, not --config");
      if (f->overwrite) user_error("train: --overwrite starts afresh; it does not go with --resume");
      if (std::filesystem::is_directory(resume)) refuse_busy_run_dir(resume);
      const std::string ckpt = resolve_checkpoint(resume);
      const std::string stored = CheckpointReader(ckpt).attr_str("/", "config");
      Config cfg = load_config_text(stored, ckpt, overrides);
      check_resume_overrides(ckpt, load_config_text(stored, ckpt, {}), cfg);
      // Resuming a run directory continues in it, wherever it has moved.
      if (std::filesystem::is_directory(resume)) cfg.train.run_dir = resume;
      return exit_code(run_training(cfg, f->quiet, ckpt));
    }
    if (f->config_file.empty() && overrides.empty()) user_error("train: give --config FILE and/or --section.key=value");
    return exit_code(run_training(load_config(f->config_file, overrides), f->quiet, "", f->overwrite));
  };
  return {train, run, true};
}

Command add_config(CLI::App& app) {
  struct Flags {
    std::string config_file;
    bool reference = false;
  };
  auto f = std::make_shared<Flags>();
  auto* config = app.add_subcommand("config", "print the resolved config (file + overrides) as TOML");
  config->add_option("--config", f->config_file, "TOML config file")->transform(existing_file("a TOML config file"));
  config->add_flag("--reference", f->reference, "print the reference of every key (Markdown)");
  auto run = [f](const Overrides& overrides) {
    if (f->reference) {
      fmt::print("{}", config_reference());
    } else {
      Config cfg = load_config(f->config_file, overrides);
      fmt::print("{}", config_to_toml(cfg));
    }
    return 0;
  };
  return {config, run, true};
}

}  // namespace bcd::cli
