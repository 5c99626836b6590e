// test_estimate_fixture.cpp: the estimate and the FLOP counts of every estimated strategy, over a grid of
// presets, dtypes, devices, objectives, LoRA, offload, training runs and odd shapes, against the values saved
// in tests/fixtures/estimate_grid.json.
//
// The fixture was written by this test (BPBENCH_WRITE_ESTIMATE_FIXTURE=1) before the estimate moved into the
// strategies' own files, so that moving code cannot move a byte: each entry is the peak, the
// hardware FLOPs, each with a 64-bit FNV-1a digest of everything else (format_estimate's whole breakdown:
// every phase, term name and byte count; every FlopCounts tally), or the one-line error a cell the estimate
// refuses gets. A change meant to alter the estimate rewrites the fixture with the variable set and says why
// in its commit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/estimate/estimate.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/model/model_config.h"

namespace bpbench::test_estimate_fixture {
namespace {

std::string fixture_path() {
  return std::string(BPBENCH_SOURCE_DIR) + "/tests/fixtures/estimate_grid.json";
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string flops_text(const FlopCounts& f) {
  return fmt::format("fm {} fa {} bm {} ba {} rm {} ra {} rs {} am {} ad {}", f.forward_matmul,
                     f.forward_attention, f.backward_matmul, f.backward_attention, f.recompute_matmul,
                     f.recompute_attention, f.attention_rescore, f.attention_masked, f.attention_dense);
}

// "PEAK DIGEST | HARDWARE-FLOPS DIGEST", either side "error: <message>" when the estimate refuses the cell
// (estimate_flops takes some cells estimate_peak refuses: the math kernel on CUDA).
std::string entry_for(const EstimateInput& in) {
  std::string memory, flops;
  try {
    const MemoryEstimate e = estimate_peak(in);
    const std::string all = fmt::format(
        "{}\nbase {} params {} grads {} batch {} optimizer {} checkpoints {} layer {} head {} above {} peak "
        "{} "
        "dominant {} kernel {} host {} traffic {}",
        format_estimate(in, e), e.base, e.params, e.grads, e.batch, e.optimizer, e.checkpoints,
        e.layer_working_set, e.head_working_set, e.peak_above_base, e.peak_bytes, e.dominant_phase,
        e.attention_kernel, e.host_bytes, e.offload_traffic_bytes);
    memory = fmt::format("{} {:016x}", e.peak_bytes, fnv1a(all));
  } catch (const std::invalid_argument& e) {
    memory = std::string("error: ") + e.what();
  }
  try {
    const FlopCounts f = estimate_flops(in);
    flops = fmt::format("{} {:016x}", f.hardware(), fnv1a(flops_text(f)));
  } catch (const std::invalid_argument& e) {
    flops = std::string("error: ") + e.what();
  }
  return memory + " | " + flops;
}

struct Shape {
  int64_t T, batch, partition, logits_partition;
};

// The grid: every estimated strategy on presets of each family and size, five device x dtype pairs (CUDA
// float32 on a head dim of 6 is refused: recorded as its error), three objective x LoRA pairs, with and
// without offload, on a sequence with a short last chunk and one where the partitions divide T; training
// runs (model and mixed precision) on a subset.
std::map<std::string, std::string> grid() {
  const std::vector<std::string> presets = {"tiny",     "small",       "tiny-gemma3", "small-gemma3",
                                            "qwen3-8b", "llama3.1-8b", "gemma3-4b"};
  struct DeviceDtype {
    std::string device;
    torch::ScalarType dtype;
  };
  const std::vector<DeviceDtype> devices = {{"cpu", torch::kFloat},
                                            {"cpu", torch::kBFloat16},
                                            {"cpu", torch::kDouble},
                                            {"cuda", torch::kBFloat16},
                                            {"cuda", torch::kFloat}};
  struct ObjectiveLora {
    std::string objective;
    int64_t rank;
  };
  const std::vector<ObjectiveLora> objectives = {{"sft", 0}, {"dpo", 8}, {"grpo", 0}};
  const std::vector<Shape> shapes = {{1000, 1, 128, 100}, {4096, 2, 512, 1024}};
  std::map<std::string, std::string> out;
  for (const auto& preset : presets)
    for (const auto& impl : estimated_impls())
      for (const auto& [device, dtype] : devices)
        for (const auto& [objective, rank] : objectives)
          for (const bool offload : {false, true})
            for (const auto& shape : shapes) {
              EstimateInput in;
              in.config = find_model_preset(preset);
              in.impl = impl;
              in.device = device;
              in.dtype = dtype;
              in.objective = objective;
              in.lora_rank = rank;
              in.offload = offload;
              in.seq_len = shape.T;
              in.sequences = sequences_for(objective, shape.batch, 3);
              in.partition = shape.partition;
              in.logits_partition = shape.logits_partition;
              in.threads = 2;
              const std::string key =
                  fmt::format("{} {} {} {} {} r{} {} T{} B{} p{} lp{}", preset, impl, device,
                              c10::toString(dtype), objective, rank, offload ? "offload" : "device", shape.T,
                              shape.batch, shape.partition, shape.logits_partition);
              out[key] = entry_for(in);
              if (objective == "sft" && !offload && dtype == torch::kBFloat16)
                for (const bool mixed : {false, true}) {
                  in.train = TrainEstimate{3, 2, mixed};
                  out[key + (mixed ? " train-mixed" : " train-model")] = entry_for(in);
                }
            }
  return out;
}

TEST(EstimateFixture, EveryStrategyUnchangedByteForByte) {
  const auto now = grid();
  const char* write = std::getenv("BPBENCH_WRITE_ESTIMATE_FIXTURE");
  if (write && std::string(write) == "1") {
    std::ofstream(fixture_path()) << nlohmann::json(now).dump(0) << "\n";
    GTEST_SKIP() << "wrote " << fixture_path() << " (" << now.size() << " entries)";
  }
  std::ifstream file(fixture_path());
  ASSERT_TRUE(file) << "cannot read " << fixture_path();
  const auto saved = nlohmann::json::parse(file).get<std::map<std::string, std::string>>();
  EXPECT_EQ(saved.size(), now.size()) << "the grid changed shape";
  int differing = 0;
  for (const auto& [key, value] : saved) {
    const auto it = now.find(key);
    if (it == now.end()) {
      ADD_FAILURE() << "no longer in the grid: " << key;
      continue;
    }
    if (it->second != value && ++differing <= 20)
      ADD_FAILURE() << key << "\n  saved: " << value << "\n  now:   " << it->second;
  }
  EXPECT_EQ(differing, 0) << "entries that differ from the fixture (the first 20 shown)";
  EXPECT_GT(saved.size(), 2000u);
}

}  // namespace
}  // namespace bpbench::test_estimate_fixture
