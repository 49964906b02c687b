// A rank's description of its run, for the check that every rank runs the same one.
#include "dist/run_identity.h"

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
