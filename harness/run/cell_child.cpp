// cell_child.cpp: one cell in child processes: `bpbench run-cell JOB.json` in a fresh process (the same
// allocator state for every cell, and a crash or the OOM killer is a result), or world_size local ranks of a
// distributed cell with rank 0's record and every rank's measurements merged.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "harness/run/dist_launch.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"

extern char** environ;

namespace bpbench {

using nlohmann::json;
using namespace run_detail;

namespace {

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1,
                     end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

// A private temporary file; returns its path and an open descriptor.
std::pair<std::string, int> make_temp(const char* stem) {
  std::string path = (std::filesystem::temp_directory_path() / (std::string(stem) + "-XXXXXX")).string();
  const int fd = mkstemp(path.data());
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot create a temporary file: {}", std::strerror(errno)));
  return {path, fd};
}

}  // namespace

CellResult run_cell_isolated(const CellJob& job, const std::string& exe) {
  CellResult failed = result_for(job, "error");
  const auto t0 = Clock::now();

  std::string job_path, err_path;
  int err_fd = -1, pipe_fd[2] = {-1, -1};
  auto cleanup = [&] {
    for (int* fd : {&err_fd, &pipe_fd[0], &pipe_fd[1]})
      if (*fd >= 0) close(std::exchange(*fd, -1));
    if (!job_path.empty()) std::remove(job_path.c_str());
    if (!err_path.empty()) std::remove(err_path.c_str());
  };
  try {
    int job_fd;
    std::tie(job_path, job_fd) = make_temp("bpbench-job");
    const std::string text = job.to_json().dump();
    const bool wrote = write(job_fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(job_fd);
    if (!wrote) throw std::runtime_error("cannot write the cell's job file");
    std::tie(err_path, err_fd) = make_temp("bpbench-stderr");
    if (pipe2(pipe_fd, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));

    // posix_spawn execs at once (no fork of this multi-threaded process is ever left running LibTorch code).
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fd[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
    const std::string binary = resolved_exe(exe);
    std::string arg0 = binary, arg1 = "run-cell";
    std::vector<char*> argv = {arg0.data(), arg1.data(), job_path.data(), nullptr};
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(std::exchange(pipe_fd[1], -1));
    if (rc != 0) throw std::runtime_error(fmt::format("cannot start '{}': {}", binary, std::strerror(rc)));

    // Bounded: a cell's process past BPBENCH_DIST_LAUNCH_TIMEOUT_S (default 24 h) is killed, so that no
    // rank of a launched grid waits on a hung cell for ever.
    const auto deadline = Clock::now() + launch_timeout(std::chrono::milliseconds(0));
    bool timed_out = false;
    std::string out;
    char buf[65536];
    for (;;) {
      pollfd readable{pipe_fd[0], POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      const int ready = poll(&readable, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000)));
      if (ready == 0) {
        if (Clock::now() < deadline) continue;
        timed_out = true;
        kill(pid, SIGKILL);
        break;
      }
      const ssize_t n = ready < 0 ? -1 : read(pipe_fd[0], buf, sizeof buf);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string err_tail = one_line(last_line(read_file(err_path)));
    cleanup();
    if (WIFSIGNALED(status)) {
      const int sig = WTERMSIG(status);
      failed.reason = fmt::format(
          "cell process killed by signal {} ({}){}", sig, strsignal(sig),
          timed_out        ? fmt::format(" after {:.0f} s (BPBENCH_DIST_LAUNCH_TIMEOUT_S)", seconds_since(t0))
          : sig == SIGKILL ? "; the system's out-of-memory killer sends this"
                           : "");
    } else {
      try {
        CellResult r = CellResult::from_json(json::parse(last_line(out)));
        if (WEXITSTATUS(status) == 0) return r;
      } catch (const std::exception&) {
      }
      failed.reason = fmt::format("cell process exited with status {} and no result{}{}", WEXITSTATUS(status),
                                  err_tail.empty() ? "" : ": ", err_tail);
    }
  } catch (const std::exception& e) {
    cleanup();
    failed.reason = one_line(e.what());
  }
  failed.wall_s = seconds_since(t0);
  return failed;
}

CellResult run_detail::merge_rank_results(const std::vector<CellResult>& ranks,
                                          std::optional<size_t> first_failure) {
  // Rank 0's record (loss, gradient error against plain BP on the global batch), every rank's measurements,
  // and the worst status: a rank out of memory makes the cell oom even when the others only saw it fail;
  // else the failure that came first, where the caller knows it (the others may only have seen it).
  CellResult merged = ranks.at(0);
  merged.world_size = static_cast<int64_t>(ranks.size());
  merged.ranks = json::array();
  auto take_status = [&](const CellResult& r) {
    merged.status = r.status;
    merged.reason = r.reason;
    merged.oom_requested_bytes = r.oom_requested_bytes;
  };
  for (const auto& r : ranks) {
    if (r.status == "oom" || (r.status == "error" && merged.status != "oom")) take_status(r);
    merged.ranks.push_back(
        {{"status", r.status},
         {"peak_bytes", r.memory ? json(r.memory->peak_bytes) : json(nullptr)},
         {"base_bytes", r.memory ? json(r.memory->base_bytes) : json(nullptr)},
         {"host_peak_bytes",
          r.memory && r.memory->host_peak_bytes ? json(*r.memory->host_peak_bytes) : json(nullptr)},
         {"time_median_s", r.time ? json(r.time->median_s) : json(nullptr)},
         {"hardware_flops", r.compute ? json(r.compute->counts.hardware()) : json(nullptr)},
         {"comm", r.comm}});
    // The cell's peak is the highest rank's: what a per-device budget must hold.
    if (r.memory && merged.memory && r.memory->peak_bytes > merged.memory->peak_bytes) {
      merged.memory->peak_bytes = r.memory->peak_bytes;
      merged.memory->base_bytes = r.memory->base_bytes;
      merged.memory->peak_by_category = r.memory->peak_by_category;
    }
  }
  if (first_failure && merged.status == "error" && ranks.at(*first_failure).status == "error")
    take_status(ranks.at(*first_failure));
  for (size_t r = 0; r < merged.ranks.size(); ++r) merged.ranks[r]["rank"] = r;
  if (merged.status != "ok") {
    merged.loss.reset();
    merged.time.reset();
    merged.grad_error.reset();
  }
  return merged;
}

CellResult run_cell_distributed(const CellJob& job, const std::string& exe) {
  CellResult merged = result_for(job, "error");
  merged.world_size = job.settings.world_size;
  const auto t0 = Clock::now();
  const int world = static_cast<int>(job.settings.world_size);
  std::string job_path;
  std::vector<std::string> rank_files;
  auto cleanup = [&] {
    if (!job_path.empty()) std::remove(job_path.c_str());
    for (const auto& f : rank_files) std::remove(f.c_str());
  };
  try {
    int fd;
    std::tie(job_path, fd) = make_temp("bpbench-dist-job");
    close(fd);
    CellJob rank_job = job;
    rank_job.result_file = job_path + ".result";  // each rank appends ".<rank>"
    for (int r = 0; r < world; ++r) rank_files.push_back(fmt::format("{}.{}", rank_job.result_file, r));
    std::ofstream(job_path) << rank_job.to_json().dump() << "\n";

    LaunchOptions launch;
    launch.world_size = world;
    launch.exe = resolved_exe(exe);
    launch.args = {"run-cell", job_path};
    const LaunchResult lr = launch_local_ranks(launch);

    std::vector<CellResult> ranks;
    for (int r = 0; r < world; ++r) {
      const std::string text = read_file(rank_files[r]);
      if (text.empty()) continue;
      try {
        ranks.push_back(CellResult::from_json(json::parse(text)));
      } catch (const std::exception&) {
      }
    }
    cleanup();
    if (ranks.size() != static_cast<size_t>(world)) {
      merged.reason = lr.exit_code != 0
                          ? lr.error
                          : fmt::format("{} of {} ranks wrote no result", world - ranks.size(), world);
      merged.wall_s = seconds_since(t0);
      return merged;
    }
    merged = merge_rank_results(ranks);
  } catch (const std::exception& e) {
    cleanup();
    merged.reason = one_line(e.what());
  }
  merged.wall_s = seconds_since(t0);
  return merged;
}

}  // namespace bpbench
