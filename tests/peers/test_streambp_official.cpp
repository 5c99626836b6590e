// test_streambp_official.cpp: the official StreamBP (PyPI streambp==1.0, installed by scripts/setup_peers.sh
// into .peers/streambp-official) against bpbench's float64 plain BP, on the tiny preset.
// impls/peers/streambp_official_exactness.py runs it in true float64 (transformers' float32 casts lifted) and
// saves its loss and every gradient, with transformers' plain BP beside them. Here:
//   - transformers' plain BP equals bpbench's (each case through bpbench's HF loader): the script's gradient
//     errors are against bpbench;
//   - one right-padded sequence: the official loss and every gradient are (N-1)/N times bpbench's to
//   round-off
//     (N: labels not -100; it divides by every label, not every shifted target), the deviation docs/peers.md
//     states. If the peer's gradients stop matching that scale, this fails;
//   - a prompt mask and a batch of two: not a uniform scale; the measured error per group is in the results
//   the
//     report reads (and a bpbench run plus those results report the peer in the time and gradient-error
//     tables).
// Where the peer is not installed the tests skip with that reason; under CI (CI=true) they fail instead.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "harness/model/hf_model.h"
#include "harness/model/safetensors.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_streambp_official {
namespace {

namespace fs = std::filesystem;

const PythonOutput& official_check() {
  static const PythonOutput run = [] {
    const fs::path src = BPBENCH_SOURCE_DIR, peers = src / "impls" / "peers";
    const fs::path installed = src / ".peers" / "streambp-official" / "streambp" / "stream_model.py";
    return cached_python_output(
        "streambp_official",
        {peers / "streambp_official_exactness.py", peers / "streambp_official_upstream.py",
         peers / "common.py", peers / "checkouts.py", peers / "launch.py",
         src / "tests" / "oracle" / "oracle_common.py"},
        fmt::format("--bpbench '{}'", BPBENCH_BINARY), "results.json",
        fs::exists(installed)
            ? ""
            : fmt::format("{} is missing (run scripts/setup_peers.sh): official StreamBP not run",
                          installed.string()));
  }();
  return run;
}
const bool official_check_made_at_build_time = made_at_build_time(&official_check);

class StreambpOfficial : public ::testing::Test {
 protected:
  void SetUp() override { require_python_output(official_check(), "the peer"); }
};

struct CaseResult {
  StepResult bpbench, plain, official;
  int64_t labels = 0;  // labels not -100 (N)
};

CaseResult run_case(const std::string& name) {
  const fs::path dir = official_check().dir;
  const SafetensorsFile file((dir / "check.safetensors").string());
  Model model = load_hf_model((dir / "model").string(), torch::TensorOptions().dtype(torch::kDouble));
  Batch b;
  b.input_ids = file.get(name + ":input_ids", torch::kLong);
  b.targets = file.get(name + ":targets", torch::kLong);
  b.group = 1;
  b.examples = b.input_ids.size(0);
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  const auto objective = make_objective("sft");
  CaseResult r;
  r.bpbench = run_step("plain", model, b, *objective, {7, 5});
  r.labels = file.get(name + ":labels", torch::kLong).ne(kIgnoreIndex).sum().item<int64_t>();
  for (const char* side : {"plain", "official"}) {
    StepResult& s = std::string(side) == "plain" ? r.plain : r.official;
    s.loss = file.get(fmt::format("{}:loss_{}", name, side), torch::kDouble).item<double>();
    for (const auto& n : r.bpbench.names) {
      s.names.push_back(n);
      s.grads.push_back(file.get(fmt::format("{}:grad_{}:{}", name, side, n), torch::kDouble));
    }
  }
  return r;
}

StepResult scaled(const StepResult& s, double factor) {
  StepResult out = s;
  out.loss *= factor;
  for (auto& g : out.grads) g = g * factor;
  return out;
}

TEST_F(StreambpOfficial, TransformersPlainBpIsBpbenchsInEveryCase) {
  for (const std::string name : {"right_pad", "prompt_mask", "batch2"})
    expect_same_gradients(run_case(name).bpbench, run_case(name).plain, 1e-10, name);
}

TEST_F(StreambpOfficial, OneRightPaddedSequenceIsPlainBpTimesNMinus1OverN) {
  const CaseResult r = run_case("right_pad");
  const double factor = static_cast<double>(r.labels - 1) / static_cast<double>(r.labels);
  EXPECT_EQ(r.labels, 32);
  EXPECT_NEAR(r.official.loss / r.bpbench.loss, factor, 1e-12);
  expect_same_gradients(scaled(r.bpbench, factor), r.official, 1e-10, "official StreamBP, right padding");
}

// With a prompt mask or two sequences the official gradients are no uniform scale of the true ones: no single
// factor brings every parameter within 1e-3 (the measured errors are in results.json, per group).
TEST_F(StreambpOfficial, APromptMaskOrABatchOfTwoIsNotAUniformScale) {
  for (const std::string name : {"prompt_mask", "batch2"}) {
    const CaseResult r = run_case(name);
    const double factor = r.official.loss / r.bpbench.loss;  // the best candidate: the loss's own ratio
    double worst = 0;
    for (size_t i = 0; i < r.bpbench.grads.size(); ++i) {
      const double ref = (r.bpbench.grads[i] * factor).norm().item<double>();
      if (ref == 0) continue;
      worst =
          std::max(worst, (r.official.grads[i] - r.bpbench.grads[i] * factor).norm().item<double>() / ref);
    }
    EXPECT_GT(worst, 1e-3) << name << ": the official gradients became a uniform scale (factor " << factor
                           << ")";
  }
}

TEST_F(StreambpOfficial, ItsResultsReportBesideABpbenchRun) {
  const fs::path results = official_check().dir / "results.json";
  TempDir tmp;
  const std::string scenario = tmp.file("s.json"), run = tmp.file("run"), report = tmp.sub("report"),
                    log = tmp.file("log");
  std::ofstream(scenario) << R"({"name": "peer", "threads": 1, "grid": {"model": "tiny", "impl": "streambp",
      "dtype": "float32", "seq_len": 37, "partition": 7, "logits_partition": 5},
      "measure": {"time": {"warmup": 0, "repeat": 1}, "grad_error": {"reference": "float64"}}})";
  const std::string cmd = fmt::format(
      "'{0}' run '{1}' --out '{2}' --quiet >'{5}' 2>&1 && '{0}' report '{2}' '{3}' --out '{4}' >>'{5}' 2>&1",
      BPBENCH_BINARY, scenario, run, results.string(), report, log);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << file_text(log);
  const std::string md = file_text(fs::path(report) / "report.md");
  for (const char* section : {"| streambp |", "| streambp-official |"})
    EXPECT_NE(md.find(section), std::string::npos) << section << "\n" << md;
  // Its gradient-error rows, for each case: the right-padded one's loss off by 1/N = 1/32 relative.
  EXPECT_NE(md.find("| streambp-official fp64 Er_abs | streambp-official fp64 Er_rel |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("3.13e-02 |"), std::string::npos) << md;
}

}  // namespace
}  // namespace bpbench::testing::test_streambp_official
