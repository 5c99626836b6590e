// test_lost_results.cpp: two results a run used to lose (issue 77, 4.). An allocation that the host cannot
// satisfy is a result, status oom with the bytes it asked for, not an error; a cell whose timeline cannot be
// written (a full disk) keeps its measurement, its files named as not written and why.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/run/allocation_failure.h"
#include "tests/support/test_support.h"

namespace bpbench::test_lost_results {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::json_file;
using testing::TempDir;

TEST(AllocationFailure, ReadsWhatEachAllocatorSays) {
  const std::string cpu =
      "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
      "to "
      "allocate 8000000000000 bytes. Error code 12 (Cannot allocate memory)";
  EXPECT_TRUE(is_allocation_failure(cpu));
  EXPECT_EQ(requested_bytes(cpu), 8000000000000);
  const std::string cuda =
      "CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.2 "
      "GiB is free.";
  EXPECT_TRUE(is_allocation_failure(cuda));
  EXPECT_EQ(requested_bytes(cuda), int64_t{5} << 29);  // 2.5 x 2^30
  EXPECT_EQ(requested_bytes("CUDA out of memory. Tried to allocate 20.00 MiB."), int64_t{20} << 20);
  EXPECT_TRUE(is_allocation_failure("not enough memory: you tried to allocate 64 bytes."));
  EXPECT_FALSE(is_allocation_failure("shape '[2, 3]' is invalid for input of size 5"));
  EXPECT_EQ(requested_bytes("shape '[2, 3]' is invalid for input of size 5"), std::nullopt);
}

// `bpbench run SCENARIO --out DIR` with `prefix` before it in a shell (a limit); its exit status.
int run_bpbench(const std::string& prefix, const fs::path& scenario, const fs::path& out) {
  const std::string cmd = fmt::format("{} '{}' run '{}' --out '{}' > '{}.log' 2>&1", prefix, BPBENCH_BINARY,
                                      scenario.string(), out.string(), out.string());
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void write_scenario(const fs::path& path, const json& grid, bool timeline, int world_size = 1) {
  json s = {{"name", "lost-results"}, {"device", "cpu"},
            {"threads", 1},           {"world_size", world_size},
            {"grid", grid},           {"measure", {{"memory", true}, {"timeline", timeline}}}};
  std::ofstream(path) << s.dump(2);
}

// seq_len 1e12: the batch alone asks the host for 8e12 bytes. The cell is oom with those bytes, the run
// goes on to the next cell, measures it, and exits 0 (an oom cell is a result). One process and 2 ranks.
TEST(LostResults, ASequenceNoHostHoldsIsStatusOomWithTheBytesAsked) {
  TempDir tmp;
  write_scenario(tmp.dir() / "s.json",
                 {{"model", "tiny"}, {"impl", "plain"}, {"seq_len", {1000000000000, 48}}}, false);
  ASSERT_EQ(run_bpbench("", tmp.dir() / "s.json", tmp.dir() / "out"), 0) << tmp.file("out.log");
  const json cells = json_file(tmp.dir() / "out" / "results.json").at("cells");
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0]["status"], "oom") << cells[0]["reason"];
  EXPECT_EQ(cells[0]["oom_requested_bytes"], 8000000000000) << cells[0]["reason"];  // (1, T) int64 ids
  EXPECT_EQ(cells[1]["status"], "ok");
  EXPECT_GT(cells[1]["memory"]["peak_bytes"].get<int64_t>(), 0);

