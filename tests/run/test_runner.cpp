// test_runner.cpp: the runner end to end on the tiny model, in process: results.json's shape, memory and loss
// sanity, a budget overrun recorded as "oom" without losing the other cells, gradient errors near round-off,
// and isolated cells (a child bpbench process per cell) measuring exactly what in-process cells measure.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "harness/run/results.h"
#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "profiles/cuda_build.h"
#include "tests/support/test_support.h"

namespace bpbench::test_runner {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using testing::json_file;

class Runner : public ::testing::Test {
 protected:
  // Runs `scenario_json` into dir_/name and returns the parsed results.json.
  json run(const std::string& scenario_json, const std::string& name = "out",
           std::optional<bool> isolate = {}) {
    RunOptions opt;
    opt.out_dir = (dir_ / name).string();
    opt.self_exe = BPBENCH_BINARY;
    opt.isolate = isolate;
    opt.argv = {"test_runner"};
    const Scenario s = parse_scenario_text(scenario_json, "test");
    const RunSummary summary = run_scenario(s, opt);
    EXPECT_EQ(summary.cells.size(), s.cell_count());
    return json_file(summary.results_path);
  }

  testing::TempDir tmp_;
  const fs::path& dir_ = tmp_.dir();
};

// Two strategies of different peaks on one small cell, cheap enough to run several times.
const char* kTiny = R"({"name": "tiny-run", "seed": 3, "threads": 1,
  "grid": {"model": "tiny", "impl": ["plain", "checkpoint", "streambp"], "seq_len": 37, "partition": 16,
           "logits_partition": 8},
  "measure": {"memory": true, "time": {"warmup": 1, "repeat": 3}, "grad_error": {"reference": "float64"}}})";

TEST_F(Runner, WritesOneCompleteRecordPerCell) {
  const json r = run(kTiny);
  EXPECT_EQ(r.at("schema"), "bpbench.results/1");
  EXPECT_EQ(r.at("complete"), true);
  EXPECT_EQ(r.at("cells_total"), 3);
  const json& meta = r.at("meta");
  for (const char* key : {"versions", "argv", "device", "threads", "git_commit", "start_time", "end_time",
                          "hostname", "scenario_name", "scenario"})
    EXPECT_TRUE(meta.contains(key)) << key;
  EXPECT_EQ(meta.at("threads"), 1);
  EXPECT_EQ(meta.at("scenario_name"), "tiny-run");
  EXPECT_EQ(meta.at("scenario").at("grid").at("model"), "tiny");
  EXPECT_EQ(meta.at("versions").at("bpbench"), "0.1.0");
  EXPECT_EQ(meta.at("start_time").get<std::string>().back(), 'Z');
  // Every results file says which CUDA the build used, GPU or not.
  const json& cuda = meta.at("versions").at("cuda");
#ifdef BPBENCH_WITH_CUDA
  EXPECT_EQ(cuda.at("enabled"), true);
  EXPECT_EQ(cuda.at("cuda"), BPBENCH_BUILD_CUDA);
  EXPECT_TRUE(std::regex_match(cuda.at("nccl").get<std::string>(), std::regex("[0-9]+\\.[0-9]+\\.[0-9]+")))
      << cuda.dump();
  EXPECT_GT(cuda.at("cupti_api").get<int64_t>(), 0);
  for (const char* key : {"source", "cuda_runtime_headers", "driver", "devices"})
    EXPECT_TRUE(cuda.contains(key)) << key;
#else
  EXPECT_EQ(cuda.at("enabled"), false);
#endif

  const json& cells = r.at("cells");
  ASSERT_EQ(cells.size(), 3u);
  const char* impls[] = {"plain", "checkpoint", "streambp"};
  for (size_t i = 0; i < cells.size(); ++i) {
    const json& c = cells[i];
    SCOPED_TRACE(c.dump());
    for (const auto& key : grid_keys()) EXPECT_TRUE(c.at("axes").contains(key)) << key;
    EXPECT_EQ(c.at("axes").at("impl"), impls[i]);
    EXPECT_EQ(c.at("axes").at("seq_len"), 37);
    EXPECT_EQ(c.at("status"), "ok");
    EXPECT_EQ(c.at("threads"), 1);
    const json& m = c.at("memory");
    const int64_t base = m.at("base_bytes"), peak = m.at("peak_bytes");
    EXPECT_GT(base, 0);
    EXPECT_GE(peak, base);
    EXPECT_EQ(m.at("peak_above_base_bytes").get<int64_t>(), peak - base);
    int64_t by_category = 0;
    for (const auto& [name, bytes] : m.at("peak_by_category").items()) by_category += bytes.get<int64_t>();
    EXPECT_EQ(by_category, peak);
    EXPECT_GT(m.at("peak_by_category").at("params").get<int64_t>(), 0);
    EXPECT_GT(m.at("peak_by_category").at("grads").get<int64_t>(), 0);
    ASSERT_TRUE(c.at("loss").is_number());
    EXPECT_TRUE(std::isfinite(c.at("loss").get<double>()));
    const json& t = c.at("time");
    EXPECT_EQ(t.at("count"), 3);
    EXPECT_EQ(t.at("warmup"), 1);
    EXPECT_LE(t.at("min_s").get<double>(), t.at("median_s").get<double>());
    EXPECT_LE(t.at("median_s").get<double>(), t.at("max_s").get<double>());
    EXPECT_GT(t.at("min_s").get<double>(), 0.0);
    // Four runs on the same grads: without zeroing between runs they would hold 4x the gradient.
    EXPECT_LT(c.at("grad_error").at("groups").at("all").at("rel_l2").get<double>(), 1e-4);
  }
  // The same weights and batch in every cell: every strategy's loss agrees, and parameters and grads are
  // equal.
  EXPECT_NEAR(cells[0].at("loss").get<double>(), cells[2].at("loss").get<double>(), 1e-5);
  EXPECT_EQ(cells[0].at("memory").at("base_bytes"), cells[2].at("memory").at("base_bytes"));
  // plain keeps every activation and the full logits; streambp keeps one chunk's.
  EXPECT_GT(cells[0].at("memory").at("peak_above_base_bytes").get<int64_t>(),
            cells[2].at("memory").at("peak_above_base_bytes").get<int64_t>());
  EXPECT_FALSE(fs::exists(dir_ / "out" / "results.json.tmp"));
}

