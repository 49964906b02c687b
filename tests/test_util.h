// Helpers shared by the tests: temporary directories, running the bcdtrain binary, reading files.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bcd::test {

// A fresh directory under $TMPDIR (or /tmp), removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "bcd");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `bcdtrain ARGS` through the shell (ARGS already quoted) and captures its output.
RunResult run_bcdtrain(const std::string& args);
// The same for any shell command line.
RunResult run_shell(const std::string& command);
// Debian's fortunes (the demo corpus): BCD_FORTUNES_DIR where set (scripts/gpu_check.sh points it
// at the unpacked package on a machine without Debian's), else /usr/share/games/fortunes.
std::string fortunes_dir();
// Peak resident memory (VmHWM, bytes) of `bcdtrain ARGS` run to its end, output discarded; 0 if
// it could not be run.
uint64_t peak_rss_bytes(const std::string& args);

// `bcdtrain ARGS` in the background (stdout and stderr to `log`), for signals and kills;
// `program` in bcdtrain's place when given (a launcher: torchrun ... bcdtrain ...).
struct Background {
  pid_t pid = -1;
  Background(const std::string& args, const std::string& log, const std::string& program = "");
  int wait();  // exit code, or 128 + the signal that ended it
};

std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text);

// The message of the UserError `f` throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f);

// The records of a run's metrics.jsonl, in order.
std::vector<nlohmann::json> read_metrics(const std::string& path);

// `bcdtrain prepare` of the demo corpus (the fortunes, vocabulary 2048) into `out`: a copy of the
// one prepared by this bcdtrain binary into BUILD/test-cache (prepared there on first use).
RunResult prepare_fortunes(const std::string& out);

// The memory mapping that holds `p` in /proc/self/maps: its path ("" for anonymous memory, e.g.
// "/dev/nvidia0" for a driver's mapping); "?" when no mapping holds it.
std::string mapping_of(const void* p);
// Pages of [p, p + bytes) resident in memory (mincore); p page-aligned.
uint64_t resident_pages(const void* p, uint64_t bytes);

// Path of a source-tree file, e.g. source_path("configs/tiny.toml").
std::string source_path(const std::string& rel);

}  // namespace bcd::test
