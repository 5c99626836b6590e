// test_train.cpp: training runs (measure.train). In float64 every strategy's loss trajectory, held-out losses
// and final weights equal plain BP's to round-off over 50 AdamW steps (warm-up, cosine, clipping, weight
// decay), for SFT, DPO and GRPO, with and without LoRA; the learning-rate schedule; mixed precision keeps
// float32 master weights and state whose bytes land in the optimizer category; a scenario's train block runs
// end to end through the runner; and every bad train block is a one-line input error.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "harness/run/train_data.h"
#include "harness/run/train_loop.h"
#include "profiles/memory.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_train {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kT = 13;  // prime
constexpr double kTol = 1e-10;

TrainSpec spec_of(int64_t steps) {
  TrainSpec t;
  t.steps = steps;
  t.lr = 3e-3;
  t.beta1 = 0.9;
  t.beta2 = 0.95;
  t.weight_decay = 0.1;
  t.warmup_steps = 5;
  t.schedule = "cosine";
  t.min_lr_ratio = 0.1;
  t.clip_grad_norm = 1.0;
  t.eval_every = 10;
  t.eval_batches = 2;
  return t;
}

BatchSpec batch_spec(const std::string& objective, int64_t vocab) {
  return padded_batch_spec(objective, vocab, kT, /*prompt_len=*/8);
}

struct Trained {
  TrainRun run;
  std::vector<torch::Tensor> weights;  // every trainable parameter after the run
};

Trained train(const std::string& impl, const std::string& objective_name, const TrainSpec& spec,
              int64_t lora_rank, torch::ScalarType dtype = torch::kDouble, Partitioning partition = {5, 4}) {
  Model model = tiny_model({2, false}, dtype);
  if (lora_rank > 0) model.add_lora(lora_rank, 2.0 * lora_rank, 3);
  auto objective = make_objective(objective_name);
  json record;
  const TrainData data =
      make_train_data(spec, batch_spec(objective_name, model.config.vocab), model, *objective, 4, "", record);
  auto strategy = make_strategy(impl);
  Trained out;
  out.run = train_model(
      spec, *strategy, model, *objective, data, partition, nullptr, false, [] {}, [] { return 0.0; });
  for (const auto& p : model.trainable_parameters()) out.weights.push_back(p.tensor.detach().clone());
  return out;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-300);
}

// ---- exactness over time ----------------------------------------------------------------------------------

struct TrajectoryCase {
  std::string objective;
  int64_t steps, lora_rank;
};

void PrintTo(const TrajectoryCase& c, std::ostream* os) {
  *os << c.objective << ", " << c.steps << " steps, LoRA rank " << c.lora_rank;
}

class TrainTrajectory : public ::testing::TestWithParam<TrajectoryCase> {};