// A CUDA scenario on a machine without a GPU is read and run: every cell is a result, skipped with one line.
TEST_F(Runner, CudaCellsWithoutAGpuAreSkippedWithTheReason) {
  if (profiles::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is here: tests/device/ runs CUDA cells";
  const json r = run(R"({"name": "gpu-cells", "device": "cuda", "seed": 1,
    "grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 37, "partition": 16}})");
  EXPECT_EQ(r.at("complete"), true);
  ASSERT_EQ(r.at("cells").size(), 2u);
  for (const json& c : r.at("cells")) {
    EXPECT_EQ(c.at("status"), "skipped") << c.dump();
    EXPECT_EQ(c.at("reason"), profiles::no_gpu_reason());
    EXPECT_EQ(c.at("reason").get<std::string>().find('\n'), std::string::npos);
  }
  EXPECT_NE(profiles::no_gpu_reason().find("no CUDA"), std::string::npos);
}

// Every cell records the RoPE its model ran with: a preset's own (Llama 3.1's llama3 scaling, recorded even
// for a cell that is skipped before its 8B model is built), or the scenario's override.
TEST_F(Runner, EveryCellRecordsItsRope) {
  const json llama = run(R"({"name": "rope", "seed": 1,
    "grid": {"model": "llama3.1-8b", "impl": "mst", "objective": "dpo", "seq_len": 37}})",
                         "llama");
  const json& skipped = llama.at("cells").at(0);
  EXPECT_EQ(skipped.at("status"), "skipped");
  EXPECT_EQ(skipped.at("rope"), json({{"rope_type", "llama3"},
                                      {"rope_theta", 500000.0},
                                      {"factor", 8.0},
                                      {"original_max_position_embeddings", 8192},
                                      {"low_freq_factor", 1.0},
                                      {"high_freq_factor", 4.0}}));
  const json own = run(R"({"name": "rope", "seed": 1,
    "grid": {"model": "tiny", "impl": "plain", "seq_len": 37}, "measure": {"time": false}})",
                       "own");
  EXPECT_EQ(own.at("cells").at(0).at("rope"), json({{"rope_type", "default"}, {"rope_theta", 10000.0}}));

  const char* yarn = R"({"name": "yarn", "seed": 1, "rope": {"rope_type": "yarn", "factor": 4,
      "original_max_position_embeddings": 16},
    "grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 37, "partition": 16},
    "measure": {"time": false}})";
  for (const bool isolate : {false, true}) {
    const json r = run(yarn, isolate ? "yarn-isolated" : "yarn", isolate);
    for (const json& c : r.at("cells")) {
      EXPECT_EQ(c.at("status"), "ok") << c.dump();
      EXPECT_EQ(c.at("rope").at("rope_type"), "yarn");
      EXPECT_EQ(c.at("rope").at("rope_theta"), 10000.0);  // the model's own
      EXPECT_NEAR(c.at("rope").at("attention_factor").get<double>(), 0.1 * std::log(4.0) + 1, 1e-15);
    }
    // The override reaches the computation: the loss is another model's, and streambp still equals plain.
    const double plain = r.at("cells")[0].at("loss"), streambp = r.at("cells")[1].at("loss");
    EXPECT_NEAR(streambp, plain, 1e-5 * std::abs(plain));
    EXPECT_NE(plain, own.at("cells")[0].at("loss").get<double>());
  }
}

