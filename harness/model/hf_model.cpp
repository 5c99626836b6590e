// hf_model.cpp: config.json -> ModelConfig, and safetensors weights -> Model, checked name by name.
#include "harness/model/hf_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "harness/model/hf_config_reader.h"
#include "harness/model/hf_family.h"
#include "harness/model/mxfp4.h"
#include "harness/model/rope_config.h"
#include "harness/model/safetensors.h"

namespace bpbench {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Architecture {
  const char* name;
  const char* label;       // the family as people name it: "Qwen3", "Gemma 3 text"
  const char* model_type;  // config.json's "model_type", used when "architectures" is absent
  bool qk_norm;
  bool attention_bias;            // on q, k, v only
  int64_t default_max_positions;  // transformers' max_position_embeddings default
  const HfFamilyFields* own;      // what the family adds to the shared fields (hf_family.h); nullptr: nothing
};

}  // namespace

// The families' own fields, declared from the one list (hf_families.def; each defined in its family's file).
// A family that adds nothing names no_own_fields: the shared fields, full attention on every layer, SiLU,
// and RoPE from "rope_parameters" (or the legacy "rope_theta" and "rope_scaling").
#define BPBENCH_HF_FAMILY(architecture, label, model_type, qk_norm, attention_bias, max_positions, fields) \
  const HfFamilyFields* fields();
#include "harness/model/hf_families.def"
#undef BPBENCH_HF_FAMILY

namespace {

const HfFamilyFields* no_own_fields() {
  return nullptr;
}

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> list = {
#define BPBENCH_HF_FAMILY(architecture, label, model_type, qk_norm, attention_bias, max_positions, fields) \
  {architecture, label, model_type, qk_norm, attention_bias, max_positions, fields()},
#include "harness/model/hf_families.def"
#undef BPBENCH_HF_FAMILY
  };
  return list;
}

