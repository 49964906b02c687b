// Helpers of the multi-rank tests (test_dist.cpp, test_dist_torchrun.cpp, test_dist_launch.cpp):
// rank variables set for a scope, ports, output lines and a launcher's children.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace bcd::disttest {

// Sets the given variables (nullopt: unset) and clears every other rank variable; restores all
// of them when it dies.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_JOB_ID",
                          "SLURM_NTASKS_PER_NODE"}) {
      const char* v = std::getenv(k);
      saved_[k] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(k);
    }
    for (const auto& [k, v] : vars)
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// A TCP socket listening on a free port of 127.0.0.1 (closed when it dies): a busy port for
// tests, or (closed at once) a port nobody listens on.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd_, 4) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(std::string("HeldPort: ") + std::strerror(errno));
    port_ = ntohs(a.sin_port);
  }
  ~HeldPort() { ::close(fd_); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

inline int free_port() { return HeldPort().port(); }

// The lines of `text` that are not empty.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

// Children of a process, from /proc (the launcher's ranks).
inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t c;
  while (in >> c) out.push_back(c);
  return out;
}

}  // namespace bcd::disttest
