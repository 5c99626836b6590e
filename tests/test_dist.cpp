// test_dist.cpp: distributed StreamBP over Gloo, 2 and 3 local ranks (separate processes).
//
// The test binary re-executes itself (harness/run/dist_launch.h) with --gtest_filter=DistChild.RankBody and a
// job in BPBENCH_DIST_TEST_JOB; each child is one rank: it builds the same float64 tiny model and the same
// global batch (examples = B x world size), takes rows [r B, (r+1) B) (dist::rank_batch), runs one step of
// the strategy, all-gathers the gradient shards and (rank 0) writes them with the loss and the collective
// counts to a temporary directory. The parent compares them with single-process plain BP on the global batch.
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
#include "impls/dist_common.h"
#include "profiles/memory.h"
#include "tests/test_support.h"

namespace bpbench::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kT = 13, kPartition = 4, kLogitsPartition = 3, kExamplesPerRank = 2;
constexpr double kTol = 1e-10;

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "bpbench-dist-XXXXXX").string();
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

BatchSpec spec_for(const json& job, int64_t vocab, int world) {
  BatchSpec s;
  s.examples = job.value("examples_per_rank", kExamplesPerRank) * world;
  s.seq_len = job.value("seq_len", kT);
  s.padding = job.value("padding", true);
  const std::string objective = job.at("objective");
  s.prompt_len = objective == "sft" ? -1 : job.value("prompt_len", int64_t{8});
  s.group = 3;
  s.beta = 0.1;
  s.seed = 3;
  s.vocab = vocab;
  return s;
}

Model model_for(const json& job) {
  const std::string name = job.value("model", "tiny");
  if (name == "tiny") return tiny_model({2, job.value("tied", false)});
  return load_model(name, torch::TensorOptions().dtype(parse_dtype(job.value("dtype", "float32"))), 0);
}

// ---- the rank side ----------------------------------------------------------------------------------------