// Lexical, not canonical: Hugging Face cache snapshots are symlink farms and the name should stay the user's.
std::string dir_basename(const std::string& dir) {
  std::string s = fs::absolute(dir).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  const auto slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

const Architecture* architecture_named(const std::string& name) {
  for (const auto& known : architectures())
    if (name == known.name) return &known;
  return nullptr;
}

// The family whose multimodal class config.json names (HfFamilyFields::multimodal_class), or null.
const Architecture* multimodal_family(const json& j) {
  const auto it = j.find("architectures");
  if (it == j.end() || !it->is_array()) return nullptr;
  for (const auto& a : *it)
    for (const auto& known : architectures())
      if (known.own && known.own->multimodal_class && a == known.own->multimodal_class) return &known;
  return nullptr;
}

const Architecture& architecture(const ConfigReader& r) {
  const json* archs = r.find("architectures");
  if (archs) {
    if (!archs->is_array() || archs->empty()) r.fail("\"architectures\" must be a non-empty list");
    for (const auto& a : *archs)
      if (const Architecture* known = a.is_string() ? architecture_named(a.get<std::string>()) : nullptr)
        return *known;
    if (const Architecture* text = multimodal_family(r.json())) return *text;
    for (const auto& a : *archs)
      if (a == "Gemma3ForConditionalGeneration")
        r.fail(
            "Gemma3ForConditionalGeneration is Gemma 3's multimodal checkpoint (4b, 12b, 27b), whose text "
            "weights live under language_model.*; bpbench loads the text model Gemma3ForCausalLM (model_type "
            "gemma3_text): use a text-only checkpoint, or the presets gemma3-4b, gemma3-12b, gemma3-27b");
    r.fail(
        fmt::format("unsupported architecture {} (supported: {})", archs->dump(), hf_architecture_names()));
  }
  const std::string type = r.string("model_type");
  for (const auto& known : architectures())
    if (type == known.model_type) return known;
  r.fail(fmt::format("unsupported architecture: no \"architectures\" and model_type '{}' (supported: {})",
                     type, hf_architecture_names()));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

std::string hf_architecture_names() {
  std::string s;
  for (const auto& a : architectures()) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

std::vector<HfFamilyName> hf_family_names() {
  std::vector<HfFamilyName> out;
  for (const auto& a : architectures()) out.push_back({a.label, a.name, a.model_type});
  return out;
}

std::string hf_family_labels() {
  std::string s;
  for (const auto& a : architectures()) s += (s.empty() ? "" : ", ") + std::string(a.label);
  return s;
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

namespace {

// config.json's path for a model directory or the file itself, and its object.
std::pair<std::string, json> config_json_of(const std::string& dir_or_file) {
  std::error_code ec;
  const bool file = fs::is_regular_file(dir_or_file, ec);
  const std::string path = file ? dir_or_file : (fs::path(dir_or_file) / "config.json").string();
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(
        fmt::format("Hugging Face model '{}': cannot open config.json ({})", dir_or_file, path));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("Hugging Face config '{}': malformed JSON: {}", path, e.what()));
  }
  if (!j.is_object())
    throw std::runtime_error(fmt::format("Hugging Face config '{}': not a JSON object", path));
  return {path, std::move(j)};
}

}  // namespace

std::string hf_config_dtype(const std::string& dir_or_file) {
  const auto [path, j] = config_json_of(dir_or_file);
  const ConfigReader r(path, j);
  const std::string dtype = r.string("dtype");
  return dtype.empty() ? r.string("torch_dtype") : dtype;
}

ModelConfig read_hf_config(const std::string& dir_or_file) {
  std::error_code ec;
  const bool file = fs::is_regular_file(dir_or_file, ec);
  // The model's name: its directory's, also when the file itself is named (".../Qwen3-8B/config.json").
  const std::string dir = file ? fs::path(dir_or_file).parent_path().string() : dir_or_file;
  const auto [path, whole] = config_json_of(dir_or_file);
  // A multimodal checkpoint's text model (HfFamilyFields::multimodal_class) is read from its text_config.
  json j = whole;
  std::string where = path;
  if (multimodal_family(whole)) {
    if (!whole.contains("text_config") || !whole["text_config"].is_object())
      ConfigReader(path, whole)
          .fail(fmt::format("{} needs a \"text_config\" object (its text model)",
                            whole["architectures"].dump()));
    j = whole["text_config"];
    if (!j.contains("tie_word_embeddings") && whole.contains("tie_word_embeddings"))
      j["tie_word_embeddings"] = whole["tie_word_embeddings"];
    j["architectures"] = {multimodal_family(whole)->name};
    where = path + " (text_config)";
  }
  ConfigReader r(where, j);
  const Architecture& arch = architecture(r);

  // Refuse what Model cannot express instead of silently loading a different network.
  if (!arch.attention_bias && r.boolean("attention_bias", false))
    r.fail(fmt::format("attention_bias = true on {} biases o_proj too, which bpbench does not model",
                       arch.name));
  if (r.boolean("mlp_bias", false)) r.fail("mlp_bias = true is not supported");
  if (!arch.own || !arch.own->reads_window) {  // Qwen's window applies to the top layers only, not modelled
    if (r.boolean("use_sliding_window", false))
      r.fail("\"use_sliding_window\" true is not supported (bpbench attends over the whole causal prefix)");
    if (const json* layer_types = r.find("layer_types")) {
      if (!layer_types->is_array()) r.fail("\"layer_types\" must be a list");
      for (const auto& t : *layer_types)
        if (t != "full_attention")
          r.fail(
              fmt::format("\"layer_types\" entry {} is not supported (only \"full_attention\")", t.dump()));
    }
  }
  // transformers drops attention probabilities in training when it is set; bpbench's steps are deterministic.
  if (const double dropout = r.number("attention_dropout", 0.0); dropout != 0.0)
    r.fail(
        fmt::format("\"attention_dropout\" {} is not supported (only 0: bpbench has no dropout)", dropout));
  if (!arch.own || !arch.own->reads_activation) {
    const std::string act = r.string("hidden_act");
    if (!act.empty() && act != "silu")
      r.fail(fmt::format("hidden_act '{}' is not supported (only silu)", act));
  }

  ModelConfig c;
  c.name = dir_basename(dir);
  c.vocab = r.integer("vocab_size");
  c.hidden = r.integer("hidden_size");
  c.intermediate = r.integer("intermediate_size", arch.own && arch.own->default_intermediate > 0
                                                      ? std::optional<int64_t>(arch.own->default_intermediate)
                                                      : std::nullopt);
  c.layers = r.integer("num_hidden_layers");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  if (c.heads <= 0) r.fail("\"num_attention_heads\" must be > 0");
  // Gemma3TextConfig defaults head_dim to 256, not hidden / heads.
  c.head_dim = r.integer("head_dim", arch.own && arch.own->default_head_dim > 0 ? arch.own->default_head_dim
                                                                                : c.hidden / c.heads);
  c.rms_eps = r.number("rms_norm_eps", arch.own ? arch.own->default_rms_eps : 1e-6);
  c.tie_embeddings =
      r.boolean("tie_word_embeddings", /*transformers' default=*/arch.own && arch.own->default_tied);
  c.architecture = arch.name;
  c.qk_norm = arch.qk_norm;
  c.attention_bias = arch.attention_bias;
  // The family's own reading first: it refuses by name what the shared RoPE reader would misread (Phi-3's
  // "yarn" is longrope to transformers).
  if (arch.own && arch.own->read) arch.own->read(r, c);
  if (!arch.own || !arch.own->reads_rope) {
    try {
      c.rope = rope_from_hf_config(j, arch.default_max_positions);
    } catch (const std::invalid_argument& e) {
      r.fail(e.what());
    }
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    r.fail(e.what());
  }
  return c;
}

json hf_config_json(const ModelConfig& c) {
  // The fields every family shares; the family's own follow.
  json j = {{"vocab_size", c.vocab},
            {"hidden_size", c.hidden},
            {"intermediate_size", c.intermediate},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_heads},
            {"head_dim", c.head_dim},
            {"rms_norm_eps", c.rms_eps},
            {"tie_word_embeddings", c.tie_embeddings},
            {"attention_bias", c.attention_bias},
            {"attention_dropout", 0.0},
            {"max_position_embeddings", c.rope.max_positions}};
  const Architecture* arch = nullptr;
  if (!c.architecture.empty()) {
    arch = architecture_named(c.architecture);
    if (!arch)
      throw std::invalid_argument(fmt::format("{}: unsupported architecture '{}' (supported: {})", c.name,
                                              c.architecture, hf_architecture_names()));
  }
  for (const Architecture& family : architectures())
    if (!arch && family.own && family.own->describes && family.own->describes(c)) arch = &family;
  // The families without fields of their own differ by their q/k norms and q/k/v bias alone.
  for (const Architecture& family : architectures())
    if (!arch && !family.own && family.qk_norm == c.qk_norm && family.attention_bias == c.attention_bias)
      arch = &family;
  if (!arch)
    throw std::invalid_argument(
        fmt::format("{}: no Hugging Face architecture has q/k norms {} and q/k/v bias {}", c.name, c.qk_norm,
                    c.attention_bias));
  if (arch->own) {
    arch->own->write(c, j);
    return j;
  }
  write_llama_like_fields(c, arch->name, arch->model_type, j);
  j.erase("sliding_window");  // a family without a window of its own (use_sliding_window is Qwen's)
  return j;
}

Model load_hf_model(const std::string& dir, const torch::TensorOptions& options) {
  const ModelConfig c = read_hf_config(dir);
  // Quantized weights (a GPTQ or AWQ checkpoint) hold other tensors than the parameters: refused by the
  // method's name before any file is read; their config.json still estimates. gpt-oss's released MXFP4
  // experts are dequantized as they load (mxfp4.h), exactly.
  bool mxfp4 = false;
  if (const auto [path, j] = config_json_of(dir); j.contains("quantization_config")) {
    const json& q = j["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>()
                                   : q.dump();
    mxfp4 = method == "mxfp4" && c.architecture == "GptOssForCausalLM";
    if (!mxfp4)
      throw std::runtime_error(fmt::format(
          "Hugging Face model '{}': weights quantized as {} (\"quantization_config\"), which bpbench does "
          "not load (valid: F32, BF16 or F16 weights, such as a BF16 release, or gpt-oss's MXFP4; `bpbench "
          "estimate` takes this config.json as it is)",
          dir, method));
  }
  const SafetensorsDir weights(dir);
  // Multi-token-prediction layers after the decoder's (HfFamilyFields::ignores_mtp_layers): ignored.
  const Architecture* family = architecture_named(c.architecture);
  int64_t mtp_layers = 0;
  if (family && family->own && family->own->ignores_mtp_layers) {
    const auto [path, j] = config_json_of(dir);
    const ConfigReader r(path, j);
    mtp_layers = r.integer("num_nextn_predict_layers", r.integer("num_mtp_layers", 1));
  }
  auto mtp_tensor = [&](const std::string& name) {
    for (int64_t k = c.layers; k < c.layers + mtp_layers; ++k)
      if (name.rfind(fmt::format("model.layers.{}.", k), 0) == 0) return true;
    return false;
  };
  auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error(fmt::format("Hugging Face model '{}': {}", dir, what));
  };
  // Tensors that are not the model's (HfFamilyFields::ignored_prefixes; a multimodal checkpoint's vision).
  const bool multimodal = multimodal_family(config_json_of(dir).second) != nullptr;
  std::vector<std::string> ignored_prefixes;
  if (family && family->own) ignored_prefixes = family->own->ignored_prefixes;
  if (multimodal) ignored_prefixes.push_back("model.visual.");
  auto ignored_tensor = [&](const std::string& name) {
    for (const auto& prefix : ignored_prefixes)
      if (name.rfind(prefix, 0) == 0) return true;
    return false;
  };

  Model m;
  m.config = c;
  m.layers.resize(static_cast<size_t>(c.layers));
  const int64_t V = c.vocab, d = c.hidden, I = c.intermediate, hd = c.head_dim;
  const int64_t q_out = c.heads * hd, kv_out = c.kv_heads * hd;
  // Every parameter in Model::named_parameters order, under the names the shared families' checkpoints use;
  // a family may rename or fuse them (HfFamilyFields::checkpoint_names).
  std::vector<WeightSlot> slots;
  auto slot = [&](const std::string& name, std::vector<int64_t> shape, torch::Tensor* dest) {
    const int64_t rows = shape.at(0);
    slots.push_back({name, std::move(shape), {{name, rows, dest, {}}}});
  };
  auto linear = [&](const std::string& prefix, Linear& l, int64_t out, int64_t in, bool bias) {
    slot(prefix + ".weight", {out, in}, &l.weight);
    if (bias) slot(prefix + ".bias", {out}, &l.bias);
  };
  slot("model.embed_tokens.weight", {V, d}, &m.embed_weight);
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerWeights& w = m.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    if (c.block_input_norms) slot(p + "input_layernorm.weight", {d}, &w.input_norm);
    if (c.is_linear_layer(i)) {  // Qwen3_5GatedDeltaNet's names (Model::named_parameters)
      const ModelConfig::LinearAttention& la = *c.linear_attention;
      const int64_t C = la.conv_channels(), values = la.value_heads * la.value_dim;
      const std::string a = p + "linear_attn.";
      linear(a + "in_proj_qkv", w.in_qkv, C, d, false);
      linear(a + "in_proj_z", w.in_z, values, d, false);
      linear(a + "in_proj_b", w.in_b, la.value_heads, d, false);
      linear(a + "in_proj_a", w.in_a, la.value_heads, d, false);
      // (C, 1, K) in the checkpoint, (C, K) in the model.
      slots.push_back(
          {a + "conv1d.weight",
           {C, 1, la.conv_kernel},
           {{a + "conv1d.weight", C, &w.conv_weight, [](const torch::Tensor& t) { return t.squeeze(1); }}}});
      slot(a + "dt_bias", {la.value_heads}, &w.dt_bias);
      slot(a + "A_log", {la.value_heads}, &w.A_log);
      slot(a + "norm.weight", {la.value_dim}, &w.gated_norm);
      linear(a + "out_proj", w.out_proj, d, values, false);
    } else if (c.mla) {  // DeepseekV3Attention's names (Model::named_parameters)
      const ModelConfig::Mla& mla = *c.mla;
      const int64_t rq = mla.q_lora_rank, r = mla.kv_lora_rank;
      if (rq > 0) {
        linear(p + "self_attn.q_a_proj", w.q_a, rq, d, c.attention_bias);
        slot(p + "self_attn.q_a_layernorm.weight", {rq}, &w.q_a_norm);
        linear(p + "self_attn.q_b_proj", w.q, q_out, rq, false);
      } else {
        linear(p + "self_attn.q_proj", w.q, q_out, d, false);
      }
      linear(p + "self_attn.kv_a_proj_with_mqa", w.kv_a, r + mla.qk_rope_head_dim, d, c.attention_bias);
      slot(p + "self_attn.kv_a_layernorm.weight", {r}, &w.kv_a_norm);
      linear(p + "self_attn.kv_b_proj", w.kv_b, c.heads * (c.qk_nope_head_dim() + mla.v_head_dim), r, false);
      linear(p + "self_attn.o_proj", w.o, d, c.heads * mla.v_head_dim, c.output_bias);
    } else {
      linear(p + "self_attn.q_proj", w.q, q_out, d, c.attention_bias);
      linear(p + "self_attn.k_proj", w.k, kv_out, d, c.attention_bias);
      linear(p + "self_attn.v_proj", w.v, kv_out, d, c.attention_bias);
      if (c.attention_output_gate) linear(p + "self_attn.output_gate", w.output_gate, q_out, d, false);
      linear(p + "self_attn.o_proj", w.o, d, q_out, c.output_bias);
    }
    if (c.attention_sinks) slot(p + "self_attn.sinks", {c.heads}, &w.sinks);
    if (c.qk_norm && !c.is_linear_layer(i)) {  // per head, or (OLMo) over the whole projection
      slot(p + "self_attn.q_norm.weight", {c.qk_norm_whole ? q_out : hd}, &w.q_norm);
      slot(p + "self_attn.k_norm.weight", {c.qk_norm_whole ? kv_out : hd}, &w.k_norm);
    }
    if (c.sandwich_norms) {  // Gemma 3: a norm before and after each block (Model::named_parameters order)
      slot(p + "post_attention_layernorm.weight", {d}, &w.attn_output_norm);
      if (c.block_input_norms) slot(p + "pre_feedforward_layernorm.weight", {d}, &w.mlp_norm);
      slot(p + "post_feedforward_layernorm.weight", {d}, &w.mlp_output_norm);
    } else {
      slot(p + "post_attention_layernorm.weight", {d}, &w.mlp_norm);
    }
    if (c.is_moe_layer(i)) {  // Qwen3-MoE's names, those of Model::named_parameters
      const int64_t E = c.experts, Ie = c.expert_intermediate;
      slot(p + "mlp.gate.weight", {E, d}, &w.router);
      if (c.router_bias) slot(p + "mlp.gate.bias", {E}, &w.router_bias);
      w.expert_gate.resize(static_cast<size_t>(E));
      w.expert_up.resize(static_cast<size_t>(E));
      w.expert_down.resize(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        const std::string expert = fmt::format("{}mlp.experts.{}.", p, e);
        const auto k = static_cast<size_t>(e);
        linear(expert + "gate_proj", w.expert_gate[k], Ie, d, c.expert_bias);
        linear(expert + "up_proj", w.expert_up[k], Ie, d, c.expert_bias);
        linear(expert + "down_proj", w.expert_down[k], d, Ie, c.expert_bias);
      }
      if (const int64_t Ish = c.shared_expert_intermediate; Ish > 0) {
        linear(p + "mlp.shared_experts.gate_proj", w.shared_gate, Ish, d, false);
        linear(p + "mlp.shared_experts.up_proj", w.shared_up, Ish, d, false);
        linear(p + "mlp.shared_experts.down_proj", w.shared_down, d, Ish, false);
        if (c.shared_expert_gate) slot(p + "mlp.shared_expert_gate.weight", {1, d}, &w.shared_expert_gate);
      }
      // A buffer (Model::named_buffers), loaded in float32 as transformers keeps it (below).
      if (c.routing == ModelConfig::Routing::sigmoid_grouped)
        slot(p + "mlp.gate.e_score_correction_bias", {E}, &w.router_correction);
      continue;
    }
    linear(p + "mlp.gate_proj", w.gate, I, d, false);
    linear(p + "mlp.up_proj", w.up, I, d, false);
    linear(p + "mlp.down_proj", w.down, d, I, false);
  }
  slot("model.norm.weight", {d}, &m.final_norm_weight);
  if (!c.tie_embeddings) slot("lm_head.weight", {V, d}, &m.lm_head_weight);
  const Architecture* arch = architecture_named(c.architecture);
  if (arch && arch->own && arch->own->checkpoint_names) arch->own->checkpoint_names(c, slots);
  if (multimodal)  // the text model's weights under model.language_model.*; lm_head.weight as it is
    for (auto& s : slots)
      if (s.name.rfind("model.", 0) == 0) s.name = "model.language_model." + s.name.substr(6);

  // Check everything before copying anything: a bad checkpoint of a large model should fail in milliseconds.
  auto check = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const auto& info = weights.info(name);
    if (info.dtype != "F32" && info.dtype != "BF16" && info.dtype != "F16")
      fail(fmt::format("tensor '{}' in '{}' has dtype {}; weights must be F32, BF16 or F16", name,
                       weights.file_of(name), info.dtype));
    if (info.shape != shape)
      fail(fmt::format("tensor '{}' in '{}' has shape {}, expected {}", name, weights.file_of(name),
                       shape_str(info.shape), shape_str(shape)));
  };
  // An MXFP4 tensor: W_blocks (E, R, G, 16) and W_scales (E, R, G), uint8, for W (E, G*32, R) (mxfp4.h; the
  // dequantized rows transposed, as transformers' convert_moe_packed_tensors lays them out).
  auto quantized = [&](const std::string& name) {
    return mxfp4 && !weights.contains(name) && weights.contains(name + "_blocks") &&
           weights.contains(name + "_scales");
  };
  auto check_quantized = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const auto &blocks = weights.info(name + "_blocks"), &scales = weights.info(name + "_scales");
    if (blocks.dtype != "U8" || scales.dtype != "U8")
      fail(fmt::format("MXFP4 tensors '{}_blocks' and '{}_scales' must be U8, got {} and {}", name, name,
                       blocks.dtype, scales.dtype));
    const std::vector<int64_t> want_scales = shape.size() == 3 && shape[1] % 32 == 0
                                                 ? std::vector<int64_t>{shape[0], shape[2], shape[1] / 32}
                                                 : std::vector<int64_t>{};
    std::vector<int64_t> want_blocks = want_scales;
    want_blocks.push_back(16);
    if (want_scales.empty() || scales.shape != want_scales || blocks.shape != want_blocks)
      fail(fmt::format("MXFP4 tensors '{}_blocks' {} and '{}_scales' {} do not make {} (expected {} and {})",
                       name, shape_str(blocks.shape), name, shape_str(scales.shape), shape_str(shape),
                       shape_str(want_blocks), shape_str(want_scales)));
  };
  std::set<std::string> expected;
  for (const auto& s : slots) {
    if (quantized(s.name)) {
      expected.insert({s.name + "_blocks", s.name + "_scales"});
      continue;
    }
    expected.insert(s.name);
    if (!weights.contains(s.name)) fail(fmt::format("missing tensor '{}'", s.name));
  }
  for (const auto& name : weights.names()) {
    if (expected.count(name)) continue;
    // A tied checkpoint may still carry the head; it is the embedding, so it is ignored once its shape fits.
    if (c.tie_embeddings && name == "lm_head.weight") {
      check(name, {V, d});
      continue;
    }
    if (mtp_tensor(name) || ignored_tensor(name)) continue;
    // Old Llama checkpoints store RoPE's inverse frequencies; they follow from the RoPE config, not weights.
    const std::string inv_freq = ".rotary_emb.inv_freq";
    if (name.size() > inv_freq.size() &&
        name.compare(name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
      continue;
    fail(fmt::format("unexpected tensor '{}' in '{}' (not a parameter of the model config.json describes)",
                     name, weights.file_of(name)));
  }
  for (const auto& s : slots) quantized(s.name) ? check_quantized(s.name, s.shape) : check(s.name, s.shape);

  {
    torch::NoGradGuard no_grad;
    const auto opts = torch::TensorOptions().device(options.device()).dtype(options.dtype());
    for (const auto& s : slots) {
      const torch::Tensor whole =
          quantized(s.name) ? dequantize_mxfp4(weights.get(s.name + "_blocks", opts.dtype(torch::kByte)),
                                               weights.get(s.name + "_scales", opts.dtype(torch::kByte)),
                                               options.dtype().toScalarType())
                                  .transpose(1, 2)
                            : weights.get(s.name, opts);
      if (s.parts.size() == 1 && !s.parts[0].take) {
        *s.parts[0].dest = whole;
        continue;
      }
      int64_t row = 0;  // a fused tensor: each parameter its own rows, in storage of its own
      for (const auto& part : s.parts) {
        if (part.take) {
          *part.dest = part.take(whole).contiguous().clone();
          continue;
        }
        *part.dest = whole.narrow(0, row, part.rows).clone();
        row += part.rows;
      }
    }
  }
  if (c.tie_embeddings) m.lm_head_weight = m.embed_weight;
  if (options.dtype() != torch::kDouble)
    for (auto& w : m.layers)
      if (w.router_correction.defined()) w.router_correction = w.router_correction.to(torch::kFloat);
  // The slots' parts restate Model::named_parameters() (in its order but for a family's stacked tensors);
  // a drift between the two must not load silently.
  {
    std::vector<std::string> parts, params;
    for (const auto& s : slots)
      for (const auto& part : s.parts) parts.push_back(part.name);
    for (const auto& p : m.named_parameters()) params.push_back(p.name);
    for (const auto& b : m.named_buffers()) params.push_back(b.name);
    std::sort(parts.begin(), parts.end());
    std::sort(params.begin(), params.end());
    if (parts != params)
      throw std::logic_error("load_hf_model: parameter list out of sync with Model::named_parameters()");
  }

  m.set_requires_grad(true);
  return m;
}

}  // namespace bpbench
