// test_hf_side_by_side.cpp: the Hugging Face peer (impls/peers/hf_checkpoint.py) runs the network bpbench
// runs, and writes results that bpbench's own readers take.
//   - `bpbench hf-config` of every preset, read back by bpbench's transformers-config reader, is the preset;
//   - transformers builds a Gemma 3 preset from that config;
//   - on the same preset and length, bpbench's tracking allocator (impls/peers/cpu_meter.py) gives the peer's
//   plain and checkpointed steps the peaks
//     bpbench's plain and checkpoint have, within 1%;
//   - a scenario cannot name a peer as its impl.
// The script's results file read by bpbench (validate, report, beside a bpbench run) and the GPU-only peers'
// skipped cells are tests/peers/test_peer_scripts.py's, in the run it makes anyway.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "harness/model/hf_model.h"
#include "harness/run/scenario.h"
#include "reports/results_file.h"
#include "tests/support/test_support.h"
#include "tests/support/transformers_configs.h"

namespace bpbench::testing::test_hf_side_by_side {
namespace {

namespace fs = std::filesystem;

TEST(HfConfig, EveryPresetReadsBackAsItself) {
  for (const ModelConfig& preset : model_presets()) {
    TempDir tmp;
    const std::string dir = tmp.sub(preset.name);
    std::ofstream(fs::path(dir) / "config.json") << hf_config_json(preset).dump(2);
    const ModelConfig back = read_hf_config(dir);
    SCOPED_TRACE(preset.name);
    EXPECT_EQ(back.vocab, preset.vocab);
    EXPECT_EQ(back.hidden, preset.hidden);
    EXPECT_EQ(back.intermediate, preset.intermediate);
    EXPECT_EQ(back.layers, preset.layers);
    EXPECT_EQ(back.heads, preset.heads);
    EXPECT_EQ(back.kv_heads, preset.kv_heads);
    EXPECT_EQ(back.head_dim, preset.head_dim);
    EXPECT_EQ(rope_to_json(back.rope), rope_to_json(preset.rope));
    EXPECT_EQ(back.rms_eps, preset.rms_eps);
    EXPECT_EQ(back.tie_embeddings, preset.tie_embeddings);
    EXPECT_EQ(back.qk_norm, preset.qk_norm);
    EXPECT_EQ(back.attention_bias, preset.attention_bias);
    EXPECT_EQ(back.parameter_count(), preset.parameter_count());
    EXPECT_EQ(back.sliding_layers, preset.sliding_layers);
    if (preset.has_sliding_layers()) {
      EXPECT_EQ(back.sliding_window, preset.sliding_window);
    }
    EXPECT_EQ(back.sliding_rope, preset.sliding_rope);
    EXPECT_EQ(back.attention_scale(), preset.attention_scale());
    EXPECT_EQ(back.unit_offset_norms, preset.unit_offset_norms);
    EXPECT_EQ(back.sandwich_norms, preset.sandwich_norms);
    EXPECT_EQ(back.activation, preset.activation);
    EXPECT_EQ(back.scale_embeddings, preset.scale_embeddings);
    EXPECT_EQ(back.qk_norm_whole, preset.qk_norm_whole);
    EXPECT_EQ(back.norms_scale_before_cast, preset.norms_scale_before_cast);
    EXPECT_EQ(back.block_input_norms, preset.block_input_norms);
    // DeepSeek's and GLM's blocks: latent attention's shapes, partial RoPE, the routing and the experts.
    EXPECT_EQ(back.mla.has_value(), preset.mla.has_value());
    if (preset.mla) {
      EXPECT_EQ(back.mla->q_lora_rank, preset.mla->q_lora_rank);
      EXPECT_EQ(back.mla->kv_lora_rank, preset.mla->kv_lora_rank);
      EXPECT_EQ(back.mla->rope_interleave, preset.mla->rope_interleave);
      EXPECT_NEAR(back.mla->softmax_mscale, preset.mla->softmax_mscale, 1e-12);
    }
    EXPECT_EQ(back.rope_head_dim(), preset.rope_head_dim());
    EXPECT_EQ(back.value_head_dim(), preset.value_head_dim());
    EXPECT_EQ(back.routing, preset.routing);
    EXPECT_EQ(back.norm_topk_prob, preset.norm_topk_prob);
    EXPECT_EQ(back.expert_groups, preset.expert_groups);
    EXPECT_EQ(back.expert_groups_chosen, preset.expert_groups_chosen);
    EXPECT_EQ(back.routed_scaling, preset.routed_scaling);
    EXPECT_EQ(back.shared_expert_intermediate, preset.shared_expert_intermediate);
    EXPECT_EQ(back.moe_layer_count(), preset.moe_layer_count());
    for (int64_t i = 0; i < preset.layers; ++i) EXPECT_EQ(back.has_rope(i), preset.has_rope(i)) << i;
  }
}

// transformers itself takes the config.json of the tiny presets of the families whose layers differ (its
// strict config types included) and builds each preset's network: parameter count and layer types as bpbench
// states them (made at build time with the family configs: tests/support/transformers_configs.h).
TEST(HfConfig, TransformersBuildsTheTinyPresetsOfEachLayerKind) {
  const PythonOutput& built = transformers_configs();
  require_python_output(built, "transformers' model builder");
  const std::map<std::string, std::string> expected = {
      {"tiny-gemma3", "Gemma3ForCausalLM {} sliding_attention,full_attention,sliding_attention\n"},
      {"tiny-olmo3",
       "Olmo3ForCausalLM {} sliding_attention,sliding_attention,sliding_attention,full_attention\n"},
      {"tiny-smollm3", "SmolLM3ForCausalLM {} full_attention,full_attention,full_attention,full_attention\n"},
      // Latent attention, grouped routing, shared experts, a dense first layer: its parameters are bpbench's.
      {"tiny-deepseek", "DeepseekV3ForCausalLM {} -\n"},
      {"tiny-glm4-moe", "Glm4MoeForCausalLM {} -\n"},
      // Gated DeltaNet beside gated attention; Qwen3-Next's experts with their gated shared expert.
      {"tiny-qwen3.5",
       "Qwen3_5ForCausalLM {} linear_attention,linear_attention,linear_attention,full_attention\n"},
      {"tiny-qwen3-next",
       "Qwen3NextForCausalLM {} linear_attention,linear_attention,linear_attention,full_attention\n"}};
  for (const auto& [name, line] : expected) {
    const ModelConfig preset = find_model_preset(name);
    EXPECT_EQ(file_text(built.dir / "build" / preset.name / "built.txt"),
              fmt::format(fmt::runtime(line), preset.parameter_count()));
  }
}

// The same meter: transformers' step under bpbench's tracking allocator against bpbench's own cell, `small`
// (d = 256, V = 32000), float32, T = 512. What differs is the code, not the counting: the attention (SDPA's
// CPU kernel against bpbench's, with what each keeps for its backward) and the loss (transformers' label
// shift and cross-entropy against bpbench's head). Measured 2026-11-27: plain 405139720 against 406978568
// bytes (-0.45%), checkpointing 356831240 against 356548616 (+0.08%); bases 156264704 against 156268544
// (parameters and gradients alike; the token ids and buffers are the few kilobytes that remain). At T = 1024
// the two read -0.56% and +0.10%; on the tiny preset (d = 24) they differ by up to 8%: there the attention
// codes' bookkeeping is the step.
TEST(HfSideBySide, PeerPeakOnTheCpuIsBpbenchsWithinOnePercent) {
  const std::string python = BPBENCH_PYTHON;
  if (!python_has_transformers())
    GTEST_SKIP() << python << " cannot import transformers (run scripts/setup.sh)";
  TempDir tmp;
  const std::string log = tmp.file("log");
  const std::string scenario = tmp.file("s.json"), run = tmp.sub("run");
  std::ofstream(scenario) << R"({"name": "meter", "grid": {"model": "small", "impl": ["plain", "checkpoint"],
      "dtype": "float32", "seq_len": 512}, "measure": {"time": {"warmup": 0, "repeat": 1}, "grad_error": false}})";
  const std::string run_cmd =
      fmt::format("'{}' run '{}' --out '{}' --quiet >'{}' 2>&1", BPBENCH_BINARY, scenario, run, log);
  ASSERT_EQ(std::system(run_cmd.c_str()), 0) << std::ifstream(log).rdbuf();
  const nlohmann::json ours = load_results(run + "/results.json");
  ASSERT_EQ(ours["cells"].size(), 2u);

  const fs::path script = fs::path(BPBENCH_SOURCE_DIR) / "impls" / "peers" / "hf_checkpoint.py";
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& cell = ours["cells"][i];
    const bool plain = cell["axes"]["impl"] == "plain";
    const std::string results = tmp.file(fmt::format("hf{}/results.json", i));
    const std::string cmd = fmt::format(
        "'{}' '{}' --model small --device cpu --dtype float32 --seq-len 512 --warmup 0 --repeat 1 {} "
        "--bpbench '{}' --out '{}' >'{}' 2>&1",
        python, script.string(), plain ? "--no-checkpointing" : "", BPBENCH_BINARY, results, log);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(log).rdbuf();
    const nlohmann::json peer = load_results(results)["cells"][0]["memory"];
    const nlohmann::json& mine = cell["memory"];
    SCOPED_TRACE(cell["axes"]["impl"].get<std::string>());
    const double base = mine["base_bytes"].get<double>(), peak = mine["peak_bytes"].get<double>();
    EXPECT_NEAR(peer["base_bytes"].get<double>(), base, 1e-4 * base);
    EXPECT_NEAR(peer["peak_bytes"].get<double>(), peak, 0.01 * peak);
    // Not a coincidence of totals: the step's own bytes (above the base) agree as well.
    const double above = mine["peak_above_base_bytes"].get<double>();
    EXPECT_NEAR(peer["peak_above_base_bytes"].get<double>(), above, 0.015 * above);
  }
}

TEST(HfSideBySide, AScenarioCannotRunAPeer) {
  try {
    parse_scenario_text(R"({"grid": {"model": "tiny", "impl": ["plain", "hf-checkpoint"], "seq_len": 32}})",
                        "test");
    ADD_FAILURE() << "a peer was accepted as a strategy";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'hf-checkpoint' is a peer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("impls/peers/hf_checkpoint.py"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(valid: plain, checkpoint"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace bpbench::testing::test_hf_side_by_side
