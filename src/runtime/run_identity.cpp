// A rank's description of its run, for the check that every rank runs the same one.
#include "runtime/run_identity.h"

#include <elf.h>
#include <link.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "base/files.h"
#include "io/checkpoint.h"

namespace bcd {

namespace {

// Keys that may differ per rank, each for what it describes. A key not named here is compared,
// so a new key is compared until someone decides otherwise.
constexpr const char* kPerRankKeys[] = {
    "train.threads",      // this rank's cores; intra-op threads change no collective
    "train.peak_tflops",  // this rank's device's peak, for the MFU figure only
    "dist.nproc",         // ranks per machine: read by launch and plan, never by a rank
};
// Every [memory] key: budgets, NVMe directories and homes of this rank's machine (one node may
// have less RAM or other drives). What they decide that every rank must share (which layers
// stream from host memory: each write-back is a barrier) is compared as run.streamed_layers.
constexpr const char* kPerRankSection = "memory.";

// The GNU build id of the main program (the linker's hash of its contents), from its notes.
int find_build_id(dl_phdr_info* info, size_t, void* out) {
  auto& id = *static_cast<std::string*>(out);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((nh->n_namesz + 3) & ~3u);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        for (uint32_t k = 0; k < nh->n_descsz; ++k) id += fmt::format("{:02x}", static_cast<unsigned char>(desc[k]));
        return 1;
      }
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return 1;  // the first object is the main program: stop there
}

// A value as a message shows it: on one line, and not a page long.
std::string shown(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else out += c;
  }
  constexpr size_t kMax = 160;
  if (out.size() > kMax) out = out.substr(0, kMax / 2 - 2) + "..." + out.substr(out.size() - (kMax / 2 - 1));
  return out;
}

std::string streamed_layers(const MemoryPlan& plan) {
  if (!plan.stream.on()) return "none";
  std::vector<int> host, nvme;
  for (size_t b = 0; b < plan.stream.streamed.size(); ++b)
    if (plan.stream.streamed[b]) (plan.stream.home[b] == Tier::kNvme ? nvme : host).push_back(static_cast<int>(b));
  auto blocks = [](const std::vector<int>& v) {
    const std::string r = rank_ranges(v);  // "ranks 1-4": the same ranges, of blocks
    return "block" + r.substr(r.find(' '));
  };
  std::string out;
  if (!host.empty()) out += blocks(host) + " from host memory";
  if (!nvme.empty()) out += (out.empty() ? "" : ", ") + blocks(nvme) + " from NVMe";
  return out;
}

}  // namespace

std::string fnv1a_hex(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + out;
}

std::string rank_differences(const std::vector<RankFacts>& facts_of, size_t max_keys) {
  std::vector<std::string> keys;  // in the order the ranks name them
  std::vector<std::map<std::string, std::string>> values(facts_of.size());
  for (size_t r = 0; r < facts_of.size(); ++r)
    for (const auto& [k, v] : facts_of[r]) {
      if (std::none_of(keys.begin(), keys.end(), [&](const std::string& x) { return x == k; })) keys.push_back(k);
      values[r][k] = v;
    }
  std::vector<std::string> clauses;
  for (const std::string& k : keys) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;  // value -> its ranks, by lowest rank
    for (size_t r = 0; r < values.size(); ++r) {
      const auto it = values[r].find(k);
      const std::string v = it == values[r].end() ? "(not given)" : it->second;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == v; });
      if (g == groups.end()) groups.push_back({v, {static_cast<int>(r)}});
      else g->second.push_back(static_cast<int>(r));
    }
    if (groups.size() < 2) continue;
    std::string clause = k + ": ";
    for (size_t i = 0; i < groups.size(); ++i)
      clause += (i ? "; " : "") + shown(groups[i].first) + " on " + rank_ranges(groups[i].second);
    clauses.push_back(std::move(clause));
  }
  std::string out;
  for (size_t i = 0; i < clauses.size() && i < max_keys; ++i) out += (i ? " | " : "") + clauses[i];
  if (clauses.size() > max_keys) out += fmt::format(" | and {} more keys", clauses.size() - max_keys);
  return out;
}

bool is_per_rank_key(const std::string& key) {
  if (key.rfind(kPerRankSection, 0) == 0) return true;
  for (const char* k : kPerRankKeys)
    if (key == k) return true;
  return false;
}

std::string binary_identity() {
  std::string id;
  dl_iterate_phdr(find_build_id, &id);
  if (!id.empty()) return "build-id " + id;
  return "digest " + fnv1a_hex(read_file("/proc/self/exe", "this program"));
}

RankFacts describe_run(const Config& cfg, const std::vector<DataSource>& sources, const std::string& resume_from,
                       const MemoryPlan& plan, const torch::Device& device) {
  RankFacts facts;
  Config c = cfg;  // config_values visits for writing too
  for (auto& [key, value] : config_values(c))
    if (!is_per_rank_key(key)) facts.emplace_back(key, value);
  facts.emplace_back("run.device", device.is_cuda() ? "cuda" : "cpu");
  for (size_t i = 0; i < sources.size(); ++i) {
    const TokenDataset& ds = sources[i].ds;
    facts.emplace_back(sources.size() == 1 ? "run.dataset" : fmt::format("run.dataset.{}", i),
                       fmt::format("{} train / {} val tokens in {} / {} documents, vocab {}, {}-byte ids{}, unigram val "
                                   "loss {:.17g}",
                                   ds.n_tokens(Split::kTrain), ds.n_tokens(Split::kVal), ds.n_docs(Split::kTrain),
                                   ds.n_docs(Split::kVal), ds.vocab_size(), ds.token_bytes(),
                                   ds.masked() ? ", loss masks" : "", ds.unigram_val_loss()));
  }
  // A mixture's datasets share one tokenizer (checked when they are opened): the first's.
  const std::string tok = read_file(sources.front().ds.tokenizer_path(), "tokenizer");
  facts.emplace_back("run.tokenizer", fmt::format("{} bytes, fnv1a {}", tok.size(), fnv1a_hex(tok)));
  facts.emplace_back("run.resume",
                     resume_from.empty() ? "none (a fresh run)"
                                         : fmt::format("{} at step {}", resume_from,
                                                       CheckpointReader(resume_from).attr_int("/", "step")));
  facts.emplace_back("run.streamed_layers", streamed_layers(plan));
  facts.emplace_back("run.binary", binary_identity());
  return facts;
}

}  // namespace bcd
