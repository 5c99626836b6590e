// test_train_distributed.cpp: training runs (measure.train) of every distributed strategy through the CLI,
// over 2 and 3 Gloo ranks, against one process's plain BP on the global batch (train_optimizer.h).
//
// Float64, T = 13 (odd: the sequence-parallel layouts pad it), a model whose 6 heads split over 2 and 3
// ranks, warm-up, cosine, weight decay, clipping that bites, held-out losses, 6 steps. Every strategy's
// losses, gradient norms, held-out losses and final weights (their fingerprint: L2 norm and a seeded
// projection per parameter) equal plain's on the global batch to 1e-10: on 2 ranks under every sharding
// with 2 micro-batches a step; zero2 and zero3 with and without the optimizer offloaded, each strategy under
// each on 3 ranks and on 2 (2: zero2 with the optimizer offloaded, zero3 with the parameters too); the mesh
// under every sharding. Every rank's measured device
// peak equals one rank's estimate within 64 bytes (zero3 within 2%), its host peak within 2%, its
// collectives the estimate's. And one step under zero3 where a layer's backward sets the peak, with its
// gathered parameters, on the device or in host memory.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/estimate/estimate_comm.h"
#include "harness/model/hf_model.h"
#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "tests/support/dist_ranks.h"
#include "tests/support/test_support.h"

namespace bpbench::test_train_distributed {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr double kTol = 1e-10;

// tiny with 6 query and K/V heads of 4: Ulysses splits them over 2 and 3 ranks.
ModelConfig six_heads() {
  ModelConfig c = find_model_preset("tiny");
  c.name = "tiny-6h";
  c.heads = 6;
  c.kv_heads = 6;
  c.head_dim = 4;
  return c;
}

class TrainDistributed : public ::testing::Test {
 protected:
  void SetUp() override {
    const ModelConfig c = six_heads();
    model_ = (tmp_.dir() / c.name).string();
    testing::write_hf_model_dir(
        model_, hf_config_json(c),
        testing::named_tensors_of(Model::random(c, torch::TensorOptions().dtype(torch::kFloat), 3)));
  }

  // `bpbench run` on a scenario: its results.json.
  json run(const std::string& name, const json& grid, int64_t world_size, int64_t grad_accum) {
    const json scenario = {{"name", name},
                           {"seed", 5},
                           {"threads", 1},
                           {"world_size", world_size},
                           {"grid", grid},
                           {"measure",
                            {{"memory", true},
                             {"train",
                              {{"steps", 6},
                               {"lr", 0.02},
                               {"warmup_steps", 2},
                               {"weight_decay", 0.1},
                               {"clip_grad_norm", 0.5},
                               {"eval_every", 2},
                               {"eval_batches", 2},
                               {"grad_accum", grad_accum}}}}}};
    const std::string dir = fmt::format("{}-{}", name, runs_++);  // a test may run the same grid twice
    const fs::path file = tmp_.dir() / (dir + ".json"), out = tmp_.dir() / dir, log = tmp_.dir() / "log";
    testing::write_json(file, scenario);
    const int status = std::system(fmt::format("'{}' run '{}' --out '{}' >'{}' 2>&1", BPBENCH_BINARY,
                                               file.string(), out.string(), log.string())
                                       .c_str());
    EXPECT_EQ(status, 0) << testing::file_text(log);
    return testing::json_file(out / "results.json");
  }

  json grid(const json& impls, const json& shardings, int64_t batch, const json& offload = "none") const {
    return {{"model", model_},       {"dtype", "float64"},    {"impl", impls},
            {"sharding", shardings}, {"offload", offload},    {"seq_len", 13},
            {"partition", 4},        {"logits_partition", 3}, {"batch", batch}};
  }

  // Plain BP in one process on the global batch of `examples`.
  json reference(int64_t examples, int64_t grad_accum) {
    return run(fmt::format("plain-{}-{}", examples, grad_accum), grid({"plain"}, "zero2", examples), 1,
               grad_accum)["cells"][0];
  }

  void expect_trajectories(int64_t ranks, int64_t grad_accum, const json& shardings, const json& offload,
                           const json& data_parallel = {"streambp-dist", "checkpoint-dist"},
                           const json& sequence_parallel = {"ulysses", "streambp-ulysses", "ring",
                                                            "streambp-ring"});

