// model_config.cpp: preset table and parameter counting.
#include "harness/model/model_config.h"

#include <fmt/format.h>

#include <stdexcept>

namespace bpbench {

namespace {

ModelConfig qwen3(std::string name, int64_t d, int64_t inter, int64_t layers, int64_t heads, bool tied) {
  ModelConfig c;
  c.name = std::move(name);
  c.vocab = 151936;
  c.hidden = d;
  c.intermediate = inter;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.rope.theta = 1e6;
  c.rope.max_positions = 40960;  // the published config.json files
  c.rms_eps = 1e-6;
  c.tie_embeddings = tied;
  c.qk_norm = true;
  return c;
}

// Llama 3.1 and 3.2 as published: rope_scaling {"rope_type": "llama3", "factor": rope_factor,
// "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}, rope_theta 500000,
// 131072 positions.
ModelConfig llama3(std::string name, int64_t d, int64_t inter, int64_t layers, int64_t head_dim, bool tied,
                   double rope_factor) {
  ModelConfig c;
  c.name = std::move(name);
  c.vocab = 128256;
  c.hidden = d;
  c.intermediate = inter;
  c.layers = layers;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = head_dim;
  c.rope.type = RopeType::kLlama3;
  c.rope.theta = 500000.0;
  c.rope.max_positions = 131072;
  c.rope.factor = rope_factor;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_positions = 8192;
  c.rms_eps = 1e-5;
  c.tie_embeddings = tied;
  return c;
}

std::vector<ModelConfig> build_presets() {
  ModelConfig tiny;  // every feature switched on, dimensions small enough for finite differences
  tiny.name = "tiny";
  tiny.vocab = 97;
  tiny.hidden = 24;
  tiny.intermediate = 40;
  tiny.layers = 2;
  tiny.heads = 4;
  tiny.kv_heads = 2;
  tiny.head_dim = 6;
  tiny.rope.theta = 10000.0;
  tiny.rope.max_positions = 32768;
  tiny.qk_norm = true;

  ModelConfig small;  // CPU demos: vocab >= 32000 so the logits cost shows as it does on real models
  small.name = "small";
  small.vocab = 32000;
  small.hidden = 256;
  small.intermediate = 768;
  small.layers = 4;
  small.heads = 4;
  small.kv_heads = 2;
  small.head_dim = 64;
  small.rope.theta = 1e6;
  small.rope.max_positions = 32768;
  small.qk_norm = true;

  return {
      tiny,
      small,
      qwen3("qwen3-0.6b", 1024, 3072, 28, 16, true),
      qwen3("qwen3-1.7b", 2048, 6144, 28, 16, true),
      qwen3("qwen3-4b", 2560, 9728, 36, 32, true),
      qwen3("qwen3-8b", 4096, 12288, 36, 32, false),
      qwen3("qwen3-14b", 5120, 17408, 40, 40, false),
      qwen3("qwen3-32b", 5120, 25600, 64, 64, false),
      llama3("llama3.1-8b", 4096, 14336, 32, 128, false, 8.0),
      llama3("llama3.2-1b", 2048, 8192, 16, 64, true, 32.0),
  };
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t q = hidden * heads * head_dim + (attention_bias ? heads * head_dim : 0);
  const int64_t kv = 2 * (hidden * kv_heads * head_dim + (attention_bias ? kv_heads * head_dim : 0));
  const int64_t o = heads * head_dim * hidden;
  const int64_t mlp = 3 * hidden * intermediate;
  const int64_t norms = 2 * hidden + (qk_norm ? 2 * head_dim : 0);
  const int64_t per_layer = q + kv + o + mlp + norms;
  const int64_t embed = vocab * hidden;
  return embed + (tie_embeddings ? 0 : embed) + layers * per_layer + hidden;
}

bool ModelConfig::has_sliding_layers() const {
  for (bool s : sliding_layers)
    if (s) return true;
  return false;
}

void ModelConfig::validate() const {
  auto require = [&](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(fmt::format("model '{}': {}", name, what));
  };
  require(vocab > 0 && hidden > 0 && intermediate > 0 && layers > 0,
          "vocab, hidden, intermediate, layers must be > 0");
  require(heads > 0 && kv_heads > 0 && head_dim > 0, "heads, kv_heads, head_dim must be > 0");
  require(heads % kv_heads == 0, "heads must be a multiple of kv_heads (GQA)");
  require(head_dim % 2 == 0, "head_dim must be even (RoPE rotates pairs)");
  require(rms_eps > 0 && rope.theta > 0, "rms_eps and rope theta must be > 0");
  require(rope.type != RopeType::kDynamic || head_dim > 2, "dynamic RoPE needs head_dim > 2");
  require(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == layers,
          "sliding_layers must name every layer (or none)");
  require(!has_sliding_layers() || sliding_window > 0, "sliding layers need a sliding_window > 0");
}

const std::vector<ModelConfig>& model_presets() {
  static const std::vector<ModelConfig> presets = build_presets();
  return presets;
}

std::string model_preset_names() {
  std::string names;
  for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

ModelConfig find_model_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return p;
  throw std::invalid_argument(fmt::format("unknown model '{}' (valid: {}, or a Hugging Face model directory)",
                                          name, model_preset_names()));
}

}  // namespace bpbench
