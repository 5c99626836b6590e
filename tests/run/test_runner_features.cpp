// test_runner_features.cpp: what the runner adds around a cell, end to end through run_scenario on the tiny
// model: memory timelines and their Chrome traces, the analytic estimate beside each peak,
// max-sequence-length search cells (probes in child processes, the boundary checked against direct runs),
// distributed cells as local ranks (gradients equal to single-process plain BP on the global batch), data
// files (the file's tokens reach the model) and Hugging Face model directories as the model axis.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "harness/estimate/estimate_flops.h"
#include "harness/estimate/estimate_inverse.h"
#include "harness/objectives/batch.h"
#include "harness/objectives/data_file.h"
#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "impls/interface/strategy.h"
#include "tests/support/test_support.h"

namespace bpbench::test_runner_features {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::json_file;

class RunnerFeatures : public ::testing::Test {
 protected:
  json run(const json& scenario, const std::string& name = "out") {
    RunOptions opt;
    opt.out_dir = (dir_ / name).string();
    opt.self_exe = BPBENCH_BINARY;
    opt.argv = {"test_runner_features"};
    const RunSummary summary = run_scenario(parse_scenario(scenario), opt);
    return json_file(summary.results_path);
  }

  testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.dir();
};

json tiny_grid(json impls) {
  return {{"model", "tiny"}, {"impl", impls}, {"seq_len", 37}, {"partition", 16}, {"logits_partition", 8}};
}

TEST_F(RunnerFeatures, TimelineTraceCountersSumToLiveBytesAndReachThePeak) {
  const json results = run({{"threads", 1},
                            {"grid", tiny_grid({"plain", "streambp"})},
                            {"measure", {{"time", false}, {"grad_error", false}, {"timeline", true}}}});
  ASSERT_EQ(results["cells"].size(), 2u);
  for (const auto& cell : results["cells"]) {
    ASSERT_EQ(cell["status"], "ok");
    const json& mem = cell["memory"];
    const json timeline = json_file(dir_ / "out" / mem["timeline_file"].get<std::string>())["timeline"];
    const json trace = json_file(dir_ / "out" / mem["trace_file"].get<std::string>());
    ASSERT_GT(timeline["points"].size(), 10u);

    std::vector<int64_t> counter_sums;
    std::set<std::string> phases;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "C") {
        int64_t sum = 0;
        for (const auto& [category, bytes] : e["args"].items()) sum += bytes.get<int64_t>();
        counter_sums.push_back(sum);
      } else if (e["ph"] == "X") {
        EXPECT_GE(e["dur"].get<double>(), 0.0);
        phases.insert(e["name"].get<std::string>());
      }
    }
    ASSERT_EQ(counter_sums.size(), timeline["points"].size());
    int64_t highest = 0;
    for (size_t i = 0; i < counter_sums.size(); ++i) {
      EXPECT_EQ(counter_sums[i], timeline["points"][i]["live"].get<int64_t>()) << "point " << i;
      highest = std::max(highest, counter_sums[i]);
    }
    // Every allocation of the measured step is a point, so the highest one is the recorded peak.
    EXPECT_EQ(highest, mem["peak_bytes"].get<int64_t>());
    EXPECT_TRUE(phases.count("forward")) << cell["axes"]["impl"];
    if (cell["axes"]["impl"] == "streambp") {
      EXPECT_TRUE(phases.count("layer 0 backward"));
    }
  }
}

TEST_F(RunnerFeatures, EstimateSitsBesideEveryPeakItKnows) {
  const json results = run({{"threads", 1},
                            {"grid", tiny_grid({"plain", "checkpoint", "mst", "streambp"})},
                            {"measure", {{"time", false}, {"grad_error", false}}}});
  for (const auto& cell : results["cells"]) {
    const json& mem = cell["memory"];
    ASSERT_TRUE(mem["estimate_bytes"].is_number_integer()) << cell["axes"]["impl"];
    const double ratio = mem["estimate_bytes"].get<double>() / mem["peak_bytes"].get<double>();
    EXPECT_NEAR(ratio, 1.0, 0.10) << cell["axes"]["impl"];
  }
}

