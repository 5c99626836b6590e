// dist_launch.h: start a distributed run's ranks as local processes, the way torchrun would.
//
// `bpbench run` with a scenario's world_size > 1 (and the distributed tests) use this: it executes the given
// binary (default: this one, /proc/self/exe) world_size times with RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT=<a free port> set, and waits for all of them. Every
// child is started with posix_spawn (an exec at once: a bare fork of a process whose OpenMP pool exists is
// unsafe). The wait is bounded: when a rank fails, the others get a grace period to fail on their own (their
// collectives notice the dead peer) and are then killed; when the whole run exceeds its timeout every rank is
// killed. The result says which rank failed first and how, in one line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bpbench {

struct LaunchOptions {
  int world_size = 2;
  std::string exe = "/proc/self/exe";
  std::vector<std::string> args;                         // argv[1..] of every child
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing in) every child's env
  std::chrono::milliseconds timeout{0};    // whole run; 0: BPBENCH_DIST_LAUNCH_TIMEOUT_S, else 24 h
  std::chrono::milliseconds grace{15000};  // after the first failure, before the other ranks are killed
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free local port
  // The ranks as `nodes` torchrun nodes of world_size / nodes ranks each, all on this machine (a multi-node
  // run's environment, for tests): rank r is LOCAL_RANK r % (world_size / nodes) of GROUP_RANK (the node)
  // r / (world_size / nodes). world_size must be a multiple of nodes.
  int nodes = 1;
};

struct RankExit {
  int rank = 0;
  pid_t pid = -1;
  int exit_code = -1;            // when it exited
  int signal = 0;                // when a signal ended it
  bool killed = false;           // we sent that signal (after another rank failed, or on timeout)
  std::string describe() const;  // "exited with status 3", "killed by signal 9 (Killed)"
};

struct LaunchResult {
  int exit_code = 0;  // 0: every rank exited 0; else the first failing rank's status (1 for a signal)
  std::string error;  // one line when exit_code != 0
  std::vector<RankExit> ranks;
  int master_port = 0;
  double seconds = 0;
};

LaunchResult launch_local_ranks(const LaunchOptions& options);

// The binary `exe` names: /proc/self/exe read as the file it links to, any other path as it is.
std::string resolved_exe(const std::string& exe);

// A launch's whole-run bound: `requested` when positive, else BPBENCH_DIST_LAUNCH_TIMEOUT_S, else 24 h.
std::chrono::milliseconds launch_timeout(std::chrono::milliseconds requested);
// A positive number of seconds in the environment variable `name`; nullopt when unset or not one.
std::optional<std::chrono::milliseconds> env_seconds(const char* name);

// posix_spawn of `exe` with argv `args` (argv[0] included) and environment `env` ("KEY=value", as
// environment_with makes it): an exec at once, never a bare fork. Returns posix_spawn's error (0: started).
int spawn_process(const std::string& exe, std::vector<std::string> args, std::vector<std::string> env,
                  pid_t& pid);

// launch_local_ranks with this binary and `child_args`; prints the error line to stderr; returns the exit
// code.
int run_local_ranks(int world_size, const std::vector<std::string>& child_args);

// This process's environment with `set` added (or replacing) and the variables named in `unset` left out,
// as "KEY=value" entries for posix_spawn.
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& set,
                                          const std::vector<std::string>& unset = {});

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, read back, closed).
int free_local_port();

}  // namespace bpbench
