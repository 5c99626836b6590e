// dist_ranks.cpp: one rank of a distributed test (DistChild.RankBody) and the launcher of its parents (see
// dist_ranks.h).
#include "tests/support/dist_ranks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "harness/estimate/estimate_comm.h"
#include "harness/run/runner.h"
#include "impls/machinery/dist_common.h"
#include "profiles/memory.h"
#include "tests/support/test_support.h"

namespace bpbench::testing {

namespace fs = std::filesystem;
using nlohmann::json;

StepResult rank0_step(const fs::path& dir) {
  const json r0 = json::parse(file_text(dir / "rank0.json"));
  StepResult got;
  got.loss = r0.at("loss");
  got.names = r0.at("names").get<std::vector<std::string>>();
  torch::load(got.grads, (dir / "grads.pt").string());
  return got;
}

Model dist_job_model(const json& job) {
  const std::string name = job.value("model", "tiny");
  Model m =
      name == "tiny"
          ? tiny_model({job.value("kv_heads", int64_t{2}), job.value("tied", false)})
          : load_model(name, torch::TensorOptions().dtype(parse_dtype(job.value("dtype", "float32"))), 0);
  spread_routers(m, 8);
  m.router_balance = std::make_shared<RouterBalance>(job.value("router_aux_loss_coef", 0.0));
  if (const int64_t r = job.value("lora_rank", int64_t{0}); r > 0) {
    m.add_lora(r, 2.0 * static_cast<double>(r), 4);
    // B starts at zero, which makes dL/dA zero too: randomise it so both adapter gradients are exercised.
    torch::NoGradGuard no_grad;
    torch::manual_seed(9);
    for (auto& p : m.trainable_parameters())
      if (p.name.find("lora_B") != std::string::npos) p.tensor.normal_(0.0, 0.05);
  }
  return m;
}

std::unique_ptr<Strategy> dist_job_strategy(const json& job) {
  dist::DistOptions options;
  options.shard_params = job.value("shard_params", false);
  options.naive_comm = job.value("naive_comm", false);
  options.ulysses_degree = job.value("ulysses_degree", int64_t{1});
  const std::string impl = job.at("impl");
  auto strategy = make_strategy(impl);
  if (dynamic_cast<const dist::DistStrategy*>(strategy.get()))
    return make_distributed_strategy(impl, options);
  return strategy;
}

Batch dist_job_global_batch(const json& job, Model& model, int world) {
  const auto strategy = dist_job_strategy(job);
  BatchSpec s;
  s.examples = dist::global_examples(*strategy, job.value("examples_per_rank", kDistExamplesPerRank), world);
  s.seq_len = job.value("seq_len", kDistT);
  s.padding = job.value("padding", true);
  const std::string objective = job.at("objective");
  s.prompt_len = objective == "sft" ? -1 : job.value("prompt_len", int64_t{8});
  s.group = 3;
  s.beta = 0.1;
  s.seed = 3;
  s.vocab = model.config.vocab;
  return make_objective(objective)->make_batch(s, model, job.value("logits_partition", kDistLogitsPartition));
}

namespace {
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
  std::string outer_description() const override { return inner_->outer_description(); }
  int64_t sequences_per_example(int64_t group) const override { return inner_->sequences_per_example(group); }
  int64_t extra_batch_bytes(int64_t sequences, int64_t rows) const override {
    return inner_->extra_batch_bytes(sequences, rows);
  }
  bool mean_over_target_tokens() const override { return inner_->mean_over_target_tokens(); }
  bool reads_data_files() const override { return inner_->reads_data_files(); }