TEST_F(RunnerFeatures, MaxSeqLenSearchFindsTheExactBoundary) {
  const int64_t budget = 800'000, granularity = 16;
  const json results =
      run({{"threads", 1},
           {"grid",
            {{"model", "tiny"},
             {"impl", {"checkpoint", "streambp"}},
             {"partition", 16},
             {"logits_partition", 16}}},
           {"measure",
            {{"max_seq_len", {{"budget_bytes", budget}, {"granularity", granularity}, {"upper", 8192}}}}}});
  ASSERT_EQ(results["cells"].size(), 2u);
  std::map<std::string, int64_t> found;
  for (const auto& cell : results["cells"]) {
    ASSERT_EQ(cell["status"], "ok") << cell["reason"];
    EXPECT_TRUE(cell["axes"]["seq_len"].is_null());
    const int64_t T = cell["max_seq_len"].get<int64_t>();
    ASSERT_GT(T, 0);
    EXPECT_EQ(T % granularity, 0);
    EXPECT_FALSE(cell["hit_upper"].get<bool>());
    ASSERT_GE(cell["probes"].size(), 2u);
    found[cell["axes"]["impl"]] = T;
    // The estimate's answer, recorded beside the measured one (and the first probe): the same length.
    EXPECT_EQ(cell["search"]["estimate_max_seq_len"], T);
    EXPECT_EQ(cell["probes"][0]["seq_len"], T);

    // The boundary, checked directly: T fits the budget and T + granularity does not.
    for (const int64_t length : {T, T + granularity}) {
      CellJob job;
      json axes = cell["axes"];
      axes.update(json{{"seq_len", length}, {"partition", 16}, {"logits_partition", 16}});
      job.cell = Cell::from_axes(axes);
      job.settings.threads = 1;
      job.settings.measure.time.enabled = false;
      job.settings.measure.grad_error_reference.clear();
      job.settings.measure.budget_bytes = budget;
      const CellResult r = run_cell_isolated(job, BPBENCH_BINARY);
      EXPECT_EQ(r.status, length == T ? "ok" : "oom") << cell["axes"]["impl"] << " T=" << length;
      if (length == T) {
        EXPECT_LE(r.memory->peak_bytes, budget);
      }
    }
  }
  EXPECT_GT(found["streambp"], 2 * found["checkpoint"]);

  // `bpbench estimate --budget`'s inverse gives the same answer, to the granularity, without running
  // anything.
  for (const auto& [impl, T] : found) {
    EstimateInput in;
    in.config = find_model_preset("tiny");
    in.impl = impl;
    in.partition = 16;
    in.logits_partition = 16;
    in.threads = 1;
    LengthBudget limits;
    limits.device_bytes = budget;
    limits.granularity = granularity;
    limits.upper = 8192;
    EXPECT_EQ(longest_seq_len(in, limits).seq_len, T) << impl;
  }
}

