// The resume policies (runtime/resume.h).
#include "runtime/resume.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "base/error.h"
#include "base/files.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "model/hf_config.h"
#include "report/summary.h"

namespace bcd {

namespace {

namespace fs = std::filesystem;

// A config as "section.key" -> its value as config.toml writes it.
std::map<std::string, std::string> flat_config(Config c) {
  std::map<std::string, std::string> out;
  for (auto& [key, value] : config_values(c)) out[key] = std::move(value);
  return out;
}

}  // namespace

void check_resume_overrides(const std::string& ckpt, const Config& stored, const Config& now, const ResumeRanks& ranks) {
  std::map<std::string, Resume> resume;
  for (const auto& [key, r] : resume_classes()) resume[key] = r;
  const auto a = flat_config(stored), b = flat_config(now);
  // Another rank count with the batch rescaled to the same global batch trains on the same
  // windows in the same steps: where the run goes on, not what it computes.
  const bool same_global_batch =
      stored.train.batch_size * ranks.stored_world == now.train.batch_size * ranks.world;
  std::string refused, changed;
  for (const auto& [key, value] : b) {
    auto it = a.find(key);
    const Resume r = resume.at(key);
    if (it == a.end() || it->second == value || r == Resume::kPlacement) continue;
    if (key == "train.batch_size" && same_global_batch) continue;
    std::string& list = r == Resume::kFixed ? refused : changed;
    list += fmt::format("{}{} ({} -> {})", list.empty() ? "" : ", ", key, it->second, value);
  }
  if (!refused.empty())
    user_error("{}: --resume cannot change {}: the checkpoint's weights, optimizer state and schedule are made of "
               "them; start a new run instead (its weights from this one: --model.init_from={})",
               ckpt, refused, ckpt);
  if (!changed.empty() && ranks.rank == 0)  // one warning for the run, not one per rank
    fmt::print(stderr, "bcdtrain: warning: resuming with changed settings: {}; the run continues, but not as the "
                       "uninterrupted run would have\n", changed);
}

void check_resume_tokenizer(const std::string& run_dir, const std::string& data_tokenizer) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return;
  const std::string run_tok = find_tokenizer(run_dir);
  if (run_tok.empty() || tokenizer_matches(data_tokenizer, run_dir)) return;
  user_error("train --resume: the data was tokenized with {}, but the run in {} was trained with {}: its ids would "
             "mean other pieces; resume on data prepared with --tokenizer {} (nothing in the run was changed)",
             data_tokenizer, run_dir, run_tok, run_tok);
}

AutoResume decide_resume_auto(const Config& given) {
  const std::string dir = given.train.run_dir;
  AutoResume out;
  out.config = given;
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
  if (held_from.empty()) return out;  // nothing here yet
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
  if (ckpts.empty()) {  // a run without checkpoints: finished (its summary says), or started afresh
    // A finished run's model.h5 is not trained over on a word the summary cannot give.
    const std::string summary = dir + "/summary.json";
    const auto refuse = [&](const std::string& why) {
      user_error("train --resume auto: {}; its run may have finished: look at {}, then give another train.run_dir, or "
                 "start afresh there with --overwrite instead of --resume auto",
                 why, dir);
    };
    if (fs::exists(summary, ec)) {
      const std::optional<SummaryStatus> s = read_summary_status(summary);
      if (!s) refuse(fmt::format("{}: not a run summary (corrupt: expected a JSON object with a \"status\")", summary));
      if (s->status == "finished") {
        out.kind = AutoResume::kFinished;
        out.steps = s->steps;
        return out;
      }
    } else if (fs::exists(dir + "/model.h5", ec)) {
      refuse(fmt::format("{}/model.h5 without a summary.json (a run that ended after writing its model, or whose "
                         "summary was removed)",
                         dir));
    }
    return out;
  }
  const int64_t step = newest->attr_int("/", "step");
  if (step >= held.train.steps) {
    out.kind = AutoResume::kFinished;
    out.steps = step;
    return out;
  }
  out.kind = AutoResume::kResume;
  out.config = held;
  out.config.train.run_dir = dir;
  out.checkpoint = ckpts.back();
  return out;
}

}  // namespace bcd
