// Test helpers: temporary directories and subprocess runs of the bcdtrain binary.
#include "test_util.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"

namespace bcd::test {
namespace {

// A suite whose SetUpTestSuite failed is a failure, said so, exit 1. gtest marks every test of
// that suite skipped, and ctest, which reads "[  SKIPPED ]" in the output as a skip whatever the
// exit code, would report a broken suite as skipped tests. End events reach the listeners
// appended last first, so this runs before the default printer writes "[  SKIPPED ]".
class SuiteSetUpFailure : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& test) override {
    const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    if (!test.result()->Skipped() || !suite || !suite->ad_hoc_test_result().Failed()) return;
    std::printf("[  FAILED  ] %s.%s: the set-up of its suite (SetUpTestSuite) failed, above\n",
                test.test_suite_name(), test.name());
    std::fflush(nullptr);
    std::_Exit(1);
  }
};

const bool kSuiteSetUpFailureInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SuiteSetUpFailure);
  return true;
}();

}  // namespace

TempDir::TempDir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + tag + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

RunResult run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

RunResult run_bcdtrain(const std::string& args) { return run_shell(std::string(BCD_BINARY) + " " + args); }

std::string fortunes_dir() {
  const char* dir = std::getenv("BCD_FORTUNES_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/usr/share/games/fortunes";
}

uint64_t peak_rss_bytes(const std::string& args) {
  const pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    const std::string cmd = "exec " + std::string(BCD_BINARY) + " " + args + " > /dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) return 0;
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

Background::Background(const std::string& args, const std::string& log, const std::string& program) {
  pid = fork();
  if (pid == 0) {
    const std::string cmd = "exec " + (program.empty() ? std::string(BCD_BINARY) : program) + " " + args + " > " + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
}

int Background::wait() {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

RunResult prepare_fortunes(const std::string& out) {
  namespace fs = std::filesystem;
  // Every test process of a suite prepares the same corpus (about 4 s of tokenizing each): it is
  // prepared once per bcdtrain binary into the build directory and copied from there.
  std::error_code ec;
  const fs::path bin(BCD_BINARY);
  const auto stamp = static_cast<unsigned long long>(fs::last_write_time(bin, ec).time_since_epoch().count());
  const fs::path cache = bin.parent_path() / "test-cache" / ("fortunes-2048-" + std::to_string(stamp));
  if (ec || !fs::exists(cache / "tokens.h5")) {
    fs::create_directories(cache.parent_path(), ec);
    const std::string tmp = cache.string() + ".tmp-" + std::to_string(::getpid());
    fs::remove_all(tmp, ec);
    RunResult r = run_bcdtrain("prepare --input " + fortunes_dir() + " --out " + tmp + " --vocab-size 2048");
    if (r.exit_code != 0) return r;
    fs::rename(tmp, cache, ec);  // a process preparing at the same time may have won: its copy is as good
    if (ec) fs::remove_all(tmp, ec);
  }
  RunResult r;
  fs::copy(cache, out, fs::copy_options::recursive, ec);
  r.exit_code = ec ? 1 : 0;
  r.output = ec ? "cannot copy " + cache.string() + " to " + out + ": " + ec.message()
                : "the demo corpus, prepared once into " + cache.string();
  return r;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  while (std::getline(maps, line)) {
    // "lo-hi perms offset dev inode   path"
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || at < lo || at >= hi) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    return path;
  }
  return "?";
}

uint64_t resident_pages(const void* p, uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((bytes + page - 1) / page);
  if (::mincore(const_cast<void*>(p), bytes, vec.data()) != 0) throw std::runtime_error("mincore failed");
  uint64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string source_path(const std::string& rel) { return std::string(BCD_SOURCE_DIR) + "/" + rel; }

}  // namespace bcd::test