TEST_F(RunnerFeatures, DistributedCellMatchesPlainOnTheGlobalBatch) {
  for (const std::string objective : {"sft", "dpo"}) {
    const json results = run({{"threads", 1},
                              {"world_size", 2},
                              {"grid",
                               {{"model", "tiny"},
                                {"impl", {"streambp-dist", "checkpoint-dist", "streambp"}},
                                {"objective", objective},
                                {"dtype", "float64"},
                                {"seq_len", 37},
                                {"partition", 16},
                                {"logits_partition", 8}}},
                              {"measure", {{"time", {{"warmup", 0}, {"repeat", 1}}}}}},
                             objective);
    const auto& cells = results["cells"];
    ASSERT_EQ(cells.size(), 3u);
    for (int i = 0; i < 2; ++i) {
      const json& c = cells[i];
      ASSERT_EQ(c["status"], "ok") << c["reason"];
      EXPECT_EQ(c["world_size"], 2);
      ASSERT_EQ(c["ranks"].size(), 2u);
      const int64_t layers = 2;  // tiny
      for (const auto& rank : c["ranks"]) {
        EXPECT_GT(rank["peak_bytes"].get<int64_t>(), 0);
        // ZeRO-2: one reduce-scatter per layer, plus the embedding and the head.
        EXPECT_EQ(rank["comm"]["reduce_scatter"]["calls"].get<int64_t>(), layers + 2) << c["axes"]["impl"];
      }
      EXPECT_LT(c["grad_error"]["groups"]["all"]["rel_l2"].get<double>(), 1e-10) << c["axes"]["impl"];
      EXPECT_LT(c["grad_error"]["loss_abs_error"].get<double>(), 1e-12);
    }
    // A single-device cell of a multi-rank scenario runs on one device, on its own batch.
    EXPECT_EQ(cells[2]["status"], "ok") << cells[2]["reason"];
    EXPECT_FALSE(cells[2].contains("world_size"));
    EXPECT_FALSE(cells[2].contains("ranks"));
  }
}

// The grid axis "sharding": zero3 shards the distributed strategies' parameters too, gathered per layer for
// its forward and again for its backward (2 L all_gathers a step), and stays exact; zero2 gathers none. Both
// are estimated, every rank's peak at its cell's estimate; a single-process strategy skips zero3 with the
// reason.
// The variable it replaced, BPBENCH_DIST_SHARD_PARAMS, is refused in one line.
TEST_F(RunnerFeatures, ShardingIsAGridAxis) {
  const json results = run({{"threads", 1},
                            {"world_size", 2},
                            {"grid",
                             {{"model", "tiny"},
                              {"impl", {"streambp-dist", "ulysses", "streambp"}},
                              {"sharding", {"zero2", "zero3"}},
                              {"dtype", "float64"},
                              {"seq_len", 36},
                              {"partition", 12},
                              {"logits_partition", 12}}},
                            {"measure", {{"time", {{"warmup", 1}, {"repeat", 1}}}}}});
  const auto& cells = results["cells"];
  ASSERT_EQ(cells.size(), 6u);
  const int64_t layers = 2;  // tiny
  for (const auto& c : cells) {
    SCOPED_TRACE(c["axes"].dump());
    const std::string impl = c["axes"]["impl"], sharding = c["axes"]["sharding"];
    if (impl == "streambp") {
      if (sharding == "zero2") {
        EXPECT_EQ(c["status"], "ok") << c["reason"];
      } else {
        EXPECT_EQ(c["status"], "skipped");
        EXPECT_NE(
            c["reason"].get<std::string>().find("runs in one process; sharding zero3 is for the distributed "
                                                "strategies"),
            std::string::npos)
            << c["reason"];
      }
      continue;
    }
    ASSERT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_LT(c["grad_error"]["groups"]["all"]["rel_l2"].get<double>(), 1e-10);
    for (const auto& rank : c["ranks"])
      EXPECT_EQ(rank["comm"]["all_gather"]["calls"].get<int64_t>(), sharding == "zero3" ? 2 * layers : 0);
    ASSERT_TRUE(c["memory"]["estimate_bytes"].is_number_integer()) << c["memory"].dump();
    for (const auto& rank : c["ranks"])  // each rank at its estimate (tests/run/test_train_distributed.cpp)
      EXPECT_NEAR(rank["peak_bytes"].get<double>(), c["memory"]["estimate_bytes"].get<double>(), 64.0);
  }
  ::setenv("BPBENCH_DIST_SHARD_PARAMS", "1", 1);
  std::string why;
  try {
    run({{"grid", tiny_grid({"plain"})}}, "refused");
  } catch (const InputError& e) {
    why = e.what();
  }
  ::unsetenv("BPBENCH_DIST_SHARD_PARAMS");
  EXPECT_NE(why.find("BPBENCH_DIST_SHARD_PARAMS: parameter sharding is a grid axis now"), std::string::npos)
      << why;
  EXPECT_FALSE(fs::exists(dir_ / "refused"));
}

