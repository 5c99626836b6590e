// test_dist.cpp: distributed StreamBP over Gloo, 2 and 3 local ranks (separate processes).
//
// Each rank is a child process running one step (tests/support/dist_ranks.h): the same float64 tiny model and
// global batch (examples = B x world size) on every rank, rows [r B, (r+1) B) its own (dist::rank_batch). The
// parent compares the gathered gradients with single-process plain BP on the global batch.
//
// Checked:
//   DistExactness   every parameter's gathered gradient and the loss equal plain BP on the concatenated
//   batch,
//                   relative error < 1e-10 (float64, T = 13 prime, partition 4, logits partition 3, padding,
//                   GQA): SFT and DPO (and GRPO once), world 2 and 3, with and without shard_params, with and
//                   without tied embeddings, streambp-dist and checkpoint-dist (shard_params: the second
//                   step, on a model whose layers are already sharded). Collectives per step, exactly:
//                   reduce_scatter calls = L + 2 (layers, head, embedding), naive_comm: D L + 2 (D = ceil(T /
//                   partition)); their logical bytes = the padded group sizes; all_gather calls = 2 L under
//                   shard_params (forward, backward), else 0; all_reduce = 2.
//   DistFailure     a rank that dies mid-step makes the others fail with a clear error, and the run end, in
//                   < 60 s; a
//                   rendezvous with a missing rank times out (BPBENCH_DIST_TIMEOUT_S=5) with a clear message.
//   DistComm        counting conventions on a world of one; a client whose master never appears times out.
//   DistLaunch      the launcher kills the survivors of a failed rank and names the one that failed.
//   DistMeasure     DISABLED_ (by hand): per-rank peak bytes, BP time and communication of every mode on
//                   `small`, float32, SFT, T = 2048, 2 ranks.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness/run/dist_launch.h"
#include "harness/run/runner.h"
#include "impls/machinery/dist_common.h"
#include "profiles/memory.h"
#include "tests/support/dist_ranks.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_dist {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kT = kDistT, kPartition = kDistPartition;
constexpr double kTol = 1e-10;

LaunchResult launch(const json& job, int world, std::vector<std::pair<std::string, std::string>> env = {},
                    std::chrono::milliseconds grace = std::chrono::seconds(15)) {
  return launch_ranks(job, world, std::move(env), grace);
}

struct DistCase {
  std::string impl, objective;
  int world;
  bool shard_params, naive_comm, tied;
  std::string model = "tiny";  // or tiny-moe (mixture-of-experts layers), tiny-qwen3.5 (Gated DeltaNet)
  double aux = 0.0;            // router_aux_loss_coef: the routers' load-balancing loss on where > 0
};

std::string label(const DistCase& c) {
  return fmt::format("{}_{}_w{}{}{}{}{}{}", c.impl == "streambp-dist" ? "streambp" : "checkpoint",
                     c.objective, c.world, c.shard_params ? "_shard" : "", c.naive_comm ? "_naive" : "",
                     c.tied ? "_tied" : "", preset_suffix(c.model), c.aux > 0 ? "_aux" : "");
}
std::string case_name(const ::testing::TestParamInfo<DistCase>& info) {
  return label(info.param);
}
void PrintTo(const DistCase& c, std::ostream* os) {
  *os << label(c);
}

class DistExactness : public ::testing::TestWithParam<DistCase> {};

json exactness_job(const DistCase& c) {
  return {{"impl", c.impl},
          {"objective", c.objective},
          {"model", c.model},
          {"dtype", "float64"},
          {"shard_params", c.shard_params},
          {"naive_comm", c.naive_comm},
          {"tied", c.tied},
          {"router_aux_loss_coef", c.aux},
          {"warmup", c.shard_params ? 1 : 0}};  // the second step runs on an already sharded model
}

std::vector<DistCase> exactness_cases();

const std::string kExactnessTest = "GatheredGradientsEqualPlainOnConcatenatedBatch";

