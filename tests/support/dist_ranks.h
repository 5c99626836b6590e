// dist_ranks.h: the rank side of the distributed tests (test_dist.cpp, test_sequence_parallel.cpp) and
// their launcher.
//
// The test binary re-executes itself (harness/run/dist_launch.h) with --gtest_filter=DistChild.RankBody and
// a job in BPBENCH_DIST_TEST_JOB, or {"jobs": [...]} run in turn on one process group (SharedLaunch); each
// child is one rank: it builds the same float64 model and the same global batch, takes its part
// (dist::local_batch: its examples, or its slice of every sequence), runs the strategy's steps, all-gathers
// the gradient shards and writes rank<r>.json (rank 0 also grads.pt) to the job's "out" directory. Job keys:
// impl, objective, out; model ("tiny" | a preset), dtype, tied, kv_heads, lora_rank, examples_per_rank,
// seq_len, padding, prompt_len, partition, logits_partition, shard_params, naive_comm, warmup, repeat,
// threads, gather, nodes (torchrun-style nodes on this machine, dist_launch.h); for the failure tests mode,
// exit_rank, exit_code, skip_rank, die_rank.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "harness/estimate/estimate_comm.h"
#include "harness/run/dist_launch.h"
#include "impls/interface/strategy.h"
#include "impls/machinery/comm.h"
#include "tests/support/test_support.h"

namespace bpbench::testing {

inline constexpr int64_t kDistT = 13, kDistPartition = 4, kDistLogitsPartition = 3, kDistExamplesPerRank = 2;

// The job's model (float64 "tiny" with its kv_heads / tied / LoRA, or a preset in its dtype) and the
// strategy it names (distributed ones with the job's options).
Model dist_job_model(const nlohmann::json& job);
std::unique_ptr<Strategy> dist_job_strategy(const nlohmann::json& job);
// The global batch of the job on `world` ranks (examples_per_rank x world for data parallel,
// examples_per_rank shared by sequence-parallel ranks).
Batch dist_job_global_batch(const nlohmann::json& job, Model& model, int world);

// Rank 0's loss, parameter names and gathered gradients (grads.pt) in `dir`, as a single-process step's.
StepResult rank0_step(const std::filesystem::path& dir);

// For ranks that share the same sequences (ulysses, ring): the job's launch in `dir` against single-process
// plain BP on the whole sequences, float64: rank 0's gathered gradients and loss, and every rank's loss,
// within `tol`. Returns the job's model (for the collectives' counts).
Model expect_plain_on_whole_sequences(const nlohmann::json& job, const std::filesystem::path& dir, int world,
                                      double tol, const std::string& label);

// A rank's step's collectives ("comm" of rank<r>.json) against the collectives' estimate
// (harness/estimate/estimate_comm.h) of the job on `world` ranks, 3 GRPO completions an example: every
// kind's calls and bytes equal, but for the one all_reduce of the routers' counts, which it leaves out, where
// the job's load-balancing loss is on.
void expect_collectives_as_estimated(const nlohmann::json& comm, const nlohmann::json& job,
                                     const Model& model, int world, const std::string& label);
// A step's "comm" against an estimate `e`: every kind's calls and bytes, but for one all_reduce more (its
// bytes unchecked) where `router_counts` (the routers' load-balancing counts, which the estimate leaves out).
void expect_collectives(const nlohmann::json& comm, const CommEstimate& e, const std::string& label,
                        bool router_counts = false);

// A rank's body for a job with "piece": NAME in place of a strategy's steps: a test file registers its own
// (`const bool registered = register_rank_piece("name", &body);`) and its ranks run it on the launch's
// group, writing rank<r>.json (the launch's sign of a finished job) and whatever else into `out`.
using RankPiece = void (*)(const nlohmann::json& job, dist::Communicator& comm,
                           const std::filesystem::path& out);
bool register_rank_piece(const std::string& name, RankPiece body);

// Launches `job` on `world` local ranks.
LaunchResult launch_ranks(const nlohmann::json& job, int world,
                          std::vector<std::pair<std::string, std::string>> env = {},
                          std::chrono::milliseconds grace = std::chrono::seconds(15));
// A case of a parameterised distributed suite: its GoogleTest name (as "Test/label"), world size and job
// (without "out").
struct RankCase {
  std::string name;
  int world;
  nlohmann::json job;
};

// One RankCase per parameter of the TEST_P named `test`, named as GoogleTest names its case ("test/label").
template <class Param, class Label, class Job>
std::vector<RankCase> rank_cases_of(const std::string& test, const std::vector<Param>& params, Label label,
                                    Job job) {
  std::vector<RankCase> cases;
  for (const Param& p : params) cases.push_back({test + "/" + label(p), p.world, job(p)});
  return cases;
}

// Jobs on one process group: each rank starts once and runs them in turn, the case named N writing to
// dir_of(N). The exactness cases of one world size share such a launch: one launch per case started every
// rank again (about 0.55 s of CPU each here, LibTorch's start) for steps of a few milliseconds. A job that
// fails ends the launch, and the jobs after it leave no results.
class SharedLaunch {
 public:
  SharedLaunch(const std::vector<RankCase>& cases, int world);
  std::filesystem::path dir_of(const std::string& name) const { return tmp_.dir() / name; }
  // Whether the case named `name` left its results; if not, the launch's and the ranks' errors.
  ::testing::AssertionResult ran(const std::string& name, int world) const;

 private:
  TempDir tmp_;
  LaunchResult run_;
};

// The launch of every case of `cases` with `world` ranks that this process runs (GoogleTest's filter and
// shard), made once per suite and world size. Called from a case of that suite.
const SharedLaunch& shared_launch(const std::vector<RankCase>& cases, int world);

// Every rank<r>.error in `dir`, concatenated.
std::string rank_errors(const std::filesystem::path& dir, int world);

}  // namespace bpbench::testing
