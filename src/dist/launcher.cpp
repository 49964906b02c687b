// Process management of `bcdtrain launch`: fork/exec per rank, signal forwarding, failure fan-out.
#include "dist/launcher.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <thread>

#include "base/bytes.h"
#include "base/config.h"
#include "base/error.h"
#include "base/files.h"

namespace bcd {

namespace {

std::atomic<int> g_forward_signal{0};
extern "C" void on_launcher_signal(int sig) { g_forward_signal.store(sig); }


// A port nobody listens on now (bound and released: the store binds it again moments later).
int free_port() {
  const UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  if (!fd) user_error("launch: cannot open a socket to find a free port: {}", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    user_error("launch: cannot find a free port: {}", std::strerror(errno));
  return ntohs(a.sin_port);
}

// Rank 0 serves the rendezvous on `port` of every interface of this host (c10d's TCPStore binds
// them all, with SO_REUSEADDR): refused here, before any rank starts, when something listens
// there already. A rank that failed on it would say so among the others' lines.
void check_port_free(const std::string& addr, int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  if (!fd) return;  // the rank finds out and says why
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a));
  const int err = errno;
  fd.reset();
  if (rc == 0) return;
  if (err == EADDRINUSE)
    user_error("launch: --master-port {}: port {} is in use on this host (another run's rendezvous, or another "
               "program), so rank 0 could not listen on {}:{}; give another --master-port, or leave it out to take a "
               "free one",
               port, port, addr, port);
  user_error("launch: --master-port {}: rank 0 could not listen on {}:{}: {}", port, addr, port, std::strerror(err));
}

// The rendezvous host must be a name or address this machine can resolve: the ranks would
// otherwise each fail after dist.timeout_s with c10d's own account, which leaves the resolver's out.
void check_master_addr(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (found) ::freeaddrinfo(found);
  if (rc != 0)
    user_error("launch: --master-addr {}: cannot be resolved on this machine ({}); give node 0's host name or IP "
               "address as this machine sees it",
               addr, rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc));
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) user_error("launch: cannot find this program (/proc/self/exe): {}", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

// GPUs this process may use, without initialising CUDA before the fork: CUDA_VISIBLE_DEVICES'
// entries when it is set, else the driver's list.
int visible_gpus() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) {
    int n = 0;
    for (std::string_view s(v); !s.empty();) {
      const size_t comma = s.find(',');
      n += s.substr(0, comma).find_first_not_of(' ') != std::string_view::npos ? 1 : 0;
      s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    }
    return n;
  }
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

}  // namespace

void check_launch(LaunchOptions& opt, const Config* cfg, bool nproc_given) {
  if (!nproc_given) opt.nproc = cfg ? static_cast<int>(cfg->dist.nproc) : 1;
  // More ranks than cores (or GPUs) only slow each other down, and a mistyped --nproc 1000
  // would take the machine for minutes: refused unless asked for.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int gpus = visible_gpus();
  const DeviceChoice device = cfg ? cfg->train.device : DeviceChoice::kAuto;
  const bool on_gpus = device == DeviceChoice::kCuda || (device == DeviceChoice::kAuto && gpus > 0);
  const int room = on_gpus ? gpus : cores;
  if (opt.nproc > room && !opt.oversubscribe)
    user_error("launch: {} ranks on a machine with {} {} (train.device = \"{}\"): more ranks than {} only slow each "
               "other down; give --oversubscribe to start them anyway",
               opt.nproc, room, on_gpus ? "GPUs" : "cores", name_of(device), on_gpus ? "GPUs" : "cores");
  if (opt.node_rank >= opt.nnodes)
    user_error("launch: --node-rank {} is outside --nnodes {}", opt.node_rank, opt.nnodes);
  if (opt.nnodes > 1 && opt.master_port == 0)
    user_error("launch: with --nnodes {} every node needs the same --master-addr and --master-port", opt.nnodes);
}