TEST_F(Runner, BudgetOverrunIsAnOomResultAndTheRunGoesOn) {
  const json free_run = run(kTiny, "free");
  const json& cells = free_run.at("cells");
  const int64_t base = cells[0].at("memory").at("base_bytes");
  const int64_t plain_peak = cells[0].at("memory").at("peak_bytes");
  const int64_t stream_peak = cells[2].at("memory").at("peak_bytes");
  ASSERT_GT(plain_peak, stream_peak);

  // A budget just above streambp's peak: plain cannot fit, streambp can.
  json s = json::parse(kTiny);
  s["measure"]["budget_bytes"] = stream_peak + (plain_peak - stream_peak) / 4;
  const json limited = run(s.dump(), "budget");
  ASSERT_EQ(limited.at("cells").size(), 3u);
  const json& oom = limited.at("cells")[0];
  EXPECT_EQ(oom.at("status"), "oom") << oom.dump();
  EXPECT_NE(oom.at("reason").get<std::string>().find("budget"), std::string::npos) << oom.dump();
  EXPECT_TRUE(oom.at("loss").is_null());
  EXPECT_TRUE(oom.at("grad_error").is_null());
  EXPECT_EQ(oom.at("memory").at("base_bytes"), base);  // where it stood when it ran out is kept
  EXPECT_LE(oom.at("memory").at("peak_bytes").get<int64_t>(), s["measure"]["budget_bytes"].get<int64_t>());
  const json& ok = limited.at("cells")[2];
  EXPECT_EQ(ok.at("status"), "ok") << ok.dump();
  EXPECT_EQ(ok.at("memory").at("peak_bytes"), stream_peak);
  EXPECT_TRUE(ok.at("grad_error").is_object());  // the budget is lifted for the reference run

  // A budget of base + 1000 bytes: every cell runs out, and every cell is still recorded.
  s["measure"]["budget_bytes"] = base + 1000;
  const json starved = run(s.dump(), "starved");
  ASSERT_EQ(starved.at("cells").size(), 3u);
  for (const auto& c : starved.at("cells")) EXPECT_EQ(c.at("status"), "oom") << c.dump();
  EXPECT_EQ(starved.at("complete"), true);
}

TEST_F(Runner, GradientErrorIsRoundOff) {
  const json r =
      run(R"({"grid": {"model": "tiny", "impl": ["plain", "streambp"], "seq_len": 37, "partition": 16,
    "logits_partition": 8, "dtype": ["float32", "float64"]}, "measure": {"time": {"warmup": 0, "repeat": 1}}})");
  const json& cells = r.at("cells");
  ASSERT_EQ(cells.size(), 4u);  // float32 plain, float32 streambp, float64 plain, float64 streambp
  for (const auto& c : cells) {
    SCOPED_TRACE(c.at("axes").dump());
    ASSERT_EQ(c.at("status"), "ok") << c.at("reason");
    const json& g = c.at("grad_error");
    EXPECT_EQ(g.at("reference"), "float64");
    for (const char* group : {"embed", "attention", "mlp", "norms", "lm_head", "all"}) {
      ASSERT_TRUE(g.at("groups").contains(group)) << group;
      for (const char* stat : {"er_abs", "er_rel", "max_abs", "rel_l2", "count"})
        EXPECT_TRUE(g.at("groups").at(group).contains(stat)) << group << "." << stat;
    }
    const double rel = g.at("groups").at("all").at("rel_l2");
    if (c.at("axes").at("dtype") == "float64") {
      EXPECT_LT(rel, 1e-10);
      EXPECT_LT(g.at("loss_abs_error").get<double>(), 1e-10);
    } else {
      EXPECT_LT(rel, 1e-4);
      EXPECT_GT(rel,
                0.0);  // float32 is not float64: an exact zero would mean the comparison compared nothing
    }
  }
}

