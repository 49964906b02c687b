// The directories of the NVMe tier below each of memory.nvme_paths, named in one place: the
// optimizer state's store (the path itself; PATH/rank<R> when several ranks share the paths) and
// the streamed weights' store beside it (that directory's weights/). Each store locks its own.
#pragma once

#include <string>
#include <vector>

namespace bcd {

enum class NvmeStore { kState, kWeights };

// Rank `rank` of `world_size`'s directories of `store`, one per path (not created).
std::vector<std::string> nvme_dirs(const std::vector<std::string>& nvme_paths, int rank, int world_size,
                                   NvmeStore store);
// Creates `dirs` (nvme_dirs' names); UserError naming [memory] nvme_paths when one cannot be.
void create_nvme_dirs(const std::vector<std::string>& dirs);
// Every directory below the paths that rank `rank`'s stores may create, deepest first: what a run
// removes when it ends (the paths themselves stay).
std::vector<std::string> nvme_run_dirs(const std::vector<std::string>& nvme_paths, int rank, int world_size);

}  // namespace bcd