TEST_P(DistExactness, GatheredGradientsEqualPlainOnConcatenatedBatch) {
  const DistCase& c = GetParam();
  const std::string name = kExactnessTest + "/" + label(c);
  const SharedLaunch& launch =
      shared_launch(rank_cases_of(kExactnessTest, exactness_cases(), label, exactness_job), c.world);
  ASSERT_TRUE(launch.ran(name, c.world));
  const fs::path dir = launch.dir_of(name);
  const json job = exactness_job(c);

  // Reference: single-process plain BP on the global (concatenated) batch, float64.
  Model model = dist_job_model(job);
  auto objective = make_objective(c.objective);
  Batch global = dist_job_global_batch(job, model, c.world);
  const StepResult ref = run_step("plain", model, global, *objective, {kT, kT});

  const json r0 = json::parse(file_text(dir / "rank0.json"));
  const StepResult got = rank0_step(dir);
  expect_same_gradients(ref, got, kTol, label(c));
  EXPECT_TRUE(r0.at("params_restored").get<bool>()) << "restore_parameters";
  EXPECT_TRUE(r0.at("grads_loaded").get<bool>()) << "load_full_gradients";
  for (int r = 1; r < c.world; ++r) {  // every rank reports the same global loss
    const json rr = json::parse(file_text(dir / fmt::format("rank{}.json", r)));
    EXPECT_NEAR(rr.at("loss").get<double>(), ref.loss, kTol * std::abs(ref.loss)) << "rank " << r;
  }

  // Collectives of the step, exactly.
  const int64_t L = model.config.layers, D = (kT + kPartition - 1) / kPartition;
  const bool naive = c.naive_comm && c.impl == "streambp-dist";
  const json& comm = r0.at("comm");
  EXPECT_EQ(comm["reduce_scatter"]["calls"], (naive ? D * L : L) + 2) << comm.dump();
  EXPECT_EQ(comm["reduce_scatter"]["physical"], "all_reduce");  // Gloo has no reduce_scatter
  EXPECT_EQ(comm["all_gather"]["calls"], c.shard_params ? 2 * L : 0);
  // Loss normalisers, loss, and the routers' counts where the load-balancing loss is on.
  EXPECT_EQ(comm["all_reduce"]["calls"], c.aux > 0 ? 3 : 2);
  // Logical bytes: each group's flat gradient, padded to a multiple of the world size, per reduction.
  auto padded = [&](int64_t n) { return (n + c.world - 1) / c.world * c.world * 8; };
  int64_t layer_bytes = 0, other_bytes = 0;
  std::map<std::string, int64_t> group_numel;
  for (const auto& p : model.trainable_parameters()) {
    std::string g = p.name.rfind("model.layers.", 0) == 0 ? p.name.substr(0, p.name.find('.', 13)) : p.name;
    if (g != "model.embed_tokens.weight" && g.rfind("model.layers.", 0) != 0) g = "head";
    group_numel[g] += p.tensor.numel();
  }
  for (const auto& [g, n] : group_numel)
    (g.rfind("model.layers.", 0) == 0 ? layer_bytes : other_bytes) += padded(n);
  EXPECT_EQ(comm["reduce_scatter"]["bytes"], (naive ? D : 1) * layer_bytes + other_bytes);
  if (!naive) expect_collectives_as_estimated(comm, job, model, c.world, label(c));
}