TEST_P(TrainTrajectory, EveryStrategyFollowsPlainInFloat64) {
  const TrajectoryCase& c = GetParam();
  const TrainSpec spec = spec_of(c.steps);
  const Trained ref = train("plain", c.objective, spec, c.lora_rank);
  ASSERT_EQ(ref.run.steps.size(), static_cast<size_t>(c.steps));
  // The run moves (SFT learns; DPO's and GRPO's random preferences only move the held-out loss): a
  // trajectory that did not would make the comparison below empty.
  EXPECT_GT(std::abs(ref.run.evals.back().loss - ref.run.evals.front().loss), 1e-3) << c.objective;
  if (c.objective == "sft") {
    EXPECT_LT(ref.run.evals.back().loss, ref.run.evals.front().loss);
  }
  for (const std::string impl : {"checkpoint", "checkpoint-chunked-head", "mst", "streambp"}) {
    if (make_strategy(impl)->unsupported({c.objective, 1})) continue;
    SCOPED_TRACE(fmt::format("{} {} lora {}", impl, c.objective, c.lora_rank));
    const Trained got = train(impl, c.objective, spec, c.lora_rank);
    ASSERT_EQ(got.run.steps.size(), ref.run.steps.size());
    double worst = 0;
    for (size_t k = 0; k < ref.run.steps.size(); ++k) {
      worst = std::max(worst, relative(got.run.steps[k].loss, ref.run.steps[k].loss));
      EXPECT_EQ(got.run.steps[k].lr, ref.run.steps[k].lr);
      EXPECT_LE(relative(got.run.steps[k].grad_norm, ref.run.steps[k].grad_norm), kTol) << "step " << k + 1;
    }
    EXPECT_LE(worst, kTol);
    ASSERT_EQ(got.run.evals.size(), ref.run.evals.size());
    for (size_t k = 0; k < ref.run.evals.size(); ++k)
      EXPECT_LE(relative(got.run.evals[k].loss, ref.run.evals[k].loss), kTol) << "eval " << k;
    for (size_t i = 0; i < ref.weights.size(); ++i) {
      const double err = (got.weights[i] - ref.weights[i]).norm().item<double>() /
                         std::max(ref.weights[i].norm().item<double>(), 1e-300);
      EXPECT_LE(err, kTol) << "weight " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, TrainTrajectory,
                         ::testing::Values(TrajectoryCase{"sft", 50, 0}, TrajectoryCase{"dpo", 20, 0},
                                           TrajectoryCase{"grpo", 20, 0}, TrajectoryCase{"sft", 20, 4}),
                         [](const auto& info) {
                           return fmt::format("{}_{}steps_lora{}", info.param.objective, info.param.steps,
                                              info.param.lora_rank);
                         });

// ---- the schedule and the precision recipe ----------------------------------------------------------------

TEST(TrainSpec, WarmupThenCosineToTheFloor) {
  TrainSpec t = spec_of(25);
  t.lr = 1.0;
  EXPECT_DOUBLE_EQ(t.lr_at(1), 0.2);
  EXPECT_DOUBLE_EQ(t.lr_at(5), 1.0);
  EXPECT_DOUBLE_EQ(t.lr_at(6), 1.0);                   // the first step after warm-up: the schedule's top
  EXPECT_DOUBLE_EQ(t.lr_at(25), 0.1);                  // the last: min_lr_ratio * lr
  EXPECT_NEAR(t.lr_at(15) + t.lr_at(16), 1.1, 1e-12);  // symmetric about the middle of the cosine
  t.schedule = "constant";
  EXPECT_DOUBLE_EQ(t.lr_at(25), 1.0);
  t.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(t.lr_at(1), 1.0);
}

// bfloat16 weights with float32 masters follow a float32 run closely; the masters and AdamW's state are
// float32 and counted as optimizer bytes: 2 x 4 bytes per trainable parameter of state, and 4 + 4 for the
// masters and their gradients.
TEST(TrainPrecision, MixedKeepsFloat32MastersInTheOptimizerCategory) {
  TrainSpec spec = spec_of(12);
  spec.eval_every = 0;
  const Trained f32 = train("streambp", "sft", spec, 0, torch::kFloat);
  auto& rec = profiles::MemoryRecorder::instance();
  const int64_t optimizer_before = rec.live_by_category()[static_cast<size_t>(profiles::Category::optimizer)];
  rec.reset_peak();
  spec.precision = "mixed";
  const Trained mixed = train("streambp", "sft", spec, 0, torch::kBFloat16);
  const int64_t optimizer_peak =
      rec.peak_by_category()[static_cast<size_t>(profiles::Category::optimizer)] - optimizer_before;
  int64_t params = 0;
  for (const auto& w : mixed.weights) params += w.numel();
  EXPECT_GE(optimizer_peak, 16 * params);  // masters, their gradients, exp_avg, exp_avg_sq: float32 each
  for (size_t k = 0; k < mixed.run.steps.size(); ++k)
    EXPECT_LE(relative(mixed.run.steps[k].loss, f32.run.steps[k].loss), 2e-2) << "step " << k + 1;
  for (const auto& w : mixed.weights) EXPECT_EQ(w.scalar_type(), torch::kBFloat16);
}

// ---- through the runner
// ---------------------------------------------------------------------------------------

// The runner's options for this file's scenarios: results under tmp/out, child processes of bpbench.
RunOptions run_options(TempDir& tmp) {
  RunOptions opt;
  opt.out_dir = tmp.sub("out");
  opt.self_exe = BPBENCH_BINARY;
  opt.argv = {"test_train"};
  return opt;
}

TEST(TrainRunner, ScenarioRecordsEveryStepAndTheOptimizerPeak) {
  TempDir tmp;
  RunOptions opt = run_options(tmp);
  const Scenario s = parse_scenario_text(R"({"name": "train", "seed": 1, "threads": 1,
    "grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 24, "partition": 8,
             "logits_partition": 8, "batch": 2},
    "measure": {"memory": true,
                "train": {"steps": 6, "lr": 0.003, "warmup_steps": 2, "eval_every": 3, "clip_grad_norm": 1}}})");
  const RunSummary summary = run_scenario(s, opt);
  const json r = json_file(summary.results_path);
  ASSERT_EQ(r.at("cells").size(), 2u);
  // The same run with each cell in a child process (its job read back from JSON) trains the same way.
  opt.out_dir = tmp.sub("isolated");
  opt.isolate = true;
  const json isolated = json_file(run_scenario(s, opt).results_path);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(isolated.at("cells")[i].at("status"), "ok") << isolated.at("cells")[i].dump();
    EXPECT_EQ(isolated.at("cells")[i].at("train").at("eval"), r.at("cells")[i].at("train").at("eval"));
  }
  std::vector<double> losses[2];
  for (size_t i = 0; i < 2; ++i) {
    const json& c = r.at("cells")[i];
    SCOPED_TRACE(c.dump());
    ASSERT_EQ(c.at("status"), "ok");
    const json& steps = c.at("train").at("steps");
    ASSERT_EQ(steps.size(), 6u);
    for (const auto& st : steps) losses[i].push_back(st.at("loss").get<double>());
    EXPECT_EQ(c.at("loss").get<double>(), steps.back().at("loss").get<double>());
    EXPECT_EQ(c.at("train").at("eval").size(), 3u);  // before, after step 3, after step 6
    EXPECT_EQ(c.at("time").at("count"), 6);
    const json& m = c.at("memory");
    EXPECT_GT(m.at("peak_by_category").at("optimizer").get<int64_t>(), 0);
    ASSERT_TRUE(m.at("estimate_bytes").is_number_integer());  // the training run's estimate
    EXPECT_TRUE(c.at("grad_error").is_null());
  }
  // Float32 here: the two strategies' trajectories agree to float32 round-off.
  for (size_t k = 0; k < losses[0].size(); ++k) EXPECT_NEAR(losses[1][k], losses[0][k], 1e-4) << k;
  // The report's stability table: plain's held-out loss per evaluation, streambp's beside it.
  const std::string report = tmp.sub("report"), log = tmp.file("log");
  ASSERT_EQ(std::system(fmt::format("'{}' report '{}' --out '{}' >'{}' 2>&1", BPBENCH_BINARY,
                                    summary.results_path, report, log)
                            .c_str()),
            0)
      << std::ifstream(log).rdbuf();
  std::ifstream md(report + "/report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), {});
  EXPECT_NE(text.find("## Training runs: loss trajectories against plain BP"), std::string::npos) << text;
  EXPECT_NE(text.find("| step | plain | streambp | difference |"), std::string::npos) << text;
  EXPECT_NE(text.find("(held-out loss)"), std::string::npos) << text;
  // The figure's data: one run, plain BP's series first, every step and every evaluation; report.md links
  // train_loss.png exactly when plot.py drew it (matplotlib present).
  const json plot = json::parse(file_text(report + "/plot_data.json"));
  ASSERT_EQ(plot.at("train_loss").at("panels").size(), 1u);
  const json& series = plot["train_loss"]["panels"][0]["series"];
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0]["label"], "plain");
  EXPECT_EQ(series[1]["label"], "streambp");
  EXPECT_EQ(series[0]["steps"].size(), 6u);
  EXPECT_EQ(series[1]["eval"].size(), 3u);
  EXPECT_EQ(series[1]["steps"][5][1].get<double>(), losses[1][5]);
  EXPECT_EQ(text.find("](train_loss.png)") != std::string::npos,
            std::filesystem::exists(report + "/train_loss.png"));
}

