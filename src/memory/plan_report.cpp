// The report `bcdtrain plan` prints of a memory plan (memory/planner.h: format_plan): the tier
// table, each block's placements, the weight stream, the verdict.
#include "memory/planner.h"

#include <fmt/format.h>

#include <sstream>

namespace bcd {

using namespace plan_detail;

namespace {

// The names of blocks [first, last] as "FIRST .. LAST", or one name when first == last.
std::string block_range(const MemoryPlan& p, int first, int last) {
  return first == last ? p.blocks[first].name : p.blocks[first].name + " .. " + p.blocks[last].name;
}

// The "weight stream:" paragraph: what streams, what it costs the compute tier and host memory,
// and whether the copies hide behind compute at the assumed rates.
std::string format_stream(const MemoryPlan& p) {
  const StreamPlan& s = p.stream;
  const int layers = static_cast<int>(p.blocks.size()) - 2;
  int first = -1, last = -1;
  for (int b = 0; b < static_cast<int>(s.streamed.size()); ++b)
    if (s.streamed[b]) last = b, first = first < 0 ? b : first;
  const int n = s.streamed_count();
  std::ostringstream os;
  int on_nvme = 0;
  for (Tier t : s.home) on_nvme += t == Tier::kNvme ? 1 : 0;
  os << fmt::format("weight stream: {} of {} decoder layers streamed from {} ({})", n, layers,
                    on_nvme == 0   ? std::string("host memory")
                    : on_nvme == n ? std::string("the NVMe tier")
                                   : fmt::format("host memory ({}) and the NVMe tier ({})", n - on_nvme, on_nvme),
                    block_range(p, first, last));
  if (n < layers) {
    const bool contiguous = last - first + 1 == n;
    os << fmt::format(", {} resident{}", layers - n,
                      contiguous && first == 1 ? fmt::format(" ({})", block_range(p, last + 1, layers)) : "");
  }
  os << "\n";
  os << fmt::format("  compute tier: window {} x {} + active buffer {} (the active unit's streamed layers)\n",
                    s.depth, gib(s.slot_bytes), gib(s.active_bytes));
  if (s.host_bytes() > 0)
    os << fmt::format("  host: {}, one copy on the machine shared by {} local rank(s): {} charged to this rank\n",
                      gib(s.host_bytes()), s.sharers, gib((s.host_bytes() + s.sharers - 1) / s.sharers));
  if (s.nvme_bytes > 0) {
    os << fmt::format("  nvme: {} layers' weights, {} on this rank's NVMe tier, read at {:g} GB/s "
                      "(memory.stream_nvme_gbps) through {} pinned buffers ({})\n",
                      on_nvme, gib(s.nvme_bytes), s.nvme_gbps, s.depth + 1, gib(s.staging_bytes));
  }
  os << fmt::format("  per step at {:g} GB/s and {:g} TFLOP/s (memory.stream_gbps, stream_tflops):\n", s.gbps, s.tflops);
  auto unit_line = [&](int u, const char* what) {
    const StreamPlan::UnitFigures& f = s.per_unit[u];
    os << fmt::format("    unit '{}' active ({}): copies {} in {:.2f} s against {:.2f} s of layer compute, {:.3f} s "
                      "exposed\n",
                      p.units[u].name, what, gib(f.bytes), f.copy_s, f.compute_s, f.exposed_s);
  };
  if (s.worst_unit == s.slowest_unit) {
    unit_line(s.worst_unit, s.exposed_s_per_step > 0 ? "the most bytes and the most exposed" : "the most bytes");
  } else {
    unit_line(s.worst_unit, "the most bytes");
    unit_line(s.slowest_unit, "the most exposed");
  }
  os << "  " << (s.keeps_up ? "keeps up: the copies hide behind compute (exposed <= 10% of it)"
                            : std::string("cannot keep up: exposed copy time is over 10% of compute") +
                                  (p.fits ? " (memory.accept_slow_stream: the copies will be exposed)" : ""))
     << "\n";
  return os.str();
}

}  // namespace


std::string format_plan(const MemoryPlan& p) {
  std::ostringstream os;
  const auto& big = p.units[p.largest_unit];
  const auto& deep = p.units[p.deepest_unit];
  os << fmt::format("model: {:.3f}B parameters in {} blocks; {} BCD unit(s); largest unit '{}' ({:.1f}M params), "
                    "deepest '{}'\n",
                    static_cast<double>(p.params) / 1e9, p.blocks.size(), p.units.size(), big.name,
                    static_cast<double>(big.state_elems) / 1e6, deep.name);
  if (p.shards > 1)
    os << fmt::format("block state sharded over {} ranks: master and moments below are this rank's 1/{}\n", p.shards,
                      p.shards);
  auto g = [](uint64_t b) { return fmt::format("{:.2f}", static_cast<double>(b) / kGiB); };
  os << fmt::format("\n{:<15}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}   (GiB)\n", "tier", "working",
                    "master", "m", "v", "grad", "activ.", "staging", "total", "budget", "headroom");
  auto row = [&](const char* name, const TierUsage& t) {
    os << fmt::format("{:<15}", name);
    for (uint64_t b : t.by_kind) os << fmt::format("{:>9}", g(b));
    os << fmt::format("{:>9}{:>9}{:>9}", g(t.activations), g(t.staging), g(t.total()));
    if (t.unlimited) os << fmt::format("{:>9}{:>9}\n", "-", "-");
    else os << fmt::format("{:>9}{:>9}\n", g(t.budget),
                           fmt::format("{:.2f}", static_cast<double>(t.headroom()) / kGiB));
  };
  row("compute", p.compute);
  row("pinned staging", p.pinned);
  row("host", p.host);
  row("nvme", p.nvme);
  const StreamPlan& sp = p.stream;
  os << fmt::format("(compute: {} + the largest unit's state + worst-case activations{}{})\n",
                    sp.on() ? "resident working weights, rotary tables, the stream window and the active buffer"
                            : "all working weights and rotary tables",
                    p.activations_estimated ? " (estimated)" : " (memory.activation_bytes)",
                    p.compute.reserved
                        ? fmt::format(" + the CUDA runtime's own {} (context {}, cuBLAS workspaces {}{}), estimates "
                                      "outside the caching allocator, whose cap is the budget less them",
                                      gib(p.compute.reserved), gib(p.reserve.context), gib(p.reserve.cublas),
                                      p.reserve.nccl ? ", NCCL buffers " + gib(p.reserve.nccl) : "")
                        : "");
  if (sp.on() && sp.host_bytes() > 0)
    os << fmt::format("(host: the streamed weights' home, {} on the machine shared by {} local rank(s), first; then "
                      "inactive master/moments)\n",
                      gib(sp.host_bytes()), sp.sharers);

  // Blocks: consecutive blocks with the same placement share a line.
  os << "\nblocks (home of each state between visits; grad exists only while the block is active):\n";
  auto pattern = [&](const BlockPlan& b) {
    std::string s;
    for (int k = 0; k < kNumStateKinds; ++k) {
      const StatePlacement& pl = b.state[k];
      if (pl.bytes == 0) continue;
      std::string where = pl.has_home ? tier_name(pl.home)
                                      : (k == static_cast<int>(StateKind::kGrad) ? "compute when active" : "none");
      if (k == static_cast<int>(StateKind::kWorking) && pl.has_home && pl.home != Tier::kCompute) where += " (streamed)";
      s += fmt::format("{}{} {} {:.0f} MiB", s.empty() ? "" : ", ", state_kind_name(static_cast<StateKind>(k)),
                       where, static_cast<double>(pl.bytes) / (1024.0 * 1024.0));
    }
    return s;
  };
  for (size_t i = 0; i < p.blocks.size();) {
    size_t j = i + 1;
    const std::string pat = pattern(p.blocks[i]);
    while (j < p.blocks.size() && pattern(p.blocks[j]) == pat) ++j;
    const std::string names = j - i == 1 ? p.blocks[i].name
                                         : fmt::format("{} .. {} ({})", p.blocks[i].name, p.blocks[j - 1].name, j - i);
    os << fmt::format("  {:<28} {}\n", names, pat);
    i = j;
  }
  if (sp.on()) os << "\n" << format_stream(p);
  os << "\n" << (p.fits ? std::string("fits") : "does not fit: " + p.why_not) << "\n";
  return os.str();
}

}  // namespace bcd