// A rank that dies in the middle of a step: the objective exits the process when the LM head first asks it
// for token sums (after the step's first collective, before the head's reduce_scatter).
class DyingObjective final : public Objective {
 public:
  explicit DyingObjective(std::unique_ptr<Objective> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  Batch make_batch(const BatchSpec& spec, Model& model, int64_t rows) const override {
    return inner_->make_batch(spec, model, rows);
  }
  torch::Tensor token_sums(const torch::Tensor&, const Batch&, int64_t) const override { std::_Exit(7); }
  torch::Tensor outer(const torch::Tensor& sums, const Batch& batch) const override {
    return inner_->outer(sums, batch);
  }
  bool outer_is_linear() const override { return inner_->outer_is_linear(); }

 private:
  std::unique_ptr<Objective> inner_;
};

void write_json(const fs::path& p, const json& j) {
  std::ofstream(p) << j.dump(2) << "\n";
}

int rank_main(const json& job) {
  auto& rec = profiles::MemoryRecorder::instance();  // before the first tensor
  torch::set_num_threads(job.value("threads", 1));
  const fs::path out = job.at("out").get<std::string>();
  const int rank = std::stoi(std::getenv("RANK")), world = std::stoi(std::getenv("WORLD_SIZE"));
  const std::string mode = job.value("mode", "step");
  if (mode == "exit") {  // the launcher test: rank `exit_rank` fails at once, the others hang
    if (rank == job.at("exit_rank").get<int>()) return job.value("exit_code", 5);
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  if (rank == job.value("skip_rank", -1)) return 0;  // a rank that never joins the rendezvous
  try {
    auto comm = dist::Communicator::create(dist::CommConfig::from_env());
    dist::set_current_communicator(comm.get());
    Model model = [&] {
      profiles::MemoryScope scope(profiles::Category::params);
      return model_for(job);
    }();
    std::unique_ptr<Objective> objective = make_objective(job.at("objective"));
    if (rank == job.value("die_rank", -1)) objective = std::make_unique<DyingObjective>(std::move(objective));
    const Partitioning part{job.value("partition", kPartition),
                            job.value("logits_partition", kLogitsPartition)};
    Batch global = objective->make_batch(spec_for(job, model.config.vocab, world), model, part.logits_rows);
    Batch local = dist::rank_batch(global, rank, world);
    global = Batch();

    dist::DistOptions options;
    options.shard_params = job.value("shard_params", false);
    options.naive_comm = job.value("naive_comm", false);
    const std::string impl = job.at("impl");
    const bool distributed = impl == "streambp-dist" || impl == "checkpoint-dist";
    std::unique_ptr<Strategy> strategy = impl == "streambp-dist"     ? make_streambp_dist(options)
                                         : impl == "checkpoint-dist" ? make_checkpoint_dist(options)
                                                                     : make_strategy(impl);
    auto* dist_strategy = dynamic_cast<dist::DistStrategy*>(strategy.get());
    const StepInputs in{model, local, *objective, part};

    // Warm-up steps, then measured ones: memory from the first measured step, time the fastest.
    double loss = 0, seconds = std::numeric_limits<double>::infinity();
    int64_t base = 0, peak = 0, end_live = 0;
    profiles::CategoryBytes peak_cats{};
    const int warmup = job.value("warmup", 0), repeat = job.value("repeat", 1);
    for (int s = 0; s < warmup + repeat; ++s) {
      for (auto& p : model.trainable_parameters()) p.tensor.mutable_grad().reset();
      comm->barrier("before step");
      rec.reset_peak();
      const int64_t live = rec.live_bytes();
      const auto t0 = std::chrono::steady_clock::now();
      loss = strategy->forward_backward(in).item<double>();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s == warmup) {
        base = live;
        peak = rec.peak_bytes();
        peak_cats = rec.peak_by_category();
        end_live = rec.live_bytes();  // what the step leaves: full gradients, or this rank's shards
      }
      if (s >= warmup) seconds = std::min(seconds, dt);
    }
    json result = {{"rank", rank},
                   {"loss", loss},
                   {"seconds", seconds},
                   {"base_bytes", base},
                   {"peak_bytes", peak},
                   {"step_peak_bytes", peak - base},
                   {"end_live_bytes", end_live},
                   {"impl", impl},
                   {"options", options.label()}};
    if (dist_strategy) result["comm"] = dist_strategy->last_step_comm().to_json();
    json peak_by_category = json::object();
    for (int c = 0; c < profiles::kCategoryCount; ++c)
      peak_by_category[profiles::category_name(static_cast<profiles::Category>(c))] = peak_cats[c];
    result["peak_by_category"] = peak_by_category;

    if (distributed && job.value("gather", true)) {
      auto grads = dist_strategy->gather_full_gradients();
      std::vector<std::string> names;
      std::vector<torch::Tensor> tensors;
      for (auto& g : grads) {
        names.push_back(g.name);
        tensors.push_back(g.tensor.to(torch::kDouble));
      }
      result["names"] = names;
      if (rank == 0) torch::save(tensors, (out / "grads.pt").string());

      // What a runner does for its gradient-error report: full parameters back, full gradients into .grad.
      dist_strategy->restore_parameters(model);
      dist_strategy->load_full_gradients(model);
      const Model fresh = model_for(job);
      const auto now = model.named_parameters(), then = fresh.named_parameters();
      bool params_restored = now.size() == then.size(), grads_loaded = true;
      for (size_t k = 0; params_restored && k < now.size(); ++k)
        params_restored = now[k].tensor.equal(then[k].tensor);
      const auto trainable = model.trainable_parameters();
      for (size_t k = 0; k < trainable.size(); ++k)
        grads_loaded = grads_loaded && trainable[k].tensor.grad().defined() &&
                       trainable[k].tensor.grad().to(torch::kDouble).equal(tensors.at(k));
      result["params_restored"] = params_restored;
      result["grads_loaded"] = grads_loaded;
    }
    write_json(out / fmt::format("rank{}.json", rank), result);
    comm->barrier("end");  // rank 0 holds the store: nobody leaves while another still needs it
    return 0;
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
    std::ofstream(out / fmt::format("rank{}.error", rank)) << what << "\n";
    std::cerr << "rank " << rank << ": " << what << "\n";
    return 3;
  }
}

// One rank of a parent's launch; skipped in an ordinary test run.
TEST(DistChild, RankBody) {
  const char* job = std::getenv("BPBENCH_DIST_TEST_JOB");
  if (!job) GTEST_SKIP() << "runs only as a rank launched by the other Dist tests";
  const int code = rank_main(json::parse(job));
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(code);  // no static destructors: a rank's exit must never wait on a peer
}

// ---- the parent side --------------------------------------------------------------------------------------

LaunchResult launch(const json& job, int world, std::vector<std::pair<std::string, std::string>> env = {},
                    std::chrono::milliseconds grace = std::chrono::seconds(15)) {
  LaunchOptions o;
  o.world_size = world;
  o.args = {"--gtest_filter=DistChild.RankBody"};
  env.emplace_back("BPBENCH_DIST_TEST_JOB", job.dump());
  env.emplace_back("OMP_NUM_THREADS", "1");
  // A sharded test process (ctest's shard_K_of_N) hands GoogleTest's shard variables down: the child must run
  // its one filtered test whichever shard that lands in.
  env.emplace_back("GTEST_TOTAL_SHARDS", "1");
  env.emplace_back("GTEST_SHARD_INDEX", "0");
  o.env = env;
  o.grace = grace;
  o.timeout = std::chrono::seconds(300);
  return launch_local_ranks(o);
}

std::string rank_errors(const fs::path& dir, int world) {
  std::string all;
  for (int r = 0; r < world; ++r)
    if (fs::exists(dir / fmt::format("rank{}.error", r))) all += slurp(dir / fmt::format("rank{}.error", r));
  return all;
}

struct DistCase {
  std::string impl, objective;
  int world;
  bool shard_params, naive_comm, tied;
};

std::string label(const DistCase& c) {
  return fmt::format("{}_{}_w{}{}{}{}", c.impl == "streambp-dist" ? "streambp" : "checkpoint", c.objective,
                     c.world, c.shard_params ? "_shard" : "", c.naive_comm ? "_naive" : "",
                     c.tied ? "_tied" : "");
}
std::string case_name(const ::testing::TestParamInfo<DistCase>& info) {
  return label(info.param);
}
void PrintTo(const DistCase& c, std::ostream* os) {
  *os << label(c);
}

class DistExactness : public ::testing::TestWithParam<DistCase> {};

TEST_P(DistExactness, GatheredGradientsEqualPlainOnConcatenatedBatch) {
  const DistCase& c = GetParam();
  TempDir tmp;
  const json job = {{"impl", c.impl},
                    {"objective", c.objective},
                    {"shard_params", c.shard_params},
                    {"naive_comm", c.naive_comm},
                    {"tied", c.tied},
                    {"warmup", c.shard_params ? 1 : 0},  // the second step runs on an already sharded model
                    {"out", tmp.path().string()}};
  const LaunchResult run = launch(job, c.world);
  ASSERT_EQ(run.exit_code, 0) << run.error << "\n" << rank_errors(tmp.path(), c.world);

  // Reference: single-process plain BP on the global (concatenated) batch, float64.
  Model model = tiny_model({2, c.tied});
  auto objective = make_objective(c.objective);
  Batch global = objective->make_batch(spec_for(job, model.config.vocab, c.world), model, kLogitsPartition);
  const StepResult ref = run_step("plain", model, global, *objective, {kT, kT});

  const json r0 = json::parse(slurp(tmp.path() / "rank0.json"));
  StepResult got;
  got.loss = r0.at("loss");
  got.names = r0.at("names").get<std::vector<std::string>>();
  torch::load(got.grads, (tmp.path() / "grads.pt").string());
  expect_same_gradients(ref, got, kTol, label(c));
  EXPECT_TRUE(r0.at("params_restored").get<bool>()) << "restore_parameters";
  EXPECT_TRUE(r0.at("grads_loaded").get<bool>()) << "load_full_gradients";
  for (int r = 1; r < c.world; ++r) {  // every rank reports the same global loss
    const json rr = json::parse(slurp(tmp.path() / fmt::format("rank{}.json", r)));
    EXPECT_NEAR(rr.at("loss").get<double>(), ref.loss, kTol * std::abs(ref.loss)) << "rank " << r;
  }

  // Collectives of the step, exactly.
  const int64_t L = model.config.layers, D = (kT + kPartition - 1) / kPartition;
  const bool naive = c.naive_comm && c.impl == "streambp-dist";
  const json& comm = r0.at("comm");
  EXPECT_EQ(comm["reduce_scatter"]["calls"], (naive ? D * L : L) + 2) << comm.dump();
  EXPECT_EQ(comm["reduce_scatter"]["physical"], "all_reduce");  // Gloo has no reduce_scatter
  EXPECT_EQ(comm["all_gather"]["calls"], c.shard_params ? 2 * L : 0);
  EXPECT_EQ(comm["all_reduce"]["calls"], 2);  // loss normalisers, loss
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
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gloo, DistExactness, ::testing::ValuesIn(exactness_cases()), case_name);

// ---- failures ---------------------------------------------------------------------------------------------

TEST(DistFailure, DeadRankMakesTheOthersFailWithAClearError) {
  TempDir tmp;
  const json job = {
      {"impl", "streambp-dist"}, {"objective", "sft"}, {"die_rank", 1}, {"out", tmp.path().string()}};
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult run = launch(job, 2, {{"BPBENCH_DIST_TIMEOUT_S", "30"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(seconds, 60.0);
  EXPECT_NE(run.error.find("rank 1 of 2"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("exited with status 7"), std::string::npos) << run.error;
  // The survivor failed on its own (not killed), naming itself and the collective.
  EXPECT_EQ(run.ranks[0].signal, 0) << run.ranks[0].describe();
  const std::string err = slurp(tmp.path() / "rank0.error");
  EXPECT_NE(err.find("rank 0 of 2 (gloo)"), std::string::npos) << err;
  EXPECT_NE(err.find("reduce_scatter 'head gradients'"), std::string::npos) << err;
  EXPECT_NE(err.find("a peer rank exited or crashed"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
}

TEST(DistFailure, RendezvousWithAMissingRankTimesOut) {
  TempDir tmp;
  const json job = {
      {"impl", "streambp-dist"}, {"objective", "sft"}, {"skip_rank", 2}, {"out", tmp.path().string()}};
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult run = launch(job, 3, {{"BPBENCH_DIST_TIMEOUT_S", "5"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(seconds, 60.0);
  for (int r : {0, 1}) {
    const std::string err = slurp(tmp.path() / fmt::format("rank{}.error", r));
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
  const json job = {{"mode", "exit"}, {"exit_rank", 1}, {"exit_code", 5}, {"out", tmp.path().string()}};
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
        {"impl", m.impl},   {"objective", "sft"},      {"model", "small"},          {"dtype", "float32"},
        {"seq_len", T},     {"partition", part},       {"logits_partition", part},  {"examples_per_rank", 1},
        {"padding", false}, {"shard_params", m.shard}, {"naive_comm", m.naive},     {"warmup", 1},
        {"repeat", 2},      {"gather", false},         {"out", tmp.path().string()}};
    const LaunchResult run = launch(job, 2, {{"BPBENCH_DIST_TIMEOUT_S", "600"}});
    ASSERT_EQ(run.exit_code, 0) << run.error << rank_errors(tmp.path(), 2);
    const json r0 = json::parse(slurp(tmp.path() / "rank0.json")),
               r1 = json::parse(slurp(tmp.path() / "rank1.json"));
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
}  // namespace bpbench::testing