// The estimate of a training run (AdamW's state from step 2 on, its own step as one more phase, every batch
// built before the run) against the run's measured peak: every strategy, objective and dtype, with and
// without LoRA, both precisions, through the runner as a user runs it. Two steps: the second is the first
// with AdamW's state beside it; a longer run adds only its batches, all built before the run (measured: 768
// bytes a step more for SFT here, 12,544 for GRPO), which the estimate counts too.
TEST(TrainEstimate, MatchesTheMeasuredPeakOfEveryRun) {
  TempDir tmp;
  RunOptions opt;
  opt.self_exe = BPBENCH_BINARY;
  opt.argv = {"test_train"};
  for (const auto& [precision, dtypes] : std::vector<std::pair<std::string, std::string>>{
           {"model", R"(["float32", "bfloat16", "float64"])"}, {"mixed", R"("bfloat16")"}}) {
    opt.out_dir = tmp.sub(precision);
    const Scenario s = parse_scenario_text(fmt::format(R"({{"name": "train-estimate", "seed": 2, "threads": 1,
      "grid": {{"model": "tiny", "impl": ["plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"],
               "objective": ["sft", "dpo", "grpo"], "dtype": {}, "lora_rank": [0, 4], "seq_len": 24,
               "partition": 8, "logits_partition": 8, "batch": 2}},
      "measure": {{"memory": true, "train": {{"steps": 2, "lr": 0.003, "eval_every": 2, "eval_batches": 1,
                                              "precision": "{}"}}}}}})",
                                                       dtypes, precision));
    std::ifstream in(run_scenario(s, opt).results_path);
    const json r = json::parse(in);
    int measured = 0;
    for (const auto& c : r.at("cells")) {
      const json& a = c.at("axes");
      if (a.at("impl") == "mst" && a.at("objective") == "dpo") continue;  // mst does not run DPO
      SCOPED_TRACE(fmt::format("{} precision {}", a.dump(), precision));
      ASSERT_EQ(c.at("status"), "ok") << c.dump();
      const json& m = c.at("memory");
      ASSERT_TRUE(m.at("estimate_bytes").is_number_integer()) << m.dump();
      const auto peak = m.at("peak_bytes").get<double>(), estimate = m.at("estimate_bytes").get<double>();
      // As the one-step estimate (test_estimate.cpp, MatchesTiny): bfloat16 with LoRA within 5%, else 2%.
      const double tolerance = a.at("dtype") == "bfloat16" && a.at("lora_rank") != 0 ? 0.05 : 0.02;
      EXPECT_LE(std::abs(estimate - peak) / peak, tolerance)
          << "estimate " << estimate << ", measured " << peak;
      ++measured;
    }
    EXPECT_EQ(measured, precision == "model" ? 3 * 2 * 14 : 2 * 14);
  }
}

