// dist_launch.cpp: local ranks of a distributed run as posix_spawn'ed children with torchrun's environment;
// a bounded wait that kills the survivors of a failed rank (see dist_launch.h).
#include "harness/run/dist_launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace bpbench {
namespace {

using Clock = std::chrono::steady_clock;

std::string key_of(const std::string& entry) {
  return entry.substr(0, entry.find('='));
}

void send(pid_t pid, int sig) {
  if (pid > 0) kill(pid, sig);
}

}  // namespace

std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& set,
                                          const std::vector<std::string>& unset) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e), key = key_of(entry);
    bool replaced = std::find(unset.begin(), unset.end(), key) != unset.end();
    for (const auto& [k, v] : set) replaced = replaced || k == key;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

std::optional<std::chrono::milliseconds> env_seconds(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0)) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

std::string resolved_exe(const std::string& exe) {
  std::error_code ec;
  auto path = std::filesystem::read_symlink(exe, ec);  // /proc/self/exe must name *this* process's binary
  return ec ? exe : path.string();
}

std::chrono::milliseconds launch_timeout(std::chrono::milliseconds requested) {
  if (requested.count() > 0) return requested;
  return env_seconds("BPBENCH_DIST_LAUNCH_TIMEOUT_S").value_or(std::chrono::hours(24));
}

int spawn_process(const std::string& exe, std::vector<std::string> args, std::vector<std::string> env,
                  pid_t& pid) {
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  return posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
}

std::string RankExit::describe() const {
  if (signal != 0)
    return fmt::format("{} by signal {} ({})", killed ? "was killed" : "died", signal, strsignal(signal));
  return fmt::format("exited with status {}", exit_code);
}

int free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    throw std::runtime_error(fmt::format("cannot find a free local port: {}", why));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

LaunchResult launch_local_ranks(const LaunchOptions& options) {
  if (options.world_size < 1) throw std::invalid_argument("launch_local_ranks: world_size must be >= 1");
  LaunchResult result;
  result.master_port = options.master_port > 0 ? options.master_port : free_local_port();
  const auto t0 = Clock::now();
  const auto deadline = t0 + launch_timeout(options.timeout);

  const std::string exe = resolved_exe(options.exe);

  const int R = options.world_size;
  result.ranks.resize(static_cast<size_t>(R));
  std::vector<bool> running(static_cast<size_t>(R), false);
  auto kill_all = [&](int sig) {
    for (int r = 0; r < R; ++r)
      if (running[r]) {
        send(result.ranks[r].pid, sig);
        result.ranks[r].killed = true;
      }
  };

  // Start every rank.
  const int nodes = std::max(1, options.nodes), per_node = R / nodes;
  if (R % nodes != 0)
    throw std::invalid_argument(fmt::format("launch: {} ranks do not split over {} nodes", R, nodes));
  for (int r = 0; r < R; ++r) {
    std::vector<std::pair<std::string, std::string>> vars = {
        {"RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(R)},
        {"LOCAL_RANK", std::to_string(r % per_node)},
        {"LOCAL_WORLD_SIZE", std::to_string(per_node)},
        {"GROUP_RANK", std::to_string(r / per_node)},
        {"GROUP_WORLD_SIZE", std::to_string(nodes)},
        {"MASTER_ADDR", options.master_addr},
        {"MASTER_PORT", std::to_string(result.master_port)},
    };
    // As torchrun does: ranks sharing the cores should not each start a pool of every core.
    if (!std::getenv("OMP_NUM_THREADS") && R > 1) {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      vars.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(R))));
    }
    for (const auto& kv : options.env) vars.push_back(kv);
    std::vector<std::string> args = {exe};
    args.insert(args.end(), options.args.begin(), options.args.end());
    pid_t pid = -1;
    const int rc = spawn_process(exe, std::move(args), environment_with(vars), pid);
    if (rc != 0) {
      kill_all(SIGKILL);
      for (int q = 0; q < r; ++q) waitpid(result.ranks[q].pid, nullptr, 0);
      throw std::runtime_error(fmt::format("cannot start rank {} ('{}'): {}", r, exe, std::strerror(rc)));
    }
    result.ranks[r].rank = r;
    result.ranks[r].pid = pid;
    running[r] = true;
  }

  // Wait, bounded.
  int first_failure = -1, alive = R;
  bool timed_out = false;
  Clock::time_point kill_at = Clock::time_point::max(), hard_kill_at = Clock::time_point::max();
  while (alive > 0) {
    bool reaped = false;
    for (int r = 0; r < R; ++r) {
      if (!running[r]) continue;
      int status = 0;
      const pid_t got = waitpid(result.ranks[r].pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      running[r] = false;
      --alive;
      reaped = true;
      RankExit& x = result.ranks[r];
      if (got < 0) {
        x.exit_code = 127;
      } else if (WIFSIGNALED(status)) {
        x.signal = WTERMSIG(status);
      } else {
        x.exit_code = WEXITSTATUS(status);
      }
      const bool failed = x.signal != 0 || x.exit_code != 0;
      if (failed && first_failure < 0 && !x.killed) {
        first_failure = r;
        kill_at = Clock::now() + options.grace;
      }
    }
    if (alive == 0) break;
    const auto now = Clock::now();
    if (now >= deadline && !timed_out) {
      timed_out = true;
      kill_all(SIGTERM);
      hard_kill_at = now + std::chrono::seconds(3);
    } else if (now >= kill_at) {
      kill_all(SIGTERM);
      kill_at = Clock::time_point::max();
      hard_kill_at = now + std::chrono::seconds(3);
    } else if (now >= hard_kill_at) {
      kill_all(SIGKILL);
      hard_kill_at = Clock::time_point::max();
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  std::vector<std::string> killed;
  for (const auto& x : result.ranks)
    if (x.killed && (x.signal != 0 || x.exit_code != 0)) killed.push_back(std::to_string(x.rank));
  const std::string killed_note =
      killed.empty() ? "" : fmt::format("; ranks {} were stopped", fmt::join(killed, ", "));
  if (timed_out) {
    result.exit_code = 1;
    result.error =
        fmt::format("distributed run of {} ranks timed out after {:.0f} s (BPBENCH_DIST_LAUNCH_TIMEOUT_S){}",
                    R, result.seconds, killed_note);
  } else if (first_failure >= 0) {
    const RankExit& x = result.ranks[first_failure];
    result.exit_code = x.exit_code > 0 ? x.exit_code : 1;
    result.error = fmt::format("distributed run failed: rank {} of {} (pid {}) {}{}", x.rank, R, x.pid,
                               x.describe(), killed_note);
  } else {
    for (const auto& x : result.ranks)
      if (x.signal != 0 || x.exit_code != 0) {  // only ranks we killed failed: should not happen
        result.exit_code = 1;
        result.error = fmt::format("distributed run failed: rank {} of {} {}", x.rank, R, x.describe());
        break;
      }
  }
  return result;
}

int run_local_ranks(int world_size, const std::vector<std::string>& child_args) {
  LaunchOptions options;
  options.world_size = world_size;
  options.args = child_args;
  try {
    const LaunchResult r = launch_local_ranks(options);
    if (r.exit_code != 0) std::cerr << "bpbench: " << r.error << "\n";
    return r.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "bpbench: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace bpbench
