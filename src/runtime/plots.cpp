// train.plot: finding scripts/plot.sh from the binary and running it on the finished run.
#include "runtime/plots.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

extern char** environ;

namespace bcd {

namespace fs = std::filesystem;

std::string find_plot_script(std::string* looked) {
  std::vector<std::string> places;
  if (const char* env = std::getenv("BCD_PLOT_SCRIPT"); env && *env) {
    places.push_back(env);  // set: the only place (a test, or an installed copy elsewhere)
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) places.push_back((exe.parent_path().parent_path() / "scripts/plot.sh").string());
#ifdef BCD_PROJECT_SOURCE_DIR
    places.push_back(std::string(BCD_PROJECT_SOURCE_DIR) + "/scripts/plot.sh");
#endif
  }
  std::string tried;
  for (const std::string& p : places) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
    tried += (tried.empty() ? "" : ", ") + p;
  }
  if (looked) *looked = tried;
  return "";
}

namespace {

// `argv` with stdout and stderr into one pipe: its exit status (-1: could not start; 128 + N:
// killed by signal N) and what it printed.
int run_captured(const std::vector<std::string>& argv, std::string& output) {
  int fds[2];
  if (::pipe(fds) != 0) return output = std::strerror(errno), -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    output = fmt::format("cannot start {}: {}", argv[0], std::strerror(err));
    return -1;
  }
  char buf[4096];
  for (ssize_t got; (got = ::read(fds[0], buf, sizeof(buf))) != 0;) {
    if (got > 0) output.append(buf, static_cast<size_t>(got));
    else if (errno != EINTR) break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

void draw_run_plots(const std::string& run_dir, const std::function<void(const std::string&)>& say) {
  const std::string later = fmt::format("the run is unaffected; draw them later with scripts/plot.sh {}", run_dir);
  std::string looked;
  const std::string script = find_plot_script(&looked);
  if (script.empty()) {
    fmt::print(stderr, "bcdtrain: warning: train.plot: scripts/plot.sh not found (looked at {}); {}\n", looked, later);
    return;
  }
  const std::string out = run_dir + "/plots";
  std::fflush(stdout);
  std::string output;
  const int rc = run_captured({"bash", script, run_dir, "--out", out}, output);
  std::istringstream lines(output);
  std::string line, written, why;
  int n = 0;
  while (std::getline(lines, line)) {
    const std::string wrote = "plot: wrote ";
    if (line.rfind(wrote, 0) == 0) {
      const std::string png = line.substr(wrote.size(), line.find(" (") - wrote.size());
      written += (written.empty() ? "" : ", ") + fs::path(png).filename().string(), ++n;
    } else if (!line.empty()) {
      why = line;  // the last thing it said: on failure, why
    }
  }
  if (rc != 0) {
    fmt::print(stderr, "bcdtrain: warning: train.plot: {} {} --out {} {}: {}; {}\n", script, run_dir, out,
               rc < 0 ? "did not start" : fmt::format("exited with status {}", rc), why.empty() ? output : why, later);
    return;
  }
  say(fmt::format("plots: {} PNG{} in {} ({})", n, n == 1 ? "" : "s", out, written));
}

}  // namespace bcd