namespace {

// BCD_LAUNCH_SPAWN_DELAY_MS: a pause after starting each rank (a test hook: it widens the moment
// in which a signal finds the launcher still starting ranks). 0 without the variable.
int spawn_delay_ms() {
  const char* v = std::getenv("BCD_LAUNCH_SPAWN_DELAY_MS");
  if (v == nullptr || *v == '\0') return 0;
  const std::optional<int64_t> ms = parse_count(v);
  if (!ms || *ms > 60000) user_error("launch: BCD_LAUNCH_SPAWN_DELAY_MS={}: expected milliseconds in [0, 60000]", v);
  return static_cast<int>(*ms);
}

// Sleeps `ms`, or less when a signal comes for the launcher.
void pause_unless_signalled(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (g_forward_signal.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

namespace {

// In the forked child: the rank's process group, signals and environment, then the command.
[[noreturn]] void exec_rank(const std::string& exe, const std::vector<std::string>& command, const LaunchOptions& opt,
                            int rank, int local, int world, int port, pid_t launcher, const sigset_t& old_mask) {
  ::setpgid(0, 0);  // signals reach the rank through the launcher only
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // and a launcher that dies takes its ranks along
  if (::getppid() != launcher) ::_exit(128 + SIGTERM);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);  // a signal held since the fork stops the rank now
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(opt.nproc).c_str(), 1);
  ::setenv("MASTER_ADDR", opt.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  std::fprintf(stderr, "bcdtrain launch: exec %s: %s\n", exe.c_str(), std::strerror(errno));
  ::_exit(127);
}

// Forks this node's ranks. SIGINT/SIGTERM are held while a rank is forked: one forwarded to the
// child before it resets its handlers would run the launcher's handler there and be lost (the
// rank would start). Held, it reaches the child once its default action is back (the rank
// stops), and one for the launcher reaches it after the fork (it then starts no more ranks: the
// signal is returned in *interrupted_by).
std::vector<Rank> start_ranks(const LaunchOptions& opt, const std::vector<std::string>& command, int port,
                              int* interrupted_by) {
  const std::string exe = self_exe();
  const int world = opt.nnodes * opt.nproc;
  const int delay_ms = spawn_delay_ms();
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  const pid_t launcher = ::getpid();
  std::vector<Rank> ranks;
  ranks.reserve(static_cast<size_t>(opt.nproc));
  *interrupted_by = 0;
  for (int local = 0; local < opt.nproc; ++local) {
    if ((*interrupted_by = g_forward_signal.load()) != 0) break;
    Rank& r = ranks.emplace_back();
    r.rank = opt.node_rank * opt.nproc + local;
    ::sigprocmask(SIG_BLOCK, &stop_signals, &old_mask);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      ranks.pop_back();
      for (const Rank& k : ranks) ::kill(k.pid, SIGTERM);
      user_error("launch: fork failed after starting {} of {} ranks (they were stopped): {}", ranks.size(), opt.nproc,
                 std::strerror(err));
    }
    if (pid == 0) exec_rank(exe, command, opt, r.rank, local, world, port, launcher, old_mask);
    r.pid = pid;
    r.running = true;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    if (delay_ms > 0 && local + 1 < opt.nproc) pause_unless_signalled(delay_ms);
  }
  return ranks;
}

// Watches the ranks to their end: forwards signals; the first failure stops the others (SIGTERM,
// then SIGKILL after grace_s). Returns the launch's exit code.
int watch_ranks(const LaunchOptions& opt, std::vector<Rank>& ranks, int interrupted_by) {
  using Clock = std::chrono::steady_clock;
  int result = 0;
  bool failed = false, forwarded = false;
  Clock::time_point kill_at{};
  auto alive = [&] {
    int n = 0;
    for (const Rank& r : ranks) n += r.running ? 1 : 0;
    return n;
  };
  auto signal_all = [&](int sig) {
    for (const Rank& r : ranks)
      if (r.running) ::kill(r.pid, sig);
  };
  if (interrupted_by != 0) {
    // Stopped while starting ranks: no more start, the signal goes to those that did (they are
    // in their set-up, where it stops them at once), and they get grace_s before SIGKILL.
    g_forward_signal.store(0);
    fmt::print(stderr, "bcdtrain launch: signal {} ({}) while starting ranks ({} of {} started): stopping them\n",
               interrupted_by, strsignal(interrupted_by), ranks.size(), opt.nproc);
    signal_all(interrupted_by);
    forwarded = true;
    result = 128 + interrupted_by;
    failed = true;  // the ranks' own exit codes do not replace it
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt.grace_s * 1000));
  }
  while (alive() > 0) {
    if (const int sig = g_forward_signal.exchange(0)) {
      signal_all(sig);  // a second ^C reaches the ranks as their second signal: they stop at once
      forwarded = true;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (Rank& r : ranks) {
        if (r.pid != pid) continue;
        r.running = false;
        r.status = status;
        const int code = exit_code(status);
        if (code != 0 && !failed && !forwarded) {
          failed = true;
          result = code;
          fmt::print(stderr, "bcdtrain launch: rank {} (pid {}) {}; stopping the other ranks\n", r.rank, r.pid,
                     describe(status));
          signal_all(SIGTERM);
          kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt.grace_s * 1000));
        } else if (!failed) {
          result = std::max(result, code);
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR && errno != ECHILD) user_error("launch: waitpid: {}", std::strerror(errno));
    if (failed && Clock::now() >= kill_at) {
      for (const Rank& r : ranks)
        if (r.running) fmt::print(stderr, "bcdtrain launch: rank {} (pid {}) did not stop in {} s: killed\n", r.rank, r.pid, opt.grace_s);
      signal_all(SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace

int launch_ranks(const LaunchOptions& opt, const std::vector<std::string>& command) {
  check_master_addr(opt.master_addr);
  if (opt.master_port > 0 && opt.node_rank == 0) check_port_free(opt.master_addr, opt.master_port);
  const int port = opt.master_port > 0 ? opt.master_port : free_port();
  g_forward_signal.store(0);
  auto old_int = std::signal(SIGINT, on_launcher_signal);
  auto old_term = std::signal(SIGTERM, on_launcher_signal);
  int interrupted_by = 0;  // a signal that came while ranks were being started
  std::vector<Rank> ranks = start_ranks(opt, command, port, &interrupted_by);
  const int result = watch_ranks(opt, ranks, interrupted_by);
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  return result;
}

}  // namespace bcd
