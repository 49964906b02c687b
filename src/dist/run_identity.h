// What must be the same on every rank of a run before any of them starts (DESIGN.md §6): the
// resolved config less the keys that describe one rank's own machine, the data and tokenizer,
// the checkpoint resumed, and the binary. ProcessGroup::agree compares it across ranks and names
// the differences (rank_differences).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "base/config.h"
#include "data/loader.h"
#include "memory/planner.h"
#include "dist/rank_facts.h"

namespace bcd {

// Whether config key "section.key" may differ from rank to rank: what a rank's own machine has
// and where it keeps things (threads, the device's peak, every [memory] budget, drive and home,
// ranks per machine), never what the ranks compute together. Everything else must be equal.
bool is_per_rank_key(const std::string& key);

// This rank's description of the run: every config key but the per-rank ones ("train.lr" ->
// "0.002", [model] as resolved), then "run.*" facts: the device kind, each dataset's sizes and
// unigram loss, the tokenizer file's digest, the checkpoint resumed (path and step) or none,
// the layers whose weights stream and from where (every rank of a machine meets at their
// write-backs), and the binary's build id.
RankFacts describe_run(const Config& cfg, const std::vector<DataSource>& sources, const std::string& resume_from,
                       const MemoryPlan& plan, const torch::Device& device);

// The running binary: its GNU build id ("build-id 176caa48..."), else a digest of its file.
std::string binary_identity();

}  // namespace bcd
