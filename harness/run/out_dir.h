// out_dir.h: making an output directory, and claiming a run's before anything is measured into it. A
// results.json is the most expensive file bpbench makes (a GPU cell, a max-length search): a run never writes
// over one it did not start, and two runs never write into one directory at once (each would rewrite the file
// after its own cells, and only the last writer's would remain).
#pragma once

#include <filesystem>
#include <string>

namespace bpbench {

// Creates `dir` (and its parents) or throws InputError, one line starting with `who` ("report: ", or ""),
// naming the directory and why: what every command that writes a folder of output does first.
void make_output_dir(const std::filesystem::path& dir, const std::string& who = "");

enum class OutDirUse {
  fresh,   // DIR must not hold a results.json (the default: a run never overwrites one)
  resume,  // DIR's results.json, if any, is read and continued (--resume, --resume-any)
  force,   // DIR's results.json, if any, is moved aside to results.replaced-<UTC time>.json (--force)
};

class OutDirClaim {
 public:
  // Creates `dir` and takes its lock, DIR/.bpbench.lock (flock: the kernel lets go when the process ends,
  // however it ends, so a killed run never leaves a stale lock). InputError, one line, when another process
  // holds it (naming its pid), when `dir` cannot be made, or when a results.json is there and `use` is fresh.
  OutDirClaim(const std::filesystem::path& dir, OutDirUse use);
  ~OutDirClaim();
  OutDirClaim(const OutDirClaim&) = delete;
  OutDirClaim& operator=(const OutDirClaim&) = delete;
  // With OutDirUse::force, where the earlier results.json went ("" when there was none).
  const std::filesystem::path& moved_aside() const { return moved_aside_; }

 private:
  int lock_fd_ = -1;
  std::filesystem::path moved_aside_;
};

}  // namespace bpbench
