// out_dir.cpp: making an output directory, its lock, and the refusal to overwrite a results.json (out_dir.h).
#include "harness/run/out_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "harness/run/scenario.h"

namespace bpbench {

namespace fs = std::filesystem;

namespace {

const char* kLockName = ".bpbench.lock";

std::string pid_in(const fs::path& lock) {
  std::ifstream in(lock);
  std::string pid;
  std::getline(in, pid);
  return pid.empty() ? "unknown" : pid;
}

// results.replaced-20261127T131500Z.json (no colons: the GPU machines bring back only names of letters,
// digits, '.', '_' and '-'), with -2, -3... where a run was forced twice in one second.
fs::path aside_name(const fs::path& dir) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  fs::path candidate = dir / fmt::format("results.replaced-{}.json", stamp);
  for (int n = 2; fs::exists(candidate); ++n)
    candidate = dir / fmt::format("results.replaced-{}-{}.json", stamp, n);
  return candidate;
}

}  // namespace

void make_output_dir(const fs::path& dir, const std::string& who) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    input_error(fmt::format("{}cannot create output directory '{}': {}", who, dir.string(),
                            ec ? ec.message() : "a file is in the way"),
                "a writable directory path");
}

OutDirClaim::OutDirClaim(const fs::path& dir, OutDirUse use) {
  make_output_dir(dir);
  const fs::path lock = dir / kLockName;
  // O_CLOEXEC: an isolated cell or a rank (exec'd children) must not keep the lock after this run ends.
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    input_error(fmt::format("cannot write '{}': {}", lock.string(), std::strerror(errno)),
                "a writable directory path");
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err == EWOULDBLOCK)
      input_error(fmt::format("'{}' is in use by another bpbench run (pid {}, lock {}): two runs into one "
                              "directory would each rewrite its results.json",
                              dir.string(), pid_in(lock), kLockName),
                  "another --out directory, or wait for that run to end");
    input_error(fmt::format("cannot lock '{}': {}", lock.string(), std::strerror(err)),
                "a local directory that supports flock");
  }
  // The pid only names the holder in another run's refusal; the lock is what protects, so a failed write of
  // it is no error.
  const std::string pid = std::to_string(::getpid()) + "\n";
  const bool pid_written =
      ::ftruncate(lock_fd_, 0) == 0 && ::pwrite(lock_fd_, pid.data(), pid.size(), 0) >= 0;
  (void)pid_written;

  const fs::path results = dir / "results.json";
  if (use == OutDirUse::resume || !fs::exists(results)) return;
  if (use == OutDirUse::fresh)
    input_error(fmt::format("'{}' already holds results; a run never writes over them", results.string()),
                "--resume to continue that run, --force to start anew (the old file is kept beside as "
                "results.replaced-TIME.json), or another --out directory");
  moved_aside_ = aside_name(dir);
  std::error_code ec;
  fs::rename(results, moved_aside_, ec);
  if (ec)
    input_error(fmt::format("cannot move '{}' aside to '{}': {}", results.string(), moved_aside_.string(),
                            ec.message()),
                "a writable directory path");
}

OutDirClaim::~OutDirClaim() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing releases the flock
}

}  // namespace bpbench