// "router_aux_loss_coef" turns the routers' load-balancing loss on for every mixture-of-experts cell: the
// loss grows by it, StreamBP still equals the float64 plain reference (which has it on too), and a padded
// batch, whose padding rows it would count, is a skipped cell with the reason. A negative weight is refused.
TEST_F(RunnerFeatures, TheLoadBalancingLossIsAScenarioOption) {
  auto scenario = [](double coef) {
    return json{{"threads", 1},
                {"router_aux_loss_coef", coef},
                {"grid",
                 {{"model", "tiny-moe"},
                  {"impl", {"plain", "streambp"}},
                  {"dtype", "float64"},
                  {"seq_len", 13},
                  {"partition", 5},
                  {"logits_partition", 3},
                  {"padding", {false, true}}}},
                {"measure", {{"time", false}}}};
  };
  const json on = run(scenario(0.5), "on"), off = run(scenario(0.0), "off");
  ASSERT_EQ(on["cells"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const json &c = on["cells"][i], &without = off["cells"][i];
    ASSERT_EQ(without["status"], "ok") << without["reason"];
    if (c["axes"]["padding"].get<bool>()) {
      EXPECT_EQ(c["status"], "skipped");
      EXPECT_NE(c["reason"].get<std::string>().find("load-balancing loss counts every row"),
                std::string::npos)
          << c["reason"];
      continue;
    }
    ASSERT_EQ(c["status"], "ok") << c["reason"];
    // E sum_e f_e P_e is about k = 2 near balance: the weight 0.5 adds about 1 to the loss.
    EXPECT_GT(c["loss"].get<double>() - without["loss"].get<double>(), 0.5) << c["axes"]["impl"];
    EXPECT_LT(c["grad_error"]["groups"]["all"]["rel_l2"].get<double>(), 1e-10) << c["axes"]["impl"];
    EXPECT_LT(c["grad_error"]["loss_abs_error"].get<double>(), 1e-12) << c["axes"]["impl"];
  }
  try {
    parse_scenario(scenario(-1.0));
    ADD_FAILURE() << "a negative weight was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("router_aux_loss_coef"), std::string::npos) << e.what();
  }
}

TEST_F(RunnerFeatures, DistributedCellOutOfMemoryIsAResultNotAHang) {
  // Both ranks run out of the budget inside the step; the cell is "oom" with the ranks' peaks, and the run
  // goes on to the next cell.
  const json results = run({{"threads", 1},
                            {"world_size", 2},
                            {"grid",
                             {{"model", "tiny"},
                              {"impl", "streambp-dist"},
                              {"seq_len", {37, 64}},
                              {"partition", 16},
                              {"logits_partition", 8}}},
                            {"measure", {{"time", false}, {"grad_error", false}, {"budget_bytes", 120000}}}});
  ASSERT_EQ(results["cells"].size(), 2u);
  for (const auto& c : results["cells"]) {
    EXPECT_EQ(c["status"], "oom") << c["reason"];
    ASSERT_EQ(c["ranks"].size(), 2u);
    EXPECT_LE(c["memory"]["peak_bytes"].get<int64_t>(), 120000);
  }
}

TEST_F(RunnerFeatures, DataFileTokensReachTheModel) {
  const int64_t T = 12;
  const json sequences = json::array({json::array({5, 9, 2, 7, 7, 3, 11, 4, 8, 1, 6, 10, 12, 13}),  // cropped
                                      json::array({3, 3, 4})});                                     // padded
  const fs::path file = dir_ / "tokens.json";
  std::ofstream(file) << sequences.dump();
  const json scenario = {{"threads", 1},
                         {"data", file.string()},
                         {"grid",
                          {{"model", "tiny"},
                           {"impl", "streambp"},
                           {"dtype", "float64"},
                           {"batch", 2},
                           {"seq_len", T},
                           {"partition", 5},
                           {"logits_partition", 4}}},
                         {"measure", {{"time", false}, {"grad_error", false}}}};
  const json cell = run(scenario)["cells"][0];
  ASSERT_EQ(cell["status"], "ok") << cell["reason"];
  EXPECT_EQ(cell["data"]["file"], "tokens.json");
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(cell["data"]["sha256"], sha256_hex(bytes));

  // The same loss from plain BP on a batch built from exactly these ids.
  Model model = load_model("tiny", torch::TensorOptions().dtype(torch::kDouble), 0);
  BatchSpec spec;
  spec.examples = 2;
  spec.seq_len = T;
  spec.vocab = model.config.vocab;
  spec.data_tokens = torch::full({2, T}, -1, torch::kLong);
  for (int64_t t = 0; t < T; ++t) spec.data_tokens[0][t] = sequences[0][t].get<int64_t>();
  for (int64_t t = 0; t < 3; ++t) spec.data_tokens[1][t] = sequences[1][t].get<int64_t>();
  auto sft = make_objective("sft");
  const Batch batch = sft->make_batch(spec, model, T);
  EXPECT_EQ(batch.input_ids[0][T - 1].item<int64_t>(), 10);  // the 12th id of the file, not synthetic
  const double want = make_strategy("plain")->step({model, batch, *sft, {T, T}}).item<double>();
  EXPECT_NEAR(cell["loss"].get<double>(), want, 1e-12);

  // One changed id changes the loss: the file is really what the cell read.
  json changed = sequences;
  changed[1][1] = 40;
  std::ofstream(dir_ / "tokens2.json") << changed.dump();
  json scenario2 = scenario;
  scenario2["data"] = (dir_ / "tokens2.json").string();
  const json cell2 = run(scenario2, "out2")["cells"][0];
  EXPECT_GT(std::abs(cell2["loss"].get<double>() - want), 1e-6);
}

TEST_F(RunnerFeatures, DataFileWithTooFewSequencesIsAnInputError) {
  std::ofstream(dir_ / "one.json") << "[[1, 2, 3, 4]]";
  json scenario = {{"data", (dir_ / "one.json").string()},
                   {"grid", {{"model", "tiny"}, {"impl", "plain"}, {"batch", 2}, {"seq_len", 8}}}};
  try {
    run(scenario);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has 1 sequences"), std::string::npos) << e.what();
  }
}

TEST_F(RunnerFeatures, HuggingFaceDirectoryGivesThePresetsLoss) {
  // The preset's weights written as a Qwen3 checkpoint: the directory, as the model axis, must give the same
  // loss and gradients as the preset.
  const Model preset = load_model("tiny", torch::TensorOptions().dtype(torch::kFloat), 0);
  const fs::path model_dir = dir_ / "tiny-qwen3";
  testing::write_hf_model_dir(model_dir, testing::hf_config(preset.config, "Qwen3ForCausalLM"),
                              testing::named_tensors_of(preset), 2);

  const json grid = {{"impl", "streambp"}, {"seq_len", 37}, {"partition", 16}, {"logits_partition", 8}};
  json with_dir = {{"threads", 1}, {"grid", grid}, {"measure", {{"time", false}}}};
  with_dir["grid"]["model"] = model_dir.string();
  json with_preset = with_dir;
  with_preset["grid"]["model"] = "tiny";
  const json a = run(with_dir, "dir")["cells"][0], b = run(with_preset, "preset")["cells"][0];
  ASSERT_EQ(a["status"], "ok") << a["reason"];
  EXPECT_EQ(a["loss"].get<double>(), b["loss"].get<double>());
  EXPECT_EQ(a["grad_error"]["reference_loss"].get<double>(), b["grad_error"]["reference_loss"].get<double>());
  EXPECT_EQ(a["memory"]["peak_bytes"], b["memory"]["peak_bytes"]);
}

TEST_F(RunnerFeatures, ModelAxisErrorsNameTheDirectory) {
  auto error_of = [](const json& grid) -> std::string {
    try {
      parse_scenario({{"grid", grid}});
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  const json base = {{"impl", "plain"}, {"seq_len", 8}};
  json g = base;
  g["model"] = (dir_ / "nowhere").string();
  EXPECT_NE(error_of(g).find("does not exist"), std::string::npos) << error_of(g);
  fs::create_directories(dir_ / "empty");
  g["model"] = (dir_ / "empty").string();
  EXPECT_NE(error_of(g).find("has no config.json"), std::string::npos) << error_of(g);
  fs::create_directories(dir_ / "gpt2");
  std::ofstream(dir_ / "gpt2" / "config.json") << R"({"architectures": ["GPT2LMHeadModel"]})";
  g["model"] = (dir_ / "gpt2").string();
  EXPECT_NE(error_of(g).find("GPT2LMHeadModel"), std::string::npos) << error_of(g);
  g["model"] = "no-such-preset";
  EXPECT_NE(error_of(g).find("unknown model 'no-such-preset'"), std::string::npos) << error_of(g);
  EXPECT_NE(error_of(g).find("Hugging Face model directory"), std::string::npos) << error_of(g);
}

// A model directory named as a preset, in the working directory, is the model (as in `bpbench estimate`); a
// folder of that name without config.json is not a model, and the preset stays.
TEST_F(RunnerFeatures, AModelDirectoryNamedAsAPresetWins) {
  fs::create_directories(dir_ / "tiny");
  std::ofstream(dir_ / "tiny" / "config.json")
      << testing::hf_config(find_model_preset("small"), "Qwen3ForCausalLM").dump();
  const fs::path before = fs::current_path();
  fs::current_path(dir_);
  const json grid = {{"model", "tiny"}, {"impl", "plain"}, {"seq_len", 8}};
  EXPECT_NO_THROW(parse_scenario({{"grid", grid}}));
  const int64_t from_dir = model_config_of("tiny").hidden;
  fs::remove(dir_ / "tiny" / "config.json");
  EXPECT_NO_THROW(parse_scenario({{"grid", grid}}));
  const int64_t from_preset = model_config_of("tiny").hidden;
  fs::current_path(before);
  EXPECT_EQ(from_dir, find_model_preset("small").hidden);
  EXPECT_EQ(from_preset, find_model_preset("tiny").hidden);
}

TEST_F(RunnerFeatures, MaxSeqLenScenarioRules) {
  auto error_of = [](const json& s) -> std::string {
    try {
      parse_scenario(s);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  const json search = {{"max_seq_len", {{"budget_bytes", 1000000}}}};
  EXPECT_NE(error_of({{"grid", {{"model", "tiny"}, {"impl", "plain"}, {"seq_len", 8}}}, {"measure", search}})
                .find("remove it from the grid"),
            std::string::npos);
  EXPECT_NE(error_of({{"grid", {{"model", "tiny"}, {"impl", "plain"}}}}).find("missing key 'seq_len'"),
            std::string::npos);
  EXPECT_NE(error_of({{"grid", {{"model", "tiny"}, {"impl", "plain"}}},
                      {"measure", {{"max_seq_len", json::object()}}}})
                .find("budget_bytes is required on the CPU"),
            std::string::npos);
  EXPECT_NE(error_of({{"grid", {{"model", "tiny"}, {"impl", "plain"}, {"seq_len", nullptr}}}})
                .find("only valid with measure.max_seq_len"),
            std::string::npos);
  EXPECT_EQ(error_of({{"grid", {{"model", "tiny"}, {"impl", "plain"}}}, {"measure", search}}), "no error");
  EXPECT_NE(error_of({{"data", "/no/such/tokens.json"},
                      {"grid", {{"model", "tiny"}, {"impl", "plain"}, {"seq_len", 8}}}})
                .find("no such file"),
            std::string::npos);
}

}  // namespace
}  // namespace bpbench::test_runner_features
