// hf_family.h: what a model family with config.json fields or checkpoint names of its own adds to what every
// family shares (read and written by hf_model.cpp). A family's file defines one function returning its
// HfFamilyFields, named on its line of hf_families.def (Gemma 3: hf_gemma3.cpp; Mistral: hf_mistral.cpp;
// Phi-3: hf_phi3.cpp). Internal to harness/model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/model/hf_config_reader.h"
#include "harness/model/model_config.h"

namespace bpbench {

// One tensor of the checkpoint and the parameters it fills: one part of the same name, or (fused) several,
// each the next `rows` rows of it, or what its `take` makes of the whole tensor (gpt-oss's stacked experts).
struct WeightSlot {
  struct Part {
    std::string name;  // the parameter's name (Model::named_parameters)
    int64_t rows = 0;
    torch::Tensor* dest = nullptr;
    std::function<torch::Tensor(const torch::Tensor&)> take;  // the part's view of the whole; copied
  };
  std::string name;            // the checkpoint's tensor
  std::vector<int64_t> shape;  // its shape
  std::vector<Part> parts;
};

// Replaces the consecutive slots named prefix + each of `pieces` (unfused, in that order, of equal columns)
// with one slot named prefix + `fused` whose parts are theirs: a family whose checkpoint fuses them.
void fuse_weight_slots(std::vector<WeightSlot>& slots, const std::string& prefix,
                       const std::vector<std::string>& pieces, const std::string& fused);

struct HfFamilyFields {
  int64_t default_head_dim = 0;   // when config.json has no head_dim; 0: hidden / heads
  bool default_tied = false;      // transformers' tie_word_embeddings default for the family
  double default_rms_eps = 1e-6;  // transformers' rms_norm_eps default for the family (OLMo: 1e-5)
  // Reads what the family adds (its layer types, RoPE, norms and activation) into c, after the shared
  // fields; refuses by name what bpbench does not model.
  void (*read)(const ConfigReader& r, ModelConfig& c) = nullptr;
  // Writes the family's own fields of c ("architectures" and "model_type" included) into j, which holds the
  // shared ones: the config.json transformers writes; read then gives c back.
  void (*write)(const ModelConfig& c, nlohmann::json& j) = nullptr;
  // Whether c (a preset without an architecture named) is of this family: hf_config_json writes it through
  // `write`. May be null: only configs naming the family's architecture are.
  bool (*describes)(const ModelConfig& c) = nullptr;
  // The checkpoint's names where they are not the shared ones (Phi-3's fused projections): rewrites the slot
  // list of every weight, in Model::named_parameters order (the parts may come in another order: gpt-oss's
  // stacked experts). May be null.
  void (*checkpoint_names)(const ModelConfig& c, std::vector<WeightSlot>& slots) = nullptr;
  // What `read` reads itself; otherwise the shared reader does: the RoPE after `read` (rope_from_hf_config;
  // Gemma 3 has one per layer type), the sliding window (the shared reader refuses Qwen's
  // "use_sliding_window" and any sliding "layer_types"), the activation (the shared reader: "hidden_act"
  // silu; Gemma 3 names it "hidden_activation").
  bool reads_rope = false;
  bool reads_window = false;
  bool reads_activation = false;
  // The checkpoint may carry multi-token-prediction layers after the last decoder layer ("model.layers.<L>.*"
  // and on, num_nextn_predict_layers of them, default 1), which transformers' class ignores on load, as
  // bpbench does (DeepSeek-V3, GLM-4.5, GLM-4.7-Flash).
  bool ignores_mtp_layers = false;
  // Tensors of the checkpoint under these prefixes are not the model's and are ignored, as transformers'
  // class ignores them on load (Qwen3.5's multi-token-prediction head, "mtp.*").
  std::vector<std::string> ignored_prefixes;
  // The multimodal class whose text model this family is (Qwen3.5's image-text checkpoints,
  // "Qwen3_5ForConditionalGeneration"), or null: a config.json naming it is read from its "text_config" (with
  // the top level's "tie_word_embeddings" where the text config states none), and its checkpoint's text
  // weights are "model.language_model.*" and "lm_head.weight"; the vision tower ("model.visual.*") is
  // ignored. bpbench trains the text model, as Qwen3_5ForCausalLM loads it from such a checkpoint.
  const char* multimodal_class = nullptr;
  // When the config.json has no "intermediate_size" (Qwen3.5-MoE's, whose every layer is routed): this; 0:
  // the field is required.
  int64_t default_intermediate = 0;
};

// For the families' files (defined in hf_model.cpp):
// A window on every layer from "sliding_window": a positive number is that window, null none, and a file
// without the key `absent` (the config class's default; 0: none), as transformers' Mistral and Phi-3 mask it.
// Refuses "layer_types" (alternating layers belong to other classes).
void read_window_on_every_layer(const ConfigReader& r, ModelConfig& c, int64_t absent);
// Alternating sliding and full layers (hf_layer_types.cpp, as Gemma 3 and OLMo 3 state them): "layer_types",
// one "sliding_attention" or "full_attention" a layer (absent: `absent`, the config class's default), then
// "sliding_window" (absent: default_window), which must be > 0 where a layer slides.
void read_sliding_layer_types(const ConfigReader& r, ModelConfig& c, const std::vector<bool>& absent,
                              int64_t default_window, const char* family);
// RoPE per layer type into c.rope (full layers) and c.sliding_rope: "rope_parameters" keyed by layer type
// (default RoPE for a type it leaves out), a legacy "rope_scaling" updating the full layers' entry, and the
// thetas `full_theta` and `sliding_theta` where an entry states none. Refuses dynamic RoPE (transformers'
// per-module state) and a "rope_scaling" typed with "type".
void read_rope_by_layer_type(const ConfigReader& r, ModelConfig& c, double full_theta, double sliding_theta,
                             int64_t default_max_positions, const char* family);
// RoPE on the first partial_rotary_factor of each head (GLM-4.5, Qwen3.5) into c.rope and c.rotary_dim: the
// factor top-level (the Hub's files) or in "rope_parameters" (transformers 5's), `default_factor` where
// neither says, then the shared RoPE reader on the rest, `ignored` keys of "rope_parameters" left out
// (Qwen3.5's MRoPE sections, which text positions make plain RoPE).
void read_partial_rotary_rope(const ConfigReader& r, ModelConfig& c, double default_factor,
                              int64_t default_max_positions, std::initializer_list<const char*> ignored = {});
// "sliding_window", "layer_types" and "rope_parameters" keyed by layer type, as transformers 5 writes them.
void write_layer_types_and_rope(const ModelConfig& c, nlohmann::json& j);
// The fields of a family with Llama's network: "architectures", "model_type", "hidden_act", the RoPE as
// "rope_parameters", and "sliding_window" (null without one).
void write_llama_like_fields(const ModelConfig& c, const char* architecture, const char* model_type,
                             nlohmann::json& j);

}  // namespace bpbench