  testing::TempDir tmp_;
  std::string model_;
  int runs_ = 0;
};

void expect_near(double got, double want, const std::string& what) {
  EXPECT_LE(std::abs(got - want), kTol * std::max(1.0, std::abs(want)))
      << what << ": " << got << " vs " << want;
}

// Every step, evaluation and final weight of `cell` equals `ref`'s.
void expect_same_run(const json& cell, const json& ref) {
  const std::string who = fmt::format("{} {}", cell["axes"]["impl"].get<std::string>(),
                                      cell["axes"]["sharding"].get<std::string>());
  SCOPED_TRACE(who);
  ASSERT_EQ(cell["status"], "ok") << cell.value("reason", "");
  const json &steps = cell["train"]["steps"], &want = ref["train"]["steps"];
  ASSERT_EQ(steps.size(), want.size());
  for (size_t k = 0; k < steps.size(); ++k) {
    expect_near(steps[k]["loss"], want[k]["loss"], fmt::format("step {} loss", k + 1));
    expect_near(steps[k]["grad_norm"], want[k]["grad_norm"], fmt::format("step {} gradient norm", k + 1));
  }
  const json &evals = cell["train"]["eval"], &want_evals = ref["train"]["eval"];
  ASSERT_EQ(evals.size(), want_evals.size());
  for (size_t k = 0; k < evals.size(); ++k)
    expect_near(evals[k]["loss"], want_evals[k]["loss"], fmt::format("held-out loss {}", k));
  const json &weights = cell["train"]["final_weights"], &want_weights = ref["train"]["final_weights"];
  ASSERT_EQ(weights.size(), want_weights.size());
  for (size_t k = 0; k < weights.size(); ++k) {
    ASSERT_EQ(weights[k]["name"], want_weights[k]["name"]);
    expect_near(weights[k]["l2"], want_weights[k]["l2"], weights[k]["name"].get<std::string>() + " L2");
    expect_near(weights[k]["probe"], want_weights[k]["probe"],
                weights[k]["name"].get<std::string>() + " probe");
  }
}

// Every rank's peak against the estimate the cell records (one rank's, the most). Measured: rank 0 to the
// byte for the data-parallel and the StreamBP strategies, 8 bytes above for ulysses and ring (a loss scalar
// of their step's peak phase); the last rank 32 bytes below (its padding elements have no moments); with
// micro-batches (every shard alive from the second on) within 20 bytes (their loss scalars).
void expect_peaks_at_estimate(const json& cell, int64_t grad_accum = 1) {
  const int64_t estimate = cell["memory"]["estimate_bytes"].get<int64_t>();
  const bool offloaded = cell["axes"]["offload"] != "none";
  // The bytes copied between the device and the host in a step (rank 0's last), as the estimate counts them.
  if (offloaded) {
    EXPECT_GT(cell["memory"].value("host_copy_bytes", int64_t{0}), 0) << cell["memory"].dump();
    EXPECT_EQ(cell["memory"]["host_copy_bytes"], cell["memory"]["estimate_host_copy_bytes"])
        << cell["axes"]["impl"] << " " << cell["axes"]["sharding"] << " " << cell["axes"]["offload"];
  }
  for (const auto& rank : cell["ranks"]) {
    // zero3: within 2% (streambp-ulysses reads 0.5% to 1.0% above, not yet explained: docs/estimate.md's
    // known gaps); so is streambp-ulysses under sharding none with micro-batches (0.27% above here: one
    // (N, c, d) tensor more in its MLP chunks); the others within 64 bytes.
    const bool gap =
        cell["axes"]["sharding"] == "zero3" ||
        (cell["axes"]["sharding"] == "none" && cell["axes"]["impl"] == "streambp-ulysses" && grad_accum > 1);
    const int64_t slack = gap ? estimate / 50 : 64;
    EXPECT_LE(std::abs(rank["peak_bytes"].get<int64_t>() - estimate), slack)
        << cell["axes"]["impl"] << " " << cell["axes"]["sharding"] << " " << cell["axes"]["offload"]
        << " rank " << rank["rank"] << ": measured " << rank["peak_bytes"] << ", estimate " << estimate;
    // The optimizer's host bytes within 2%: its step's two temporaries are bounded by a layer's widest
    // tensor where the rank's slice holds a narrower one (docs/estimate.md, known gaps: 1.7% here).
    if (offloaded) {
      const auto host = rank["host_peak_bytes"].get<double>(),
                 host_estimate = cell["memory"]["estimate_host_bytes"].get<double>();
      EXPECT_NEAR(host / host_estimate, 1.0, 0.02)
          << cell["axes"]["impl"] << " rank " << rank["rank"] << " host: measured " << host << ", estimate "
          << host_estimate;
    }
  }
}

// The last micro-batch's collectives (rank 0's) as the collectives' estimate says, every sharding's.
void expect_collectives_at_estimate(const json& cell) {
  const CommEstimate e = estimate_step_comm(estimate_input_of(
      Cell::from_axes(cell["axes"]), 1, "cpu", std::nullopt, cell["world_size"].get<int64_t>()));
  testing::expect_collectives(
      cell["comm"], e,
      cell["axes"]["impl"].get<std::string>() + " " + cell["axes"]["sharding"].get<std::string>());
}

void TrainDistributed::expect_trajectories(int64_t ranks, int64_t grad_accum, const json& shardings,
                                           const json& offload, const json& data_parallel,
                                           const json& sequence_parallel) {
  const json ref = reference(ranks, grad_accum);
  ASSERT_EQ(ref["status"], "ok") << ref.dump();
  // Data parallel: one example a rank. Sequence parallel: the ranks share the global batch.
  std::vector<json> results;
  if (!data_parallel.empty())
    results.push_back(
        run(fmt::format("dp-{}", ranks), grid(data_parallel, shardings, 1, offload), ranks, grad_accum));
  if (!sequence_parallel.empty())
    results.push_back(run(fmt::format("sp-{}", ranks), grid(sequence_parallel, shardings, ranks, offload),
                          ranks, grad_accum));
  size_t ran = 0;
  for (const json& r : results)
    for (const auto& cell : r["cells"]) {
      ++ran;
      EXPECT_EQ(cell["world_size"], ranks);
      expect_same_run(cell, ref);
      expect_peaks_at_estimate(cell, grad_accum);
      expect_collectives_at_estimate(cell);
    }
  EXPECT_EQ(ran, (data_parallel.size() + sequence_parallel.size()) * shardings.size() * offload.size());
}

// Each sharding on 2 ranks with 2 micro-batches a step (the gradient shards accumulate from the second on):
// none (whole gradients, every weight updated on every rank) and zero3 (the layers' parameters sharded) on
// every strategy; zero1 and zero2 on one data-parallel and one sequence-parallel strategy, whose step and
// optimizer paths are the others' (dist_common.h, train_sharded.cpp).
TEST_F(TrainDistributed, EveryStrategyAndShardingOnTwoRanksWithMicroBatchesFollowsOneProcess) {
  expect_trajectories(2, 2, {"none", "zero3"}, {"none"});
  expect_trajectories(2, 2, {"zero1", "zero2"}, {"none"}, {"streambp-dist"}, {"streambp-ring"});
}

// zero2 and zero3 with and without the optimizer in host memory on 3 ranks (which pad every group: a slice of
// the head, the layers' shards, the optimizer's pieces), every peak against the estimate.
TEST_F(TrainDistributed, EveryStrategyOnThreeRanksWithAndWithoutTheOptimizerOffloadedFollowsOneProcess) {
  expect_trajectories(3, 1, {"zero2", "zero3"}, {"none", "optimizer"});
}

// On 2 ranks zero2 with the optimizer offloaded, and ZeRO-Infinity's offload: zero3's layer shards in host
// memory beside the optimizer, each copied to the device for its gather (zero2 and zero3 without offload:
// the micro-batch test's); every strategy, the device and host peaks against the estimate.
TEST_F(TrainDistributed, EveryStrategyWithTheOptimizerOrTheParametersOffloadedOnTwoRanksFollowsOneProcess) {
  expect_trajectories(2, 1, {"zero2"}, {"optimizer"});
  expect_trajectories(2, 1, {"zero3"}, {"optimizer,parameters"});
}

// The ring strategies' 2-D mesh (Ulysses over the 2 ranks inside a ring of one) under every sharding, one
// micro-batch a step: the trajectories, and none's and zero1's peaks against their estimate too.
TEST_F(TrainDistributed, TheMeshUnderEveryShardingFollowsOneProcess) {
  const json ref = reference(2, 1);
  json g = grid({"ring", "streambp-ring"}, {"none", "zero1", "zero2", "zero3"}, 2);
  g["ulysses_degree"] = 2;
  const json cells = run("mesh", g, 2, 1)["cells"];
  ASSERT_EQ(cells.size(), 8u);
  for (const auto& cell : cells) {
    expect_same_run(cell, ref);
    expect_peaks_at_estimate(cell);
    expect_collectives_at_estimate(cell);
  }
}

// One step (no training) under zero3 at a length where a layer's backward sets each rank's peak (small-text,
// T = 2048): the gathered layer's parameters in every layer phase, the layers' shards in base, or with the
// parameters offloaded in host memory: the device's peak falls by exactly those shards.
TEST_F(TrainDistributed, ZeroThreeStepPeaksAreTheEstimateWithTheGatheredLayer) {
  auto step_cells = [&](const std::string& name, const json& grid) {
    const json scenario = {{"name", name},
                           {"threads", 1},
                           {"world_size", 2},
                           {"grid", grid},
                           {"measure", {{"time", {{"warmup", 1}, {"repeat", 0}}}, {"grad_error", false}}}};
    const fs::path file = tmp_.dir() / (name + ".json"), out = tmp_.dir() / name;
    testing::write_json(file, scenario);
    EXPECT_EQ(std::system(fmt::format("'{}' run '{}' --out '{}' >/dev/null 2>&1", BPBENCH_BINARY,
                                      file.string(), out.string())
                              .c_str()),
              0);
    return testing::json_file(out / "results.json")["cells"];
  };
  const json cells = step_cells("zero3-step", {{"model", "small-text"},
                                               {"impl", {"streambp-dist", "streambp-ulysses"}},
                                               {"sharding", "zero3"},
                                               {"offload", {"none", "parameters"}},
                                               {"seq_len", 2048},
                                               {"partition", 128},
                                               {"logits_partition", 128}});
  ASSERT_EQ(cells.size(), 4u);
  for (const auto& cell : cells) {
    ASSERT_EQ(cell["status"], "ok") << cell.dump();
    expect_peaks_at_estimate(cell);
  }
  for (size_t k : {0, 2}) {  // each impl: offload none, then parameters
    const json &kept = cells[k], &offloaded = cells[k + 1];
    const std::string impl = kept["axes"]["impl"];
    ASSERT_EQ(offloaded["axes"]["offload"], "parameters");
    // The L layer shards are the host's, to the byte, and leave the device's peak; each is copied in for
    // its two gathers: 2 L shards a step.
    const int64_t shards = offloaded["memory"]["estimate_host_bytes"].get<int64_t>();
    EXPECT_GT(shards, 0);
    EXPECT_EQ(offloaded["ranks"][0]["host_peak_bytes"], shards) << impl;
    EXPECT_EQ(kept["memory"]["peak_bytes"].get<int64_t>() - offloaded["memory"]["peak_bytes"].get<int64_t>(),
              shards)
        << impl;
    EXPECT_EQ(offloaded["memory"]["host_copy_bytes"], 2 * shards) << impl;
  }
  // Nothing sharded to offload: a skipped cell with the reason.
  const json zero2 = step_cells("zero2-parameters", {{"model", "tiny"},
                                                     {"impl", "streambp-dist"},
                                                     {"sharding", "zero2"},
                                                     {"offload", "parameters"},
                                                     {"seq_len", 16}})[0];
  EXPECT_EQ(zero2["status"], "skipped");
  EXPECT_EQ(zero2["reason"],
            "offload parameters keeps ZeRO-3's layer shards in host memory (valid with it: a distributed "
            "strategy with sharding zero3)");
}

}  // namespace
}  // namespace bpbench::test_train_distributed
