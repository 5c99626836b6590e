// test_per_rank_peaks.cpp: one rank's estimate against every rank's measured peak and base, end to end
// through run_scenario with Gloo ranks, for each distributed strategy family: data parallelism (ZeRO-2
// buckets and shards), Ulysses sequence parallelism, ring context parallelism. Each at the smallest lengths
// that show its peak phases (the tracking allocator counts the same at any length); the rank's counted FLOPs
// against the estimate's where the strategy splits the sequence.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/estimate/estimate_comm.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/estimate/estimate_inverse.h"
#include "harness/model/hf_model.h"
#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "tests/support/dist_ranks.h"
#include "tests/support/test_support.h"

namespace bpbench::test_per_rank_peaks {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::json_file;

class PerRankPeaks : public ::testing::Test {
 protected:
  json run(const json& scenario, const std::string& name) {
    RunOptions opt;
    opt.out_dir = (dir_ / name).string();
    opt.self_exe = BPBENCH_BINARY;
    opt.argv = {"test_per_rank_peaks"};
    const RunSummary summary = run_scenario(parse_scenario(scenario), opt);
    return json_file(summary.results_path);
  }

  // A Hugging Face directory of `c` (config.json, random weights) under this test's folder, for a scenario's
  // model axis; remembered, so that config_of finds its config.
  std::string model_dir(const ModelConfig& c);
  ModelConfig config_of(const std::string& model) const {
    const auto found = written_.find(model);
    return found != written_.end() ? found->second : find_model_preset(model);
  }

  testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.dir();
  std::map<std::string, ModelConfig> written_;
};

// The per-rank peak tests' scenario: `ranks` Gloo ranks, one thread each, partitions of 128 rows, a warm-up
// step before the memory step (the previous step's gradient shards are then part of the base) and one timed
// step.
json per_rank_scenario(const char* model, const json& impls, int64_t seq_len, int64_t ranks,
                       const char* offload = "none") {
  return {{"threads", 1},
          {"world_size", ranks},
          {"grid",
           {{"model", model},
            {"impl", impls},
            {"offload", offload},
            {"seq_len", seq_len},
            {"partition", 128},
            {"logits_partition", 128}}},
          {"measure", {{"time", {{"warmup", 1}, {"repeat", 0}}}, {"grad_error", false}}}};
}

// Every rank's measured peak and base within 2% of the estimate of one rank.
void expect_every_rank_near(const json& cell, const MemoryEstimate& e, const char* model, int64_t seq_len,
                            int64_t ranks) {
  ASSERT_EQ(cell["ranks"].size(), static_cast<size_t>(ranks));
  for (const auto& rank : cell["ranks"]) {
    const std::string where =
        fmt::format("{} T={} {} rank {} of {} ({})", model, seq_len, cell["axes"]["impl"].get<std::string>(),
                    rank["rank"].get<int>(), ranks, e.dominant_phase);
    EXPECT_NEAR(e.peak_bytes / rank["peak_bytes"].get<double>(), 1.0, 0.02) << where;
    EXPECT_NEAR(e.base / rank["base_bytes"].get<double>(), 1.0, 0.02) << where;
    std::cout << where << ": measured " << rank["peak_bytes"] << ", estimate " << e.peak_bytes << "\n";
  }
}

// One rank's FLOPs as counted in its step (the cell's record, rank 0's) equal the estimate's per rank, and
// so do its collectives (estimate_comm.h).
void expect_flops_of_one_rank(const json& cell, const ModelConfig& config, int64_t seq_len, int64_t ranks,
                              int64_t ulysses_degree = 1) {
  EstimateInput in;
  in.ulysses_degree = ulysses_degree;
  in.config = config;
  in.impl = cell["axes"]["impl"].get<std::string>();
  in.seq_len = seq_len;
  in.sequences = 1;
  in.partition = 128;
  in.logits_partition = 128;
  in.ranks = ranks;
  in.dtype = cell["axes"].value("dtype", "float32") == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
  if (in.dtype == torch::kFloat) {  // FLOPs are counted in float32 only
    const FlopCounts flops = estimate_flops(in);
    EXPECT_EQ(cell["compute"]["hardware_flops"].get<int64_t>(), flops.hardware()) << in.impl;
    EXPECT_EQ(cell["compute"]["model_flops"].get<int64_t>(), flops.model()) << in.impl;
  }
  // The step's collectives (rank 0's, its mesh subgroups' included): every kind's calls and bytes.
  testing::expect_collectives(cell["comm"], estimate_step_comm(in), in.impl);
}

// small-text (d = 128, 4 heads of 32, 4 layers) reshaped, 3 layers and V = 256: attention-heavy (6 query
// heads of 48: Aq = 2.25 d; I = 96) or MLP-heavy (I = 1024). On the presets (Aq = d, I = 3 d, V >= 2048) the
// head or the embedding sets the ring's peak at every length; on these its attention's or its MLP's backward.
ModelConfig reshaped_small_text(const std::string& name, int64_t heads, int64_t head_dim,
                                int64_t intermediate) {
  ModelConfig c = find_model_preset("small-text");
  c.name = name;
  c.heads = heads;
  c.head_dim = head_dim;
  c.intermediate = intermediate;
  c.vocab = 256;
  c.layers = 3;
  return c;
}

std::string PerRankPeaks::model_dir(const ModelConfig& c) {
  const fs::path dir = dir_ / c.name;
  testing::write_hf_model_dir(
      dir, hf_config_json(c),
      testing::named_tensors_of(Model::random(c, torch::TensorOptions().dtype(torch::kFloat), 3)));
  written_[dir.string()] = c;
  return dir.string();
}

// One rank's estimate (data_parallel_phases: ZeRO-2 buckets and shards around the single-process phases of
// the same schedule) against every rank's measured peak and base, 2 and 4 Gloo ranks, within 2%. The
// smallest lengths that show each peak phase: on `small` at T = 128 the embedding backward (the dense (V, d)
// gradient beside every shard) on 2 ranks, and on 4 ranks, whose shards are half as large, a head chunk
// (streambp-dist) or the head (checkpoint-dist); on `small-text` (V = 2048) at T = 2048 streambp-dist's layer
// MLP backward. The tracking allocator counts the same at any length: T = 512 read the same 4 to 16 bytes.
TEST_F(PerRankPeaks, DataParallelPeakOfEveryRankMatchesItsEstimate) {
  struct Case {
    const char* model;
    int64_t seq_len, ranks;
  };
  // small-moe: routed layers (every expert's buffers at an even share of the rows, memory_terms.h).
  // tiny-glm4-moe: DeepSeek's routing, a shared expert, partial RoPE and a dense first layer, whose gradient
  // group is smaller than a routed layer's. tiny-deepseek: StreamBP through the latent on each rank.
  for (const Case& k :
       {Case{"small", 128, 2}, Case{"small", 128, 4}, Case{"small-text", 2048, 2}, Case{"small-moe", 128, 2},
        Case{"tiny-glm4-moe", 384, 2}, Case{"tiny-deepseek", 384, 2}}) {
    const json results =
        run(per_rank_scenario(k.model, {"streambp-dist", "checkpoint-dist"}, k.seq_len, k.ranks),
            fmt::format("{}-{}-{}", k.model, k.seq_len, k.ranks));
    ASSERT_EQ(results["cells"].size(), 2u);
    for (const auto& c : results["cells"]) {
      ASSERT_EQ(c["status"], "ok") << c["reason"];
      // repeat 0: no timed runs, and the loss is the memory step's.
      EXPECT_TRUE(c.value("time", json()).is_null());
      EXPECT_TRUE(c["loss"].is_number());
      const auto e = estimate_cell(Cell::from_axes(c["axes"]), 1, "cpu", std::nullopt, k.ranks);
      ASSERT_TRUE(e.has_value()) << c["axes"]["impl"];
      EXPECT_EQ(c["memory"]["estimate_bytes"].get<int64_t>(), e->peak_bytes);  // the cell records it
      expect_flops_of_one_rank(c, config_of(k.model), k.seq_len, k.ranks);
      expect_every_rank_near(c, *e, k.model, k.seq_len, k.ranks);
    }
  }
}

// Sequence parallelism (ulysses, streambp-ulysses): every rank's peak and base within 2% of the estimate
// per rank, at lengths where the head (small) or the layers (small-text) set the peak, T odd included, and
// with the checkpoints offloaded (host bytes equal); the rank's counted FLOPs equal the estimate's.
TEST_F(PerRankPeaks, SequenceParallelPeakOfEveryRankMatchesItsEstimate) {
  struct Case {
    std::string model;
    int64_t seq_len, ranks;
    bool offload = false;  // streambp-ulysses alone, its checkpoints in host memory
  };
  // The smallest lengths with the peak phases of any longer one: the embedding's backward (small, 2 ranks),
  // the head or a head chunk (small, 4 ranks), the head or a layer's q, k, v to heads (small-text, T padded;
  // T = 2560 on 2 ranks reads the same phases), with offload too; small-moe's routed layers; ulysses'
  // attention backward (attention-heavy).
  const std::string attention_heavy = model_dir(reshaped_small_text("attention-heavy", 6, 48, 96));
  for (const Case& k :
       {Case{"small", 128, 2}, Case{"small", 512, 4}, Case{"small-text", 2559, 4},
        Case{"small-text", 2048, 2, true}, Case{"small-moe", 128, 2}, Case{attention_heavy, 1200, 2}}) {
    const ModelConfig config = config_of(k.model);
    const json impls = k.offload ? json{"streambp-ulysses"} : json{"streambp-ulysses", "ulysses"};
    const json results =
        run(per_rank_scenario(k.model.c_str(), impls, k.seq_len, k.ranks, k.offload ? "checkpoints" : "none"),
            fmt::format("sp-{}-{}-{}-{}", config.name, k.seq_len, k.ranks, k.offload));
    ASSERT_EQ(results["cells"].size(), impls.size());
    for (const auto& c : results["cells"]) {
      ASSERT_EQ(c["status"], "ok") << c["reason"];
      const auto e = estimate_cell(Cell::from_axes(c["axes"]), 1, "cpu", std::nullopt, k.ranks);
      ASSERT_TRUE(e.has_value()) << c["axes"]["impl"];
      EXPECT_EQ(c["memory"]["estimate_bytes"].get<int64_t>(), e->peak_bytes);
      if (k.offload) {
        EXPECT_EQ(c["memory"]["host_peak_bytes"].get<int64_t>(), e->host_bytes);
        EXPECT_EQ(c["memory"]["host_copy_bytes"].get<int64_t>(), e->offload_traffic_bytes);  // out and back
      }
      expect_flops_of_one_rank(c, config, k.seq_len, k.ranks);
      expect_every_rank_near(c, *e, config.name.c_str(), k.seq_len, k.ranks);
    }
  }
  // bfloat16: streambp-ulysses' dK, dV accumulators are float32, rounded and released before the q, k, v
  // gradients' exchange (counted there, the estimate read 7% over on this model; now 0.7% under).
  json bf16 = per_rank_scenario(attention_heavy.c_str(), json{"streambp-ulysses"}, 1200, 2);
  bf16["grid"]["dtype"] = "bfloat16";
  const json c = run(bf16, "sp-attention-heavy-bf16")["cells"][0];
  ASSERT_EQ(c["status"], "ok") << c["reason"];
  const auto e = estimate_cell(Cell::from_axes(c["axes"]), 1, "cpu", std::nullopt, 2);
  ASSERT_TRUE(e.has_value());
  expect_every_rank_near(c, *e, "attention-heavy bfloat16", 1200, 2);
}

// Ring context parallelism: every rank's peak and base within 2% of the estimate per rank (ring_estimate.h),
// on 2, 3 and 4 ranks, T padded (not a multiple of 2P) and not; the rank's counted FLOPs equal the
// estimate's. Each peak phase of the estimate is some case's: for ring the embedding's backward, the head,
// the ring's attention backward (a b x b pair's kernel beside the travelling K/V pair and its dK/dV
// accumulator), the layer MLP's backward; for streambp-ring the embedding's backward, a head chunk, the
// ring's attention backward and the MLP chunks, and with its checkpoints offloaded (host bytes equal) and in
// bfloat16 (its float32 dQ and dK/dV accumulators; FLOPs are counted in float32 only). On the 2-D mesh (2 x
// 2: Ulysses' exchanges around a ring of 2) ring's attention backward, streambp-ring's ring attention
// backward and MLP chunks (the mesh's head is the plain ring's, on the same rows; checked by hand, 12 bytes).
TEST_F(PerRankPeaks, RingPeakOfEveryRankMatchesItsEstimate) {
  const std::string attention_dir = model_dir(reshaped_small_text("attention-heavy", 6, 48, 96));
  const std::string mlp_dir = model_dir(reshaped_small_text("mlp-heavy", 4, 32, 1024));
  struct Case {
    std::string impl, model;
    int64_t seq_len, ranks;
    std::string peak_phase;  // the estimate's, a prefix of its name
    const char* offload = "none";
    const char* dtype = "float32";
    int64_t ulysses_degree = 1;  // 2: the 2-D mesh, 2 x 2 on 4 ranks
  };
  for (const Case& k :
       {Case{"ring", "small", 128, 2, "embedding backward"}, Case{"ring", "small-text", 2559, 4, "head"},
        Case{"ring", attention_dir, 1200, 2, "layer attention backward"},
        Case{"ring", attention_dir, 1199, 3, "layer attention backward"},
        Case{"ring", attention_dir, 1199, 4, "layer attention backward"},
        Case{"ring", mlp_dir, 1200, 2, "layer mlp backward"},
        Case{"streambp-ring", "small", 128, 2, "embedding backward"},
        Case{"streambp-ring", "small-text", 2559, 4, "head chunk"},
        Case{"streambp-ring", attention_dir, 1200, 2, "layer ring attention backward"},
        // The ring in passes of one K/V head leaves the q, k, v chunks as this shape's peak, which the
        // estimate reads 1.5% under where Aq > d (docs/estimate.md, "Known gaps").
        Case{"streambp-ring", attention_dir, 1199, 4, "layer q, k, v chunks"},
        Case{"streambp-ring", mlp_dir, 1200, 2, "layer mlp chunks"},
        Case{"streambp-ring", "small-text", 1024, 2, "layer mlp chunks", "checkpoints"},
        Case{"streambp-ring", attention_dir, 1200, 2, "layer ring attention backward", "none", "bfloat16"},
        Case{"ring", attention_dir, 1200, 4, "layer attention backward", "none", "float32", 2},
        Case{"streambp-ring", attention_dir, 1200, 4, "layer ring attention backward", "none", "float32", 2},
        Case{"streambp-ring", mlp_dir, 1200, 4, "layer mlp chunks", "none", "float32", 2}}) {
    const ModelConfig config = config_of(k.model);
    json scenario = per_rank_scenario(k.model.c_str(), json{k.impl}, k.seq_len, k.ranks, k.offload);
    scenario["grid"]["dtype"] = k.dtype;
    scenario["grid"]["ulysses_degree"] = k.ulysses_degree;
    const json results = run(scenario, fmt::format("{}-{}-{}-{}-{}-{}-U{}", k.impl, config.name, k.seq_len,
                                                   k.ranks, k.offload, k.dtype, k.ulysses_degree));
    ASSERT_EQ(results["cells"].size(), 1u);
    const json& c = results["cells"][0];
    ASSERT_EQ(c["status"], "ok") << c["reason"];
    const auto e = estimate_cell(Cell::from_axes(c["axes"]), 1, "cpu", std::nullopt, k.ranks);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(c["memory"]["estimate_bytes"].get<int64_t>(), e->peak_bytes);
    EXPECT_EQ(e->dominant_phase.rfind(k.peak_phase, 0), 0u) << k.impl << ": " << e->dominant_phase;
    if (std::string(k.offload) == "checkpoints") {
      EXPECT_EQ(c["memory"]["host_peak_bytes"].get<int64_t>(), e->host_bytes);
      EXPECT_EQ(c["memory"]["host_copy_bytes"].get<int64_t>(), e->offload_traffic_bytes);  // out and back
    }
    expect_flops_of_one_rank(c, config, k.seq_len, k.ranks, k.ulysses_degree);
    expect_every_rank_near(c, *e, config.name.c_str(), k.seq_len, k.ranks);
  }
}

}  // namespace
}  // namespace bpbench::test_per_rank_peaks
