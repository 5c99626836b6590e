// test_deepspeed_states.cpp: harness/estimate/deepspeed_states.h against DeepSpeed's own functions, run from
// the pinned peer install (.peers/deepspeed, scripts/setup_peers.sh) in the project's Python: every stage and
// offload for 1, 8 and 32 GPUs of Llama-3.1-8B's counts. Skipped, saying so, where the peers are not
// installed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/estimate/deepspeed_states.h"
#include "tests/support/test_support.h"

namespace bpbench::test_deepspeed_states {
namespace {

using nlohmann::json;

TEST(DeepSpeedStates, EveryStageAndOffloadIsDeepSpeedsOwnNumber) {
  const auto peer = std::filesystem::path(BPBENCH_SOURCE_DIR) / ".peers" / "deepspeed";
  if (!std::filesystem::exists(peer / "deepspeed")) GTEST_SKIP() << "no DeepSpeed in " << peer;
  constexpr int64_t P = 8030261248, largest = 525336576;  // Llama-3.1-8B: its parameters, its embedding
  testing::TempDir tmp;
  const std::string script = tmp.file("ds.py"), out = tmp.file("ds.json");
  {
    std::FILE* f = std::fopen(script.c_str(), "w");
    std::fputs(fmt::format(R"(import json, sys
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as z2
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as z3
rows = []
for gpus in (1, 8, 32):
    per_node, nodes = min(gpus, 8), max(1, gpus // 8)
    for offload in (False, True):
        cpu, gpu = z2({0}, per_node, nodes, cpu_offload=offload)
        rows.append([2, gpus, offload, False, gpu, cpu])
        for params in ((False, True) if offload else (False,)):
            cpu, gpu, _ = z3({0}, {1}, per_node, nodes, cpu_offload=offload, cpu_offload_params=params)
            rows.append([3, gpus, offload, params, gpu, cpu])
json.dump(rows, open(sys.argv[1], "w"))
)",
                           P, largest)
                   .c_str(),
               f);
    std::fclose(f);
  }
  const std::string cmd = fmt::format("PYTHONPATH='{}' '{}' '{}' '{}' >'{}' 2>&1", peer.string(),
                                      BPBENCH_PYTHON, script, out, tmp.file("log"));
  ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::file_text(tmp.file("log"));
  const json rows = testing::json_file(out);
  ASSERT_EQ(rows.size(), 15u);
  for (const auto& row : rows) {
    const auto got = deepspeed_model_states(row[0].get<int>(), P, largest, row[1].get<int64_t>(),
                                            row[2].get<bool>(), row[3].get<bool>());
    EXPECT_EQ(got.gpu_bytes, row[4].get<int64_t>()) << row.dump() << " " << got.formula;
    EXPECT_EQ(got.cpu_bytes, row[5].get<int64_t>()) << row.dump() << " " << got.formula;
  }
}

}  // namespace
}  // namespace bpbench::test_deepspeed_states