// A cell's job carries its measure block to a child process or a rank: with train it must read back.
// offload optimizer in one process: AdamW's tensors and step in host memory. The trajectory is the same run's
// bit for bit (the same float64 ops, on the host), the device's peak loses the optimizer's bytes and equals
// the estimate, the host's holds them (within 2%: the step's temporaries are bounded by the widest tensor).
TEST(TrainOffload, TheOptimizerInHostMemoryTrainsTheSameAndLeavesTheDevice) {
  TempDir tmp;
  RunOptions opt = run_options(tmp);
  for (const char* precision : {"model", "mixed"}) {
    const bool mixed = std::string(precision) == "mixed";
    const Scenario s = parse_scenario_text(fmt::format(R"({{"name": "offload", "seed": 1, "threads": 1,
      "grid": {{"model": "tiny", "impl": ["plain", "streambp"], "dtype": "{}", "seq_len": 24, "partition": 8,
               "logits_partition": 8, "offload": ["none", "optimizer", "checkpoints,optimizer"]}},
      "measure": {{"train": {{"steps": 4, "lr": 0.003, "eval_every": 2, "precision": "{}"}}}}}})",
                                                       mixed ? "bfloat16" : "float64", precision));
    opt.out_dir = tmp.sub(precision);
    const json cells = json_file(run_scenario(s, opt).results_path).at("cells");
    ASSERT_EQ(cells.size(), 6u);  // plain skips checkpoints (it keeps none)
    for (const auto& c : cells) {
      SCOPED_TRACE(c.dump());
      if (c["axes"]["offload"] == "checkpoints,optimizer" && c["axes"]["impl"] == "plain") {
        EXPECT_EQ(c["status"], "skipped");
        continue;
      }
      ASSERT_EQ(c["status"], "ok");
      const json& m = c["memory"];
      // Within the one-step estimate's 16 bytes of loss scalars (docs/estimate.md).
      EXPECT_LE(std::abs(m["peak_bytes"].get<int64_t>() - m["estimate_bytes"].get<int64_t>()), 16);
      const json& alone = cells[c["axes"]["impl"] == "plain" ? 0 : 3];  // the same strategy, offload none
      if (c["axes"]["offload"] == "none") {
        EXPECT_TRUE(m.value("host_peak_bytes", json()).is_null());
        continue;
      }
      EXPECT_NEAR(m["host_peak_bytes"].get<double>() / m["estimate_host_bytes"].get<double>(), 1.0, 0.02);
      // A step's copies between the device and the host: the gradients out and the weights back (2 P s), and
      // with the checkpoints each one out and back; counted by each copy, equal to the estimate's.
      EXPECT_GT(m.value("host_copy_bytes", int64_t{0}), 0);
      EXPECT_EQ(m["host_copy_bytes"], m["estimate_host_copy_bytes"]);
      EXPECT_EQ(m["peak_by_category"]["optimizer"], 0);
      EXPECT_LT(m["peak_bytes"].get<int64_t>(), alone["memory"]["peak_bytes"].get<int64_t>());
      ASSERT_EQ(c["train"]["steps"].size(), alone["train"]["steps"].size());
      for (size_t k = 0; k < c["train"]["steps"].size(); ++k)
        EXPECT_EQ(c["train"]["steps"][k]["loss"], alone["train"]["steps"][k]["loss"]) << k;
      EXPECT_EQ(c["train"]["final_weights"], alone["train"]["final_weights"]);
    }
  }
}