// measure.grad_error.reference_device: "cpu" runs the float64 reference on the CPU (for a CUDA cell whose
// float64 step does not fit the GPU); on a CPU cell it is the same reference as "cell", to the bit. The CUDA
// cell with a CPU reference is tests/device/test_device.cpp's.
TEST_F(Runner, TheGradientErrorReferenceCanRunOnTheCpu) {
  const std::string grid = R"({"grid": {"model": "tiny", "impl": "streambp", "seq_len": 29, "partition": 8,
    "logits_partition": 8, "objective": ["sft", "grpo"]}, "measure": {"time": false, "grad_error": )";
  const json on_cell = run(grid + R"({"reference": "float64"}}})", "cell");
  const json on_cpu = run(grid + R"({"reference": "float64", "reference_device": "cpu"}}})", "cpu");
  ASSERT_EQ(on_cpu.at("cells").size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const json& a = on_cell.at("cells")[i].at("grad_error");
    const json& b = on_cpu.at("cells")[i].at("grad_error");
    EXPECT_EQ(a.at("reference_device"), "cpu");
    EXPECT_EQ(b.at("reference_device"), "cpu");
    EXPECT_EQ(a.at("groups"), b.at("groups"));
    EXPECT_EQ(a.at("reference_loss"), b.at("reference_loss"));
  }
  EXPECT_EQ(on_cpu.at("meta").at("scenario").at("measure").at("grad_error").at("reference_device"), "cpu");
  try {
    parse_scenario_text(grid + R"({"reference_device": "gpu"}}})", "test");
    ADD_FAILURE() << "an unknown reference device was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("measure.grad_error.reference_device"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("cell, cpu"), std::string::npos) << e.what();
  }
}

TEST_F(Runner, LoraSkippedAndDefaultPartitionCells) {
  const json r = run(R"({"grid": {"model": "tiny", "impl": ["streambp", "mst"], "objective": ["sft", "dpo"],
    "seq_len": 24, "lora_rank": 4, "lora_alpha": 8}, "measure": {"time": false}})");
  const json& cells = r.at("cells");
  ASSERT_EQ(cells.size(), 4u);  // sft streambp, sft mst, dpo streambp, dpo mst
  EXPECT_EQ(cells[3].at("axes").at("impl"), "mst");
  EXPECT_EQ(cells[3].at("status"), "skipped");
  EXPECT_FALSE(cells[3].at("reason").get<std::string>().empty());
  for (int i : {0, 1, 2}) {
    const json& c = cells[i];
    ASSERT_EQ(c.at("status"), "ok") << c.dump();
    EXPECT_EQ(c.at("axes").at("partition"), 24);  // absent: one chunk of seq_len rows
    EXPECT_EQ(c.at("axes").at("lora_rank"), 4);
    EXPECT_TRUE(c.at("time").is_null());
    const json& groups = c.at("grad_error").at("groups");
    EXPECT_TRUE(groups.contains("lora")) << groups.dump();
    EXPECT_FALSE(groups.contains("mlp")) << "only adapters are trainable with LoRA";
    EXPECT_LT(groups.at("all").at("rel_l2").get<double>(), 1e-4);
  }
}

