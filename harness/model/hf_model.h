// hf_model.h: load a Hugging Face model directory (config.json + safetensors weights) into a bpbench Model.
//
// Supported architectures: every line of hf_families.def (`bpbench list families`; the "supported:" lists
// of errors, hf_architecture_names), each family's own fields in its own hf_<family>.cpp through hf_family.h
// (the function its line of hf_families.def names). config.json fields every
// family shares (HF names -> ModelConfig): vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (default: heads), head_dim (default: hidden / heads, or the
// family's), rms_norm_eps (default 1e-6), tie_word_embeddings (default: the family's), and RoPE in either
// form, every type transformers defines for these families (harness/model/rope_config.h: rope_parameters, or
// rope_theta + rope_scaling; max_position_embeddings). Configurations the Model cannot express are refused
// with the field named rather than loaded wrongly: attention_bias on Qwen3 / Llama (it also biases o_proj),
// mlp_bias, an activation other than silu, a sliding window on Qwen / Llama (use_sliding_window,
// layer_types), attention_dropout, an unsupported RoPE type or field.
//
// Weights come from model.safetensors or the shards of model.safetensors.index.json, under the names
// Model::named_parameters() uses. Every tensor is checked (presence, no extras, shape, dtype F32/BF16/F16)
// before any is copied, and each is converted on load straight to the requested device and dtype. Every error
// is a one-line std::runtime_error naming the directory and, where there is one, the tensor.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/model/model.h"
#include "harness/model/model_config.h"

namespace bpbench {

// True when `path` is a directory holding a config.json (how a scenario's model value is told from a preset).
bool is_hf_model_dir(const std::string& path);

// The ModelConfig of `dir_or_file`: a model directory's config.json, or a config.json file itself (no weights
// needed: `bpbench estimate` takes either). name = the directory's basename. Validated
// (ModelConfig::validate).
ModelConfig read_hf_config(const std::string& dir_or_file);

// The dtype config.json names for the weights: "dtype" (transformers 5), else "torch_dtype" (4.x), as written
// ("bfloat16", "float16", "float32", ...); "" when it names none. Throws as read_hf_config does.
std::string hf_config_dtype(const std::string& dir_or_file);

// The model of `dir` on `options`' device and dtype, every base weight requiring grad (full fine-tuning).
Model load_hf_model(const std::string& dir, const torch::TensorOptions& options);

// `c` as transformers' config.json (transformers 5 form: rope_parameters), so that a peer run in
// transformers (impls/peers/hf_checkpoint.py) builds the very network bpbench runs. read_hf_config of it
// gives `c` back (name aside). The architecture is c.architecture where set, else it follows from
// sandwich_norms with input norms (Gemma 3), qk_norm (Qwen3), attention_bias (Qwen2) or none of them (Llama).
nlohmann::json hf_config_json(const ModelConfig& c);

// "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, Gemma3ForCausalLM, MistralForCausalLM, ..."
std::string hf_architecture_names();

// Every family of hf_families.def, in its order: what `bpbench list families` prints.
struct HfFamilyName {
  std::string label, architecture, model_type;  // "Gemma 3 text", "Gemma3ForCausalLM", "gemma3_text"
};
std::vector<HfFamilyName> hf_family_names();
// The labels joined: "Qwen3, Qwen2, Llama, Gemma 3 text, ...": what help texts and docs name.
std::string hf_family_labels();

}  // namespace bpbench
