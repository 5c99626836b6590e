// python_output.h: the output directory of a Python script the tests read (the transformers oracle, the
// official StreamBP check), made once per build tree. ctest runs every test in its own process, so the output
// is cached under BPBENCH_BINARY_DIR/<cache>/<hash of the python and every file the script runs>, made under
// a file lock and moved into place whole. Empty `skip` and `error` mean `dir` holds it.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/test_files.h"

namespace bpbench::testing {

struct PythonOutput {
  std::filesystem::path dir;
  std::string skip, error;
};

// Runs `python SCRIPT OUT_DIR EXTRA_ARGS` unless `cache` already holds its output (OUT_DIR/`done_file`).
// `sources`: the script and every file it loads (their contents key the cache). `skip_reason`, when not
// empty, is returned as `skip` without running anything (what the script needs is missing here).
inline PythonOutput cached_python_output(const std::string& cache,
                                         const std::vector<std::filesystem::path>& sources,
                                         const std::string& extra_args, const std::string& done_file,
                                         const std::string& skip_reason = "") {
  namespace fs = std::filesystem;
  PythonOutput r;
  if (!skip_reason.empty()) {
    r.skip = skip_reason;
    return r;
  }
  const std::string python = BPBENCH_PYTHON;
  std::string key = python + extra_args;
  for (const auto& s : sources) key += file_text(s);
  const fs::path root = fs::path(BPBENCH_BINARY_DIR) / cache;
  r.dir = root / fmt::format("{:016x}", std::hash<std::string>{}(key));
  fs::create_directories(root);
  const int lock = ::open((root / "lock").c_str(), O_CREAT | O_RDWR, 0644);
  ::flock(lock, LOCK_EX);
  if (!fs::exists(r.dir / done_file)) {
    const fs::path tmp = r.dir.string() + ".tmp", log = r.dir.string() + ".log";
    fs::remove_all(tmp);
    const std::string cmd = fmt::format("'{}' '{}' '{}' {} >'{}' 2>&1", python, sources.front().string(),
                                        tmp.string(), extra_args, log.string());
    if (std::system(cmd.c_str()) != 0)
      r.error = fmt::format("{} failed:\n{}", sources.front().filename().string(), file_text(log));
    else
      fs::rename(tmp, r.dir);
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return r;
}

// For a fixture's SetUp: the test skips when the script could not run here (`run.skip`), but fails under CI
// (CI=true), where `what` must run; a script that failed fails the test with its log.
inline void require_python_output(const PythonOutput& run, const std::string& what) {
  if (!run.skip.empty()) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL() << run.skip << " (under CI " << what << " must run)";
    GTEST_SKIP() << run.skip;
  }
  ASSERT_TRUE(run.error.empty()) << run.error;
}

}  // namespace bpbench::testing