std::vector<DistCase> exactness_cases() {
  std::vector<DistCase> cases;
  for (const std::string objective : {"sft", "dpo"})
    for (int world : {2, 3})
      for (bool shard : {false, true})
        cases.push_back({"streambp-dist", objective, world, shard, false, false});
  cases.push_back({"streambp-dist", "sft", 2, false, true, false});  // naive_comm
  cases.push_back({"streambp-dist", "sft", 3, false, true, false});
  cases.push_back({"streambp-dist", "dpo", 3, true, true, false});
  cases.push_back({"streambp-dist", "sft", 3, true, false, true});  // tied embeddings
  cases.push_back({"streambp-dist", "dpo", 2, false, false, true});
  cases.push_back({"streambp-dist", "grpo", 2, false, false, false});
  for (const std::string objective : {"sft", "dpo"}) {
    cases.push_back({"checkpoint-dist", objective, 2, false, false, false});
    cases.push_back({"checkpoint-dist", objective, 3, true, false, false});
  }
  cases.push_back({"streambp-dist", "sft", 2, false, false, false, "tiny-moe"});
  cases.push_back({"streambp-dist", "grpo", 3, true, false, false, "tiny-moe"});
  cases.push_back({"checkpoint-dist", "dpo", 2, false, false, false, "tiny-moe"});
  // The load-balancing loss over the global batch: every rank's routing counts summed.
  cases.push_back({"streambp-dist", "sft", 2, false, false, false, "tiny-moe", 0.5});
  cases.push_back({"checkpoint-dist", "dpo", 3, true, false, false, "tiny-moe", 0.5});
  // Gated DeltaNet layers: data parallelism leaves each rank's sequences whole, so their state never crosses
  // ranks; naive_comm reduces between the recurrent layers' chunks too.
  cases.push_back({"streambp-dist", "sft", 2, false, true, false, "tiny-qwen3.5"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gloo, DistExactness, ::testing::ValuesIn(exactness_cases()), case_name);

// ---- failures ---------------------------------------------------------------------------------------------

TEST(DistFailure, DeadRankMakesTheOthersFailWithAClearError) {
  TempDir tmp;
  const json job = {
      {"impl", "streambp-dist"}, {"objective", "sft"}, {"die_rank", 1}, {"out", tmp.dir().string()}};
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult run = launch(job, 2, {{"BPBENCH_DIST_TIMEOUT_S", "30"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(seconds, 60.0);
  EXPECT_NE(run.error.find("rank 1 of 2"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("exited with status 7"), std::string::npos) << run.error;
  // The survivor failed on its own (not killed), naming itself and the collective.
  EXPECT_EQ(run.ranks[0].signal, 0) << run.ranks[0].describe();
  const std::string err = file_text(tmp.dir() / "rank0.error");
  EXPECT_NE(err.find("rank 0 of 2 (gloo)"), std::string::npos) << err;
  EXPECT_NE(err.find("reduce_scatter 'head gradients'"), std::string::npos) << err;
  EXPECT_NE(err.find("a peer rank exited or crashed"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
}

TEST(DistFailure, RendezvousWithAMissingRankTimesOut) {
  TempDir tmp;
  const json job = {
      {"impl", "streambp-dist"}, {"objective", "sft"}, {"skip_rank", 2}, {"out", tmp.dir().string()}};
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult run = launch(job, 3, {{"BPBENCH_DIST_TIMEOUT_S", "5"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(seconds, 60.0);
  for (int r : {0, 1}) {
    const std::string err = file_text(tmp.dir() / fmt::format("rank{}.error", r));
    EXPECT_NE(err.find(fmt::format("rank {} of 3", r)), std::string::npos) << err;
    EXPECT_NE(err.find("rendezvous"), std::string::npos) << err;
    EXPECT_NE(err.find("timeout 5 s"), std::string::npos) << err;
  }
}

// ---- the communicator and the launcher, in isolation ------------------------------------------------------

TEST(DistComm, CountsCollectivesOnAWorldOfOne) {
  dist::CommConfig config;
  config.master_port = free_local_port();
  config.timeout = std::chrono::seconds(20);
  auto comm = dist::Communicator::create(config);
  EXPECT_EQ(comm->backend(), "gloo");
  EXPECT_EQ(comm->device(), torch::Device(torch::kCPU));
  auto shard = comm->reduce_scatter(torch::arange(6, torch::kDouble), dist::ReduceOp::avg, "x");
  EXPECT_TRUE(shard.equal(torch::arange(6, torch::kDouble)));
  auto full = comm->all_gather(torch::ones({5}, torch::kFloat), "y");
  EXPECT_EQ(full.numel(), 5);
  auto t = torch::ones({3}, torch::kLong);
  comm->all_reduce(t, dist::ReduceOp::sum, "z");
  comm->broadcast(t, 0, "w");
  comm->barrier("b");
  const auto& s = comm->stats();
  EXPECT_EQ(s[dist::Collective::reduce_scatter].calls, 1);
  EXPECT_EQ(s[dist::Collective::reduce_scatter].bytes, 48);
  EXPECT_EQ(s[dist::Collective::reduce_scatter].physical, "all_reduce");
  EXPECT_EQ(s[dist::Collective::reduce_scatter].wire_bytes, 0);  // one rank sends nothing
  EXPECT_EQ(s[dist::Collective::all_gather].bytes, 20);
  EXPECT_EQ(s[dist::Collective::all_reduce].bytes, 24);
  EXPECT_EQ(s[dist::Collective::broadcast].calls, 1);
  EXPECT_EQ(s[dist::Collective::barrier].calls, 1);
  EXPECT_EQ(s.total_calls(), 5);
  const auto before = s;
  comm->barrier("b2");
  EXPECT_EQ(comm->stats().since(before).total_calls(), 1);
  comm->settle();  // gloo: nothing in flight, returns at once
}

TEST(DistComm, ClientWithoutMasterTimesOutWithAClearError) {
  dist::CommConfig config;
  config.rank = 1;
  config.world_size = 2;
  config.master_port = free_local_port();  // nobody listens
  config.timeout = std::chrono::seconds(2);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dist::Communicator::create(config);
    FAIL() << "rendezvous without a master succeeded";
  } catch (const dist::CommError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1 of 2 (gloo): rendezvous through TCPStore 127.0.0.1:"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("timeout 2 s"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

// NCCL cannot run two ranks on one GPU: a LOCAL_RANK without a GPU of its own is refused before the
// rendezvous, with both numbers, never mapped onto a GPU another rank has (local_rank % device count).
TEST(DistComm, NcclRefusesALocalRankWithoutItsOwnGpu) {
  auto message = [](int local_rank, int gpus) -> std::string {
    try {
      dist::check_nccl_gpu("rank 1 of 2 (nccl)", local_rank, gpus);
    } catch (const dist::CommError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(message(0, 1), "(accepted)");
  EXPECT_EQ(message(3, 4), "(accepted)");
  EXPECT_EQ(
      message(1, 1),
      "rank 1 of 2 (nccl): LOCAL_RANK 1 needs GPU 1 of its own, but only 1 CUDA device is visible: NCCL "
      "cannot run two ranks on one GPU; start at most 1 rank per machine, or use gloo");
  EXPECT_NE(message(4, 4).find("only 4 CUDA devices are visible"), std::string::npos) << message(4, 4);
  EXPECT_NE(message(-1, 2).find("LOCAL_RANK -1"), std::string::npos);
  EXPECT_EQ(message(0, 0),
            "rank 1 of 2 (nccl): LOCAL_RANK 0 needs a GPU, but 0 CUDA devices are visible (NCCL runs on GPUs "
            "only; use gloo)");

  // Through create() on this machine: refused at once, before any rendezvous (nobody listens on the port).
  if (torch::cuda::device_count() > 1) GTEST_SKIP() << "this machine has a GPU per rank";
  dist::CommConfig config;
  config.rank = 1;
  config.world_size = 2;
  config.local_rank = static_cast<int>(torch::cuda::device_count());
  config.backend = "nccl";
  config.master_port = free_local_port();
  config.timeout = std::chrono::seconds(30);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dist::Communicator::create(config);
    ADD_FAILURE() << "nccl without a GPU of its own was accepted";
  } catch (const dist::CommError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(msg.find("CUDA device") != std::string::npos ||
                msg.find("needs a CUDA build") != std::string::npos)
        << msg;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(DistComm, StrategiesRefuseACellWithoutAProcessGroup) {
  if (dist::current_communicator() || dist::CommConfig::env_present()) GTEST_SKIP() << "a group exists";
  for (const std::string impl : {"streambp-dist", "checkpoint-dist"}) {
    auto s = make_strategy(impl);
    EXPECT_TRUE(s->unsupported({"sft", 1}).has_value()) << impl;
    EXPECT_FALSE(s->unsupported({"sft", 2}).has_value()) << impl;
  }
}

TEST(DistLaunch, KillsTheSurvivorsOfAFailedRank) {
  TempDir tmp;
  const json job = {{"mode", "exit"}, {"exit_rank", 1}, {"exit_code", 5}, {"out", tmp.dir().string()}};
  const LaunchResult run = launch(job, 3, {}, std::chrono::seconds(1));
  EXPECT_EQ(run.exit_code, 5);
  EXPECT_NE(run.error.find("rank 1 of 3"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("exited with status 5"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("ranks 0, 2 were stopped"), std::string::npos) << run.error;
  EXPECT_TRUE(run.ranks[0].killed && run.ranks[2].killed);
  EXPECT_LT(run.seconds, 30.0);
}

// ---- measurement (run by hand) ----------------------------------------------------------------------------
//   build-dist/tests/bpbench_tests --gtest_also_run_disabled_tests --gtest_filter='DistMeasure.*'
TEST(DistMeasure, DISABLED_SmallPeakAndCommunication) {
  const int64_t T = std::getenv("BPBENCH_MEASURE_T") ? std::stoll(std::getenv("BPBENCH_MEASURE_T")) : 2048;
  const int64_t part =
      std::getenv("BPBENCH_MEASURE_PARTITION") ? std::stoll(std::getenv("BPBENCH_MEASURE_PARTITION")) : 512;
  struct Mode {
    std::string impl;
    bool shard, naive;
  };
  const std::vector<Mode> modes = {{"streambp-dist", false, false},  {"streambp-dist", false, true},
                                   {"streambp-dist", true, false},   {"checkpoint-dist", false, false},
                                   {"checkpoint-dist", true, false}, {"streambp", false, false},
                                   {"checkpoint", false, false}};
  auto mib = [](const json& v) { return v.get<double>() / (1 << 20); };
  std::string table = fmt::format(
      "model small, float32, SFT, T {}, batch 1 per rank, partition {}, logits_partition {}, 2 ranks (Gloo), "
      "1 "
      "thread per rank; MiB = 2^20 bytes of LibTorch CPU tensors; per step\n"
      "{:<16} {:<19} {:>8} {:>8} {:>8} {:>8} {:>7} {:>5} {:>8} {:>5} {:>8} {:>5} {:>8} {:>7}\n",
      T, part, part, "impl", "mode", "peak r0", "peak r1", "base r0", "end r0", "BP s", "RS #", "RS MiB",
      "AG #", "AG MiB", "AR #", "wire MiB", "comm s");
  json all = json::array();
  for (const auto& m : modes) {
    TempDir tmp;
    const json job = {
        {"impl", m.impl},   {"objective", "sft"},      {"model", "small"},         {"dtype", "float32"},
        {"seq_len", T},     {"partition", part},       {"logits_partition", part}, {"examples_per_rank", 1},
        {"padding", false}, {"shard_params", m.shard}, {"naive_comm", m.naive},    {"warmup", 1},
        {"repeat", 2},      {"gather", false},         {"out", tmp.dir().string()}};
    const LaunchResult run = launch(job, 2, {{"BPBENCH_DIST_TIMEOUT_S", "600"}});
    ASSERT_EQ(run.exit_code, 0) << run.error << rank_errors(tmp.dir(), 2);
    const json r0 = json::parse(file_text(tmp.dir() / "rank0.json")),
               r1 = json::parse(file_text(tmp.dir() / "rank1.json"));
    all.push_back(r0);
    all.push_back(r1);
    const json comm = r0.value("comm", json::object());
    auto get = [&](const char* kind, const char* field) -> double {
      return comm.contains(kind) ? comm[kind][field].get<double>() : 0.0;
    };
    double comm_s = 0, wire = 0;
    for (auto& [k, v] : comm.items()) {
      comm_s += v["seconds"].get<double>();
      wire += v["wire_bytes"].get<double>();
    }
    const std::string mode =
        m.impl.find("-dist") == std::string::npos ? "single process" : r0.at("options").get<std::string>();
    table += fmt::format(
        "{:<16} {:<19} {:>8.1f} {:>8.1f} {:>8.1f} {:>8.1f} {:>7.2f} {:>5} {:>8.2f} {:>5} {:>8.2f} {:>5} "
        "{:>8.2f} "
        "{:>7.3f}\n",
        m.impl, mode, mib(r0["peak_bytes"]), mib(r1["peak_bytes"]), mib(r0["base_bytes"]),
        mib(r0["end_live_bytes"]), r0["seconds"].get<double>(), get("reduce_scatter", "calls"),
        get("reduce_scatter", "bytes") / (1 << 20), get("all_gather", "calls"),
        get("all_gather", "bytes") / (1 << 20), get("all_reduce", "calls"), wire / (1 << 20), comm_s);
  }
  if (const char* path = std::getenv("BPBENCH_MEASURE_JSON")) write_json(path, all);
  std::cout << table;
}

}  // namespace
}  // namespace bpbench::testing::test_dist
