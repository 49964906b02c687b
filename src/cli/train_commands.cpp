// train: a fresh run, --resume (a checkpoint's config, with the rules for overrides) and
// --resume auto; config: the resolved config or the reference of every key.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/printable.h"
#include "cli/command.h"
#include "io/checkpoint.h"
#include "io/dir_lock.h"
#include "dist/process_group.h"
#include "runtime/resume.h"
#include "runtime/run_setup.h"
#include "runtime/trainer.h"

namespace bcd::cli {
namespace {

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

// train --resume FILE continues in the run directory of the checkpoint's config (or the
// --train.run_dir given). If that directory holds steps after the checkpoint's, or a finished
// model, the resume would write over them (a copied checkpoint used to replace a finished run's
// model.h5 and its later checkpoints): refused unless --overwrite, which removes the later
// checkpoints first (rank 0; a later --resume of the directory would continue from them).
void claim_for_file_resume(const std::string& ckpt, int64_t step, const std::string& run_dir, bool overwrite) {
  if (DistEnv::from_environment().rank != 0) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return;
  DirLock::check_free(run_dir, "run directory");
  const std::string ckpts = run_dir + "/checkpoints";
  std::vector<std::string> later;
  for (const std::string& c : fs::is_directory(ckpts, ec) ? list_checkpoints(ckpts) : std::vector<std::string>{}) {
    if (checkpoint_file_step(c) > step && !fs::equivalent(c, ckpt, ec)) later.push_back(c);
  }
  const bool model = fs::exists(run_dir + "/model.h5", ec);
  if (later.empty() && !model) return;
  if (!overwrite) {
    std::string what;
    if (!later.empty())
      what = fmt::format("{} checkpoint(s) after step {} (newest {})", later.size(), step,
                         fs::path(later.back()).filename().string());
    if (model) what += std::string(what.empty() ? "" : " and ") + "a finished run's model.h5";
    user_error("train --resume {}: it would continue in {}, which holds {}; give --train.run_dir=DIR to continue "
               "elsewhere, or --overwrite to write over them",
               ckpt, run_dir, what);
  }
  remove_checkpoints(ckpts, later);
}

int exit_code(const TrainSummary& s) { return s.stopped_by_signal ? 128 + s.stopped_by_signal : 0; }

// train --config FILE [overrides] --resume auto: what the run directory holds decides
// (runtime/resume.h); this runs it.
int train_resume_auto(const std::string& config_file, const std::vector<std::string>& overrides, bool quiet) {
  if (config_file.empty() && overrides.empty()) user_error("train: --resume auto needs --config FILE and/or --section.key=value");
  const Config given = load_config(config_file, overrides);
  refuse_busy_run_dir(given.train.run_dir);
  const AutoResume a = decide_resume_auto(given);
  switch (a.kind) {
    case AutoResume::kFinished:
      if (!quiet) fmt::print("{}: finished already ({} steps); nothing to do\n", printable_line(given.train.run_dir), a.steps);
      return 0;
    case AutoResume::kStart: return exit_code(run_training(a.config, quiet));
    case AutoResume::kResume: break;
  }
  return exit_code(run_training(a.config, quiet, a.checkpoint));
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
                  "a fresh run into a run directory holding an earlier run's checkpoints deletes them; --resume FILE "
                  "into a run directory holding later steps or a finished model writes over them (else refused)");
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
      const bool from_dir = std::filesystem::is_directory(resume);
      if (f->overwrite && from_dir)
        user_error("train: --overwrite starts afresh; it does not go with --resume of a run directory");
      if (from_dir) refuse_busy_run_dir(resume);
      const std::string ckpt = resolve_checkpoint(resume);
      const CheckpointReader reader(ckpt);
      const std::string stored = reader.attr_str("/", "config");
      Config cfg = load_config_text(stored, ckpt, overrides);
      const DistEnv env = DistEnv::from_environment();
      const int64_t stored_world = reader.has_attr("/", "world_size") ? reader.attr_int("/", "world_size") : 1;
      check_resume_overrides(ckpt, load_config_text(stored, ckpt, {}), cfg,
                             ResumeRanks{env.rank, env.world_size, static_cast<int>(stored_world)});
      // Resuming a run directory continues in it, wherever it has moved.
      if (from_dir) cfg.train.run_dir = resume;
      const int64_t step = reader.attr_int("/", "step");
      if (!from_dir) claim_for_file_resume(ckpt, step, cfg.train.run_dir, f->overwrite);
      if (!f->quiet && env.rank == 0)
        fmt::print("resuming {} (step {}) in {}\n", printable_line(ckpt), step, printable_line(cfg.train.run_dir));
      return exit_code(run_training(cfg, f->quiet, ckpt));
    }
    if (f->config_file.empty() && overrides.empty()) user_error("train: give --config FILE and/or --section.key=value");
    return exit_code(run_training(load_config(f->config_file, overrides), f->quiet, "", f->overwrite));
  };
  return {train, run, true, {}};
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
  return {config, run, true, {}};
}

}  // namespace bcd::cli