// offload: an axis; cells that offload record their host bytes beside the device peak and its estimate, a
// strategy with no checkpoint store is skipped with the reason, and an offloaded cell's gradients are as
// exact as its twin's.
TEST_F(Runner, OffloadedCellsRecordHostBytes) {
  const json r = run(R"({"threads": 1, "grid": {"model": "tiny", "impl": ["streambp", "plain"], "seq_len": 37,
    "partition": 16, "logits_partition": 8, "offload": ["none", "checkpoints"]},
    "measure": {"time": {"warmup": 1, "repeat": 2}}})");
  const json& cells = r.at("cells");
  ASSERT_EQ(cells.size(), 4u);  // seq_len, impl, offload: offload varies fastest
  const json &stream_on_device = cells[0], &stream_offloaded = cells[1], &plain_offloaded = cells[3];
  ASSERT_EQ(stream_on_device.at("status"), "ok") << stream_on_device.dump();
  ASSERT_EQ(stream_offloaded.at("status"), "ok") << stream_offloaded.dump();
  EXPECT_EQ(stream_offloaded.at("axes").at("offload"), "checkpoints");
  EXPECT_EQ(cells[2].at("status"), "ok");
  EXPECT_EQ(plain_offloaded.at("status"), "skipped");
  EXPECT_NE(plain_offloaded.at("reason").get<std::string>().find("offload applies to checkpoint"),
            std::string::npos)
      << plain_offloaded.at("reason");
  const json& mem = stream_offloaded.at("memory");
  EXPECT_FALSE(stream_on_device.at("memory").contains("host_peak_bytes"));
  // tiny: 2 layers, d = 24, float32: one (1, 37, 24) buffer per stored layer input, x_1 (streambp makes
  // x_0 again from the ids). The device peak cannot grow, and falls only where the head peaks.
  EXPECT_EQ(mem.at("host_peak_bytes"), 37 * 24 * 4);
  EXPECT_EQ(mem.at("estimate_host_bytes"), 37 * 24 * 4);
  EXPECT_LE(mem.at("peak_bytes").get<int64_t>(),
            stream_on_device.at("memory").at("peak_bytes").get<int64_t>());
  EXPECT_EQ(stream_offloaded.at("loss"), stream_on_device.at("loss"));
  EXPECT_LT(stream_offloaded.at("grad_error").at("groups").at("all").at("rel_l2").get<double>(), 1e-4);

  // The run's table tells the twins apart and gives the host bytes a column of their own.
  std::vector<CellResult> parsed;
  for (const json& c : cells) parsed.push_back(CellResult::from_json(c));
  const std::string table = render_table(parsed);
  EXPECT_NE(table.find("| streambp +offload |"), std::string::npos) << table;
  EXPECT_NE(table.find("| host (MiB) |"), std::string::npos) << table;
}

TEST_F(Runner, IsolatedCellsMeasureWhatInProcessCellsMeasure) {
  const char* cell = R"({"threads": 1, "grid": {"model": "tiny", "impl": ["streambp", "plain"], "seq_len": 37,
    "partition": 16, "logits_partition": 8}, "measure": {"time": {"warmup": 0, "repeat": 1}}})";
  const json in_process = run(cell, "in", false);
  const json isolated = run(cell, "iso", true);
  EXPECT_EQ(isolated.at("meta").at("isolate"), true);
  for (size_t i = 0; i < 2; ++i) {
    const json& a = in_process.at("cells")[i];
    const json& b = isolated.at("cells")[i];
    ASSERT_EQ(b.at("status"), "ok") << b.dump();
    EXPECT_EQ(a.at("memory").at("peak_bytes"), b.at("memory").at("peak_bytes"));
    EXPECT_EQ(a.at("memory").at("base_bytes"), b.at("memory").at("base_bytes"));
    EXPECT_EQ(a.at("memory").at("peak_by_category"), b.at("memory").at("peak_by_category"));
    EXPECT_DOUBLE_EQ(a.at("loss").get<double>(), b.at("loss").get<double>());
  }
}

TEST_F(Runner, AChildKilledByASignalIsAnErrorResult) {
  const fs::path script = dir_ / "dies.sh";
  std::ofstream(script) << "#!/bin/sh\nkill -SEGV $$\n";
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  CellJob job;
  job.cell =
      parse_scenario_text(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 8}})").expand().at(0);
  job.settings.threads = 1;
  const CellResult r = run_cell_isolated(job, script.string());
  EXPECT_EQ(r.status, "error");
  EXPECT_NE(r.reason.find("signal 11"), std::string::npos) << r.reason;

  const CellResult silent = run_cell_isolated(job, "/bin/false");
  EXPECT_EQ(silent.status, "error");
  EXPECT_NE(silent.reason.find("exited with status 1"), std::string::npos) << silent.reason;
}

TEST_F(Runner, ResultsFileIsRewrittenAfterEveryCell) {
  ResultsWriter w(dir_ / "w", {{"scenario_name", "w"}}, 2);
  auto read = [&] { return json::parse(std::ifstream(w.path())); };
  EXPECT_EQ(read().at("cells").size(), 0u);
  EXPECT_EQ(read().at("complete"), false);
  CellResult r;
  r.cell =
      parse_scenario_text(R"({"grid": {"model": "tiny", "impl": "plain", "seq_len": 8}})").expand().at(0);
  r.status = "skipped";
  r.reason = "why";
  w.add(r);
  EXPECT_EQ(read().at("cells").size(), 1u);
  EXPECT_EQ(read().at("cells")[0].at("reason"), "why");
  w.add(r);
  w.finish();
  EXPECT_EQ(read().at("cells").size(), 2u);
  EXPECT_EQ(read().at("complete"), true);
  // A record survives the round trip an isolated cell's result makes.
  EXPECT_EQ(CellResult::from_json(r.to_json()).to_json(), r.to_json());
}

}  // namespace
}  // namespace bpbench::test_runner