TEST(TrainScenario, MeasureBlockRoundTrips) {
  const MeasureSpec m = MeasureSpec::from_json(json::parse(
      R"({"memory": true, "budget_bytes": 1000000, "train": {"steps": 7, "lr": 0.01, "eval_every": 2,
          "precision": "mixed", "betas": [0.8, 0.9]}})"));
  const MeasureSpec back = MeasureSpec::from_json(m.to_json());
  ASSERT_TRUE(back.train.has_value());
  EXPECT_EQ(back.train->to_json(), m.train->to_json());
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_TRUE(back.grad_error_reference.empty());
}

TEST(TrainScenario, BadTrainBlocksAreOneLineInputErrors) {
  auto error = [](const std::string& measure, const std::string& impl = "plain") {
    const std::string text = fmt::format(
        R"({{"name": "t", "grid": {{"model": "tiny", "impl": "{}", "seq_len": 16}}, "measure": {}}})", impl,
        measure);
    try {
      parse_scenario_text(text, "t");
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      EXPECT_THAT(e.what(), HasSubstr("(valid: "));
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted " << text;
    return std::string();
  };
  EXPECT_THAT(error(R"({"train": {"lr": 0.1}})"), HasSubstr("missing key 'steps'"));
  EXPECT_THAT(error(R"({"train": {"steps": 0}})"), HasSubstr("measure.train.steps"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "optimizer": "sgd"}})"),
              HasSubstr("unknown measure.train key"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "betas": [0.9]}})"), HasSubstr("measure.train.betas"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "betas": [0.9, 1.0]}})"), HasSubstr("not below 1"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "warmup_steps": 6}})"), HasSubstr("more than the 5 steps"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "schedule": "linear"}})"), HasSubstr("unknown schedule"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "precision": "fp8"}})"), HasSubstr("unknown precision"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "precision": "mixed"}})"), HasSubstr("dtype 'float32'"));
  EXPECT_THAT(error(R"({"train": {"steps": 5}, "grad_error": {"reference": "float64"}})"),
              HasSubstr("measure.grad_error: not with measure.train"));
  EXPECT_THAT(error(R"({"train": {"steps": 5}, "time": {"warmup": 1, "repeat": 2}})"),
              HasSubstr("measure.time: not with measure.train"));
  EXPECT_THAT(error(R"({"train": {"steps": 5, "grad_accum": 0}})"), HasSubstr("measure.train.grad_accum"));
}

}  // namespace
}  // namespace bpbench::testing::test_train
