// test_hf_oracle.cpp: Hugging Face transformers as the external oracle. tests/oracle/hf_oracle.py builds tiny
// random models in transformers, at least one of every family of hf_families.def
// (EveryRegisteredFamilyHasACase), saves them with save_pretrained, and computes their SFT and DPO losses
// (and, for the mixtures of experts, SFT with transformers' load-balancing loss added) and every parameter's
// gradient in true float64. Here each directory goes through bpbench's own HF loader, and every strategy must
// give transformers' loss and every gradient to 1e-10 relative. This proves that bpbench's model is the model
// users train, not only that its strategies agree with each other.
//
// The oracle runs under the Python that CMake found LibTorch through (BPBENCH_PYTHON: the project's .venv,
// with the pinned transformers). Where that Python has no transformers (a GPU machine's own torch), the tests
// skip with that reason; under CI (CI=true) they fail instead, so the oracle never silently goes missing.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "harness/model/hf_model.h"
#include "harness/model/safetensors.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_hf_oracle {
namespace {

namespace fs = std::filesystem;

// Each case of hf_oracle.py with the objectives it was run for: SFT and DPO for the four shape cases, SFT
// alone for the RoPE cases (RoPE sits below every objective; the DPO cells of the shape cases cover the
// objective).
const std::vector<std::pair<std::string, std::vector<std::string>>> kCases = {
    {"qwen3_gqa2_tied", {"sft", "dpo"}},
    {"qwen3_gqa4_untied", {"sft", "dpo"}},
    {"llama_gqa2_untied", {"sft", "dpo"}},
    {"llama_mha_tied", {"sft", "dpo"}},
    {"qwen3_gqa3_tied", {"sft"}},
    {"qwen2_bias", {"sft"}},
    {"llama3_scaling", {"sft"}},
    {"llama3_scaling_both_forms", {"sft"}},
    {"llama3_scaling_hub_4x", {"sft"}},
    {"linear", {"sft"}},
    {"linear_hub_4x", {"sft"}},
    {"dynamic_past_max_positions", {"sft"}},
    {"dynamic_within_max_positions_hub_4x", {"sft"}},
    {"yarn", {"sft"}},
    {"yarn_every_option", {"sft"}},
    {"yarn_attention_factor_implicit_factor", {"sft"}},
    {"yarn_hub_4x", {"sft"}},
    {"gemma3_mixed", {"sft", "dpo"}},
    {"gemma3_hub_4x", {"sft"}},
    {"mistral_window", {"sft", "dpo"}},
    {"mistral_no_window", {"sft"}},
    {"phi3_fused", {"sft", "dpo"}},
    {"phi3_window", {"sft"}},
    {"phi3_longrope_long", {"sft"}},
    {"phi3_longrope_short", {"sft"}},
    {"qwen3_moe_k2", {"sft", "dpo", "sft_aux"}},
    {"qwen3_moe_k3_dense_layer", {"sft"}},
    {"mixtral", {"sft", "dpo", "sft_aux"}},
    {"olmo2", {"sft", "dpo"}},
    {"olmo3_mixed", {"sft", "dpo"}},
    {"olmo3_hub_4x", {"sft"}},
    {"gpt_oss", {"sft", "dpo", "sft_aux"}},
    {"smollm3_nope", {"sft", "dpo"}},
    {"smollm3_window", {"sft"}},
    {"deepseek_v3", {"sft", "dpo"}},
    {"deepseek_v3_direct_q", {"sft"}},
    {"deepseek_v2", {"sft", "dpo"}},
    {"glm4_moe_lite", {"sft"}},
    {"glm4_moe", {"sft", "dpo"}},
    {"glm4_moe_odd_rotary", {"sft"}},
    {"qwen3_5", {"sft", "dpo"}},
    {"qwen3_next", {"sft", "dpo"}},
    {"qwen3_5_moe", {"sft"}},
};
// The hybrid linear-attention cases run streambp at these partitions too: 1 and 2 rows (chunks shorter than
// the conv's halo of 3, whose gradient then crosses several chunks) and one longer than T.
const std::vector<std::string> kRecurrentCases = {"qwen3_5", "qwen3_next", "qwen3_5_moe"};
const std::vector<int64_t> kRecurrentPartitions = {1, 2, 30};
const std::vector<std::string> kImpls = {"plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"};

// Chunks that do not divide the prime lengths, so every strategy has a ragged last chunk.
constexpr Partitioning kPartition{/*rows=*/7, /*logits_rows=*/5};
constexpr double kTolerance = 1e-10;

// The oracle's output for the current hf_oracle.py (cached_python_output: made once per build tree).
const PythonOutput& oracle() {
  static const PythonOutput run = [] {
    const std::string python = BPBENCH_PYTHON;
    const bool has_transformers = python_has_transformers();
    return cached_python_output(
        "hf_oracle",
        {fs::path(BPBENCH_SOURCE_DIR) / "tests" / "oracle" / "hf_oracle.py",
         fs::path(BPBENCH_SOURCE_DIR) / "tests" / "oracle" / "oracle_common.py",
         fs::path(BPBENCH_SOURCE_DIR) / "tests" / "oracle" / "oracle_names.py"},
        "", "cases.json",
        has_transformers
            ? ""
            : fmt::format("{} cannot import transformers (run scripts/setup.sh): oracle not run", python));
  }();
  return run;
}
const bool oracle_made_at_build_time = made_at_build_time(&oracle);

// case, objective, impl, partition rows (the logits' stay kPartition's)
using OracleCell = std::tuple<std::string, std::string, std::string, int64_t>;

// The oracle's "sft_aux" is SFT with the routers' load-balancing loss on (its weight in the oracle's file).
std::string objective_of(const std::string& oracle_objective) {
  return oracle_objective == "sft_aux" ? "sft" : oracle_objective;
}

// Every (case, objective, impl) whose impl runs the objective (mst does not run DPO).
std::vector<OracleCell> oracle_cells() {
  std::vector<OracleCell> cells;
  for (const auto& [name, objectives] : kCases)
    for (const auto& objective : objectives)
      for (const auto& impl : kImpls)
        if (!make_strategy(impl)->unsupported({objective_of(objective), 1})) {
          cells.emplace_back(name, objective, impl, kPartition.rows);
          const bool recurrent =
              std::find(kRecurrentCases.begin(), kRecurrentCases.end(), name) != kRecurrentCases.end();
          if (recurrent && impl == "streambp")
            for (const int64_t rows : kRecurrentPartitions) cells.emplace_back(name, objective, impl, rows);
        }
  return cells;
}

class HfOracle : public ::testing::TestWithParam<OracleCell> {
 protected:
  void SetUp() override { require_python_output(oracle(), "the oracle"); }
};

// The batch the oracle used for `objective`: its ids (right-padded with 0) and shifted targets; DPO's rows
// are (chosen, rejected) pairs with the oracle's reference sums.
Batch oracle_batch(const SafetensorsFile& file, const std::string& objective) {
  auto get = [&](const std::string& name, torch::ScalarType type) {
    return file.get(objective + ":" + name, type);
  };
  Batch b;
  b.input_ids = get("input_ids", torch::kLong);
  b.targets = get("targets", torch::kLong);
  b.group = objective == "dpo" ? 2 : 1;
  b.examples = b.input_ids.size(0) / b.group;
  b.loss_tokens = b.targets.ne(kIgnoreIndex).sum().item<int64_t>();
  if (objective == "dpo") {
    b.ref_sums = get("ref_sums", torch::kDouble);
    b.beta = get("beta", torch::kDouble).item<double>();
  }
  return b;
}

TEST_P(HfOracle, LossAndEveryGradientMatchTransformersInFloat64) {
  const auto& [name, objective_name, impl, rows] = GetParam();
  const fs::path case_dir = oracle().dir / name;
  const SafetensorsFile file((case_dir / "oracle.safetensors").string());
  Model model = load_hf_model((case_dir / "model").string(), torch::TensorOptions().dtype(torch::kDouble));
  const Batch batch = oracle_batch(file, objective_name);
  const auto objective = make_objective(objective_of(objective_name));
  if (const std::string coef = objective_name + ":router_aux_loss_coef"; file.find(coef))
    model.router_balance = std::make_shared<RouterBalance>(file.get(coef, torch::kDouble).item<double>());

  const StepResult got = run_step(impl, model, batch, *objective, {rows, kPartition.logits_rows});
  StepResult ref;
  ref.loss = file.get(objective_name + ":loss", torch::kDouble).item<double>();
  for (const auto& n : got.names) {
    const std::string key = objective_name + ":grad:" + n;
    ASSERT_NE(file.find(key), nullptr) << "transformers has no parameter " << n;
    ref.names.push_back(n);
    ref.grads.push_back(file.get(key, torch::kDouble));
  }
  expect_same_gradients(ref, got, kTolerance,
                        fmt::format("{} {} / {} p{}", name, objective_name, impl, rows));

  // transformers' own float64 mode (float32 RoPE table, RMSNorm and softmax) is outside the tolerance: the
  // comparison above is against a truly float64 forward, and could see such a difference.
  const double with_casts = file.get(objective_name + ":loss_f32_casts", torch::kDouble).item<double>();
  EXPECT_GT(std::abs(got.loss - with_casts), kTolerance * std::abs(ref.loss)) << name;
}

INSTANTIATE_TEST_SUITE_P(Cases, HfOracle, ::testing::ValuesIn(oracle_cells()), [](const auto& info) {
  std::string s = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::get<2>(info.param);
  if (std::get<3>(info.param) != kPartition.rows) s += "_p" + std::to_string(std::get<3>(info.param));
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
});

// Every family of hf_families.def has a case whose saved config.json names its architecture: a family added
// to the registry without an oracle case fails here.
TEST(HfOracleCases, EveryRegisteredFamilyHasACase) {
  const PythonOutput& run = oracle();
  if (!run.skip.empty()) GTEST_SKIP() << run.skip;
  ASSERT_TRUE(run.error.empty()) << run.error;
  std::map<std::string, std::vector<std::string>> cases_of;  // architecture -> the cases that build it
  for (const auto& [name, objectives] : kCases) {
    const auto config = json_file(run.dir / name / "model" / "config.json");
    for (const auto& a : config.at("architectures")) cases_of[a.get<std::string>()].push_back(name);
  }
  for (const auto& family : hf_family_names())
    EXPECT_FALSE(cases_of[family.architecture].empty())
        << family.label << " (" << family.architecture << ") has no case in tests/oracle/hf_oracle.py";
}

TEST(HfOracleCases, TheOracleWroteExactlyTheCasesTestedHere) {
  const PythonOutput& run = oracle();
  if (!run.skip.empty()) GTEST_SKIP() << run.skip;
  ASSERT_TRUE(run.error.empty()) << run.error;
  const auto written =
      json_file(run.dir / "cases.json").get<std::map<std::string, std::vector<std::string>>>();
  EXPECT_EQ(written, (std::map<std::string, std::vector<std::string>>(kCases.begin(), kCases.end())));
}

// gpt-oss's released checkpoints store the experts as MXFP4 (harness/model/mxfp4.h): loaded, each expert's
// gate, up and down are transformers' own dequantization of them (convert_moe_packed_tensors), de-interleaved
// and transposed as the BF16 releases are, to the bit; every other weight is the file's.
TEST(HfOracleMxfp4, GptOssExpertsLoadAsTransformersDequantizesThem) {
  require_python_output(oracle(), "the oracle");
  const fs::path dir = oracle().dir / "gpt_oss_mxfp4";
  const Model m = load_hf_model((dir / "model").string(), torch::TensorOptions().dtype(torch::kFloat));
  const SafetensorsFile expected((dir / "expected.safetensors").string());
  using torch::indexing::None;
  using torch::indexing::Slice;
  ASSERT_EQ(m.config.layers, 2);
  for (int64_t i = 0; i < m.config.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.mlp.experts.", i);
    const auto gate_up = expected.get(p + "gate_up_proj", torch::kFloat);  // (E, d, 2 Ie), x @ W
    const auto down = expected.get(p + "down_proj", torch::kFloat);        // (E, Ie, d)
    const auto& w = m.layers[static_cast<size_t>(i)];
    ASSERT_EQ(static_cast<int64_t>(w.expert_gate.size()), gate_up.size(0));
    for (int64_t e = 0; e < gate_up.size(0); ++e) {
      SCOPED_TRACE(fmt::format("layer {} expert {}", i, e));
      const auto k = static_cast<size_t>(e);
      EXPECT_TRUE(torch::equal(w.expert_gate[k].weight, gate_up[e].index({Slice(), Slice(0, None, 2)}).t()));
      EXPECT_TRUE(torch::equal(w.expert_up[k].weight, gate_up[e].index({Slice(), Slice(1, None, 2)}).t()));
      EXPECT_TRUE(torch::equal(w.expert_down[k].weight, down[e].t()));
    }
    EXPECT_GT(gate_up.abs().max().item<double>(), 1.0);  // not the zeros of an unloaded tensor
  }
  const SafetensorsFile file((dir / "model" / "model.safetensors").string());
  EXPECT_TRUE(torch::equal(m.embed_weight, file.get("model.embed_tokens.weight", torch::kFloat)));
}

// Qwen3.5's and Qwen3.5-MoE's image-text checkpoints, as transformers saves them (the text model under
// model.language_model.*, a vision tower beside it): bpbench loads their text model, every parameter equal to
// what transformers' own text class (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM) loads from the directory, and
// the config read from text_config equal to the text case's.
TEST(HfOracleMultimodal, Qwen3_5ImageTextCheckpointsLoadAsTheirTextModel) {
  require_python_output(oracle(), "the oracle");
  for (const auto& [name, text_case] : {std::pair<std::string, std::string>{"qwen3_5_multimodal", "qwen3_5"},
                                        {"qwen3_5_moe_multimodal", "qwen3_5_moe"}}) {
    SCOPED_TRACE(name);
    const fs::path dir = oracle().dir / name;
    const Model m = load_hf_model((dir / "model").string(), torch::TensorOptions().dtype(torch::kFloat));
    const ModelConfig text = read_hf_config((oracle().dir / text_case / "model").string());
    EXPECT_EQ(hf_config_json(m.config), hf_config_json(text));
    const SafetensorsFile expected((dir / "expected.safetensors").string());
    size_t compared = 0;
    for (const auto& p : m.named_parameters()) {
      ASSERT_NE(expected.find(p.name), nullptr) << "transformers' text model has no " << p.name;
      EXPECT_TRUE(torch::equal(p.tensor, expected.get(p.name, torch::kFloat))) << p.name;
      ++compared;
    }
    EXPECT_EQ(compared, expected.tensors().size());
  }
}

}  // namespace
}  // namespace bpbench::testing::test_hf_oracle