  // Distributed: each of 2 ranks builds the global batch of 2 sequences (16e12 bytes); the merged cell keeps
  // the bytes its ranks asked for.
  write_scenario(tmp.dir() / "d.json",
                 {{"model", "tiny"},
                  {"impl", "streambp-dist"},
                  {"seq_len", {1000000000000, 48}},
                  {"partition", 32},
                  {"logits_partition", 32}},
                 false, 2);
  ASSERT_EQ(run_bpbench("", tmp.dir() / "d.json", tmp.dir() / "dist"), 0) << tmp.file("dist.log");
  const json dist = json_file(tmp.dir() / "dist" / "results.json").at("cells");
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_EQ(dist[0]["status"], "oom") << dist[0]["reason"];
  EXPECT_EQ(dist[0]["oom_requested_bytes"], 16000000000000) << dist[0]["reason"];
  EXPECT_EQ(dist[1]["status"], "ok") << dist[1]["reason"];
}

// A tmpfs of 1 MiB as --out where this process may mount one (root with CAP_SYS_ADMIN), else a file-size
// limit of 64 KiB (ulimit -f: writes past it fail with EFBIG, SIGXFSZ ignored), which every timeline
// exceeds and results.json does not.
class FullDisk {
 public:
  explicit FullDisk(const fs::path& dir) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") == 0;
  }
  ~FullDisk() {
    if (mounted_) ::umount(dir_.c_str());
  }
  FullDisk(const FullDisk&) = delete;
  FullDisk& operator=(const FullDisk&) = delete;
  // What a command needs before it for the disk to be full: nothing on the tmpfs, else the limit.
  std::string prefix() const { return mounted_ ? "" : "trap '' XFSZ; ulimit -f 64;"; }
  bool mounted() const { return mounted_; }

 private:
  fs::path dir_;
  bool mounted_ = false;
};

// Two cells with timelines of about 0.8 MB each (tiny, T = 96) on 1 MiB: the first cell's files fit, the
// second's do not (under the file-size limit neither's do). Both cells keep their peak and loss; a cell
// whose files did not fit names its three files and why.
TEST(LostResults, AFullDiskKeepsTheMeasurementsAndNamesTheFilesNotWritten) {
  TempDir tmp;
  write_scenario(tmp.dir() / "s.json",
                 {{"model", "tiny"},
                  {"impl", {"plain", "streambp"}},
                  {"seq_len", 96},
                  {"partition", 32},
                  {"logits_partition", 32}},
                 true);
  const fs::path out = tmp.dir() / "disk" / "out";
  int status = 0;
  bool tmpfs = false;
  json cells;
  {
    const FullDisk disk(tmp.dir() / "disk");
    tmpfs = disk.mounted();
    std::cout << (disk.mounted() ? "a 1 MiB tmpfs" : "ulimit -f 1024 (no tmpfs could be mounted)") << "\n";
    status = run_bpbench(disk.prefix(), tmp.dir() / "s.json", out);
    cells = json_file(out / "results.json").at("cells");
  }
  EXPECT_EQ(status, 0);
  ASSERT_EQ(cells.size(), 2u);
  for (const auto& c : cells) {
    EXPECT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_GT(c["memory"]["peak_bytes"].get<int64_t>(), 0);
    EXPECT_TRUE(c["loss"].is_number());
  }
  if (tmpfs) {
    EXPECT_FALSE(cells[0]["memory"].contains("files_not_written"));
    EXPECT_EQ(cells[0]["memory"]["timeline_file"], "timelines/cell-000.json");
  }
  for (size_t i = tmpfs ? 1 : 0; i < cells.size(); ++i) {
    const json& lost = cells[i]["memory"]["files_not_written"];
    ASSERT_TRUE(lost.is_object()) << cells[i].dump();
    for (const char* kind : {".json", ".trace.json", ".memory_viz.pickle"}) {
      const std::string file = fmt::format("timelines/cell-{:03d}{}", i, kind);
      ASSERT_TRUE(lost.contains(file)) << lost.dump();
      const std::string why = lost[file];
      EXPECT_TRUE(why.find("No space left on device") != std::string::npos ||
                  why.find("File too large") != std::string::npos)
          << why;
    }
    EXPECT_FALSE(cells[i]["memory"].contains("timeline_file"));
  }
}

}  // namespace
}  // namespace bpbench::test_lost_results
