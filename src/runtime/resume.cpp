// The resume policies (runtime/resume.h).
#include "runtime/resume.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "base/error.h"
#include "base/files.h"
#include "base/json_read.h"
#include "io/checkpoint.h"
#include "model/hf_config.h"

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
      const auto j = read_json_file(summary, kJsonConfig, "run summary", /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
        refuse(fmt::format("{}: not a run summary (corrupt: expected a JSON object with a \"status\")", summary));
      if (j["status"] == "finished") {
        const auto steps = j.find("steps");
        out.kind = AutoResume::kFinished;
        out.steps = steps != j.end() && steps->is_number_integer() ? steps->get<int64_t>() : int64_t{0};
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