 private:
  std::unique_ptr<Objective> inner_;
};

// One job's steps on the launch's process group: the model, the strategy's steps (warm-up, then measured
// ones: memory from the first measured step, time the fastest), rank<r>.json (rank 0 also grads.pt) in "out".
void run_job(const json& job, dist::Communicator& comm, int rank, int world) {
  auto& rec = profiles::MemoryRecorder::instance();
  const fs::path out = job.at("out").get<std::string>();
  Model model = [&] {
    profiles::MemoryScope scope(profiles::Category::params);
    return dist_job_model(job);
  }();
  std::unique_ptr<Objective> objective = make_objective(job.at("objective"));
  if (rank == job.value("die_rank", -1)) objective = std::make_unique<DyingObjective>(std::move(objective));
  const Partitioning part{job.value("partition", kDistPartition),
                          job.value("logits_partition", kDistLogitsPartition)};
  std::unique_ptr<Strategy> strategy = dist_job_strategy(job);
  auto* dist_strategy = dynamic_cast<dist::DistStrategy*>(strategy.get());
  const bool distributed = dist_strategy != nullptr;
  Batch local = dist_job_global_batch(job, model, world);
  if (distributed) local = dist::local_batch(*strategy, local, rank, world);
  const std::string impl = job.at("impl");
  const dist::DistOptions options = distributed ? dist_strategy->options() : dist::DistOptions{};
  const StepInputs in{model, local, *objective, part};

  double loss = 0, seconds = std::numeric_limits<double>::infinity();
  int64_t base = 0, peak = 0, end_live = 0;
  profiles::CategoryBytes peak_cats{};
  const int warmup = job.value("warmup", 0), repeat = job.value("repeat", 1);
  for (int s = 0; s < warmup + repeat; ++s) {
    for (auto& p : model.trainable_parameters()) p.tensor.mutable_grad().reset();
    comm.barrier("before step");
    rec.reset_peak();
    const int64_t live = rec.live_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    loss = strategy->step(in).item<double>();
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
                 {"local_rank", std::stoi(std::getenv("LOCAL_RANK"))},
                 {"node", std::stoi(std::getenv("GROUP_RANK"))},
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
    const Model fresh = dist_job_model(job);
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
}

std::map<std::string, RankPiece>& rank_pieces() {
  static std::map<std::string, RankPiece> pieces;
  return pieces;
}

// A launch's job, or its "jobs" in turn on one process group (SharedLaunch). The launch-wide keys (threads,
// mode, exit_rank, exit_code, skip_rank) are the first job's.
int rank_main(const json& launch) {
  profiles::MemoryRecorder::instance();  // before the first tensor
  const std::vector<json> jobs =
      launch.contains("jobs") ? launch["jobs"].get<std::vector<json>>() : std::vector<json>{launch};
  const json& first = jobs.at(0);
  torch::set_num_threads(first.value("threads", 1));
  fs::path out = first.at("out").get<std::string>();
  const int rank = std::stoi(std::getenv("RANK")), world = std::stoi(std::getenv("WORLD_SIZE"));
  const std::string mode = first.value("mode", "step");
  if (mode == "exit") {  // the launcher test: rank `exit_rank` fails at once, the others hang
    if (rank == first.at("exit_rank").get<int>()) return first.value("exit_code", 5);
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  if (rank == first.value("skip_rank", -1)) return 0;  // a rank that never joins the rendezvous
  try {
    auto comm = dist::Communicator::create(dist::CommConfig::from_env());
    dist::set_current_communicator(comm.get());
    for (const json& job : jobs) {
      out = job.at("out").get<std::string>();
      if (job.contains("piece"))
        rank_pieces().at(job["piece"].get<std::string>())(job, *comm, out);
      else
        run_job(job, *comm, rank, world);
    }
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

}  // namespace

void expect_collectives_as_estimated(const json& comm, const json& job, const Model& model, int world,
                                     const std::string& label) {
  EstimateInput in;
  in.config = model.config;
  in.impl = job.at("impl").get<std::string>();
  in.objective = job.at("objective").get<std::string>();
  in.seq_len = job.value("seq_len", kDistT);
  in.sequences = sequences_for(in.objective, job.value("examples_per_rank", kDistExamplesPerRank), 3);
  in.dtype = model.dtype();
  in.lora_rank = job.value("lora_rank", int64_t{0});
  in.ranks = world;
  in.ulysses_degree = job.value("ulysses_degree", int64_t{1});
  in.sharding = job.value("shard_params", false) ? "zero3" : "zero2";
  expect_collectives(comm, estimate_step_comm(in), label, job.value("router_aux_loss_coef", 0.0) > 0);
}

void expect_collectives(const json& comm, const CommEstimate& e, const std::string& label,
                        bool router_counts) {
  for (int k = 0; k < dist::kCollectiveCount; ++k) {
    const auto kind = static_cast<dist::Collective>(k);
    const char* name = dist::collective_name(kind);
    const bool counts = kind == dist::Collective::all_reduce && router_counts;
    EXPECT_EQ(comm[name]["calls"].get<int64_t>(), e.calls(kind) + (counts ? 1 : 0)) << label << " " << name;
    if (!counts) EXPECT_EQ(comm[name]["bytes"].get<int64_t>(), e.bytes(kind)) << label << " " << name;
  }
}

Model expect_plain_on_whole_sequences(const json& job, const fs::path& dir, int world, double tol,
                                      const std::string& label) {
  Model model = dist_job_model(job);
  const std::string objective_name = job.at("objective");
  auto objective = make_objective(objective_name);
  const Batch global = dist_job_global_batch(job, model, world);
  EXPECT_EQ(global.examples, kDistExamplesPerRank) << "the ranks share the same sequences";
  const int64_t T = job.value("seq_len", kDistT);
  const StepResult ref = run_step("plain", model, global, *objective, {T, T});
  expect_same_gradients(ref, rank0_step(dir), tol, label);
  for (int r = 1; r < world; ++r) {  // every rank reports the same loss
    const json rr = json::parse(file_text(dir / fmt::format("rank{}.json", r)));
    EXPECT_NEAR(rr.at("loss").get<double>(), ref.loss, tol * std::abs(ref.loss)) << "rank " << r;
  }
  return model;
}

bool register_rank_piece(const std::string& name, RankPiece body) {
  rank_pieces()[name] = body;
  return true;
}

LaunchResult launch_ranks(const json& job, int world, std::vector<std::pair<std::string, std::string>> env,
                          std::chrono::milliseconds grace) {
  LaunchOptions o;
  o.world_size = world;
  o.nodes = job.value("nodes", 1);
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

SharedLaunch::SharedLaunch(const std::vector<RankCase>& cases, int world) {
  json jobs = json::array();
  for (const RankCase& c : cases) {
    fs::create_directories(dir_of(c.name));
    json job = c.job;
    job["out"] = dir_of(c.name).string();
    jobs.push_back(job);
  }
  run_ = launch_ranks({{"jobs", jobs}}, world);
}

::testing::AssertionResult SharedLaunch::ran(const std::string& name, int world) const {
  if (fs::exists(dir_of(name) / "rank0.json")) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << run_.error << "\n"
         << rank_errors(dir_of(name), world) << "(the launch runs its cases in turn: one that fails ends it)";
}

namespace {

// The launches made in this process, by suite and world size. Their folders go when the test run ends
// (GoogleTest's environment teardown), not in static destructors, which tests/support/test_main.cpp skips.
class SharedLaunches : public ::testing::Environment {
 public:
  static SharedLaunches& instance() {
    static SharedLaunches* const launches = [] {
      auto* env = new SharedLaunches;
      ::testing::AddGlobalTestEnvironment(env);  // GoogleTest owns it
      return env;
    }();
    return *launches;
  }
  std::unique_ptr<SharedLaunch>& of(const std::string& suite, int world) { return launches_[{suite, world}]; }
  void TearDown() override { launches_.clear(); }

 private:
  std::map<std::pair<std::string, int>, std::unique_ptr<SharedLaunch>> launches_;
};

}  // namespace

const SharedLaunch& shared_launch(const std::vector<RankCase>& cases, int world) {
  const auto* unit = ::testing::UnitTest::GetInstance();
  const std::string suite = unit->current_test_info()->test_suite_name();
  std::unique_ptr<SharedLaunch>& launch = SharedLaunches::instance().of(suite, world);
  if (!launch) {
    std::set<std::string> selected;  // the cases of the suite that this process runs
    for (int i = 0; i < unit->total_test_suite_count(); ++i) {
      const auto* s = unit->GetTestSuite(i);
      if (suite != s->name()) continue;
      for (int j = 0; j < s->total_test_count(); ++j)
        if (s->GetTestInfo(j)->should_run()) selected.insert(s->GetTestInfo(j)->name());
    }
    std::vector<RankCase> mine;
    for (const RankCase& c : cases)
      if (c.world == world && selected.count(c.name)) mine.push_back(c);
    launch = std::make_unique<SharedLaunch>(mine, world);
  }
  return *launch;
}

std::string rank_errors(const fs::path& dir, int world) {
  std::string all;
  for (int r = 0; r < world; ++r)
    if (fs::exists(dir / fmt::format("rank{}.error", r)))
      all += file_text(dir / fmt::format("rank{}.error", r));
  return all;
}

}  // namespace bpbench::testing
