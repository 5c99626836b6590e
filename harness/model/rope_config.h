// rope_config.h: which rotary position embedding (RoPE) a model uses, read from and written as transformers'
// RoPE parameters. The tables themselves are harness/model/rope.h.
//
// Every RoPE type transformers defines for Llama, Qwen2 and Qwen3 is modelled, with transformers' formulas
// (modeling_rope_utils.py); k = 0 .. hd/2 - 1, inv_freq_k = theta^(-2k/hd):
//   default  inv_freq_k
//   linear   inv_freq_k / factor                                     (position interpolation)
//   dynamic  NTK: theta * ((factor * T' / max_positions) - (factor - 1))^(hd / (hd - 2)) as the base, with
//            T' = max(T, max_positions): the frequencies depend on the sequence length T. Stateless: what
//            transformers' first forward at length T uses (its module keeps grown frequencies for later,
//            shorter sequences above max_positions; one training step never sees that history)
//   yarn     a ramp per frequency between inv_freq_k / factor and inv_freq_k over the dimensions that turn
//            between beta_slow and beta_fast times in original_max_positions; cos and sin are multiplied by
//            attention_factor (from factor, or mscale / mscale_all_dim, unless given)
//   llama3   wavelengths above original_max_positions / low_freq_factor are divided by factor, those below
//            original_max_positions / high_freq_factor kept, a smooth blend between (Llama 3.1, 3.2)
//   longrope inv_freq_k / ext_k, ext = short_factor for T <= original_max_positions, else long_factor (as
//            transformers' forward picks them from its longest position); cos and sin multiplied by
//            attention_factor (given, or sqrt(1 + ln(factor) / ln(original_max_positions)), factor =
//            max_positions / original_max_positions unless given) (Phi-3-mini-128k)
// Anything else (partial rotary embeddings, ...) is refused by name, never approximated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bpbench {

enum class RopeType { kDefault, kLinear, kDynamic, kYarn, kLlama3, kLongrope };

// Every field resolved: what transformers leaves to defaults (yarn's attention factor and betas, an
// implicit factor) is the value it would use.
struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;              // rope_theta
  int64_t max_positions = 0;           // max_position_embeddings: dynamic's threshold, yarn's implicit factor
  double factor = 1.0;                 // linear, dynamic, yarn, llama3, longrope
  int64_t original_max_positions = 0;  // yarn, llama3, longrope: original_max_position_embeddings
  double attention_factor = 1.0;       // yarn, longrope: the scale of cos and sin
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn: the ramp's bounds, in rotations
  bool truncate = true;                                  // yarn: round the ramp's bounds to whole dimensions
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  // longrope: hd/2 factors each, short_factor up to original_max_positions tokens, long_factor past them.
  std::vector<double> short_factor, long_factor;
  // default and linear: the dims the frequencies are spaced over, theta^(-2k/frequency_dims), where they are
  // not the rotated ones (0). transformers' partial RoPE takes int(head_dim x partial_rotary_factor) there
  // and rotates the 2 ceil(that / 2) dims its tables span: one more where the product is odd (GLM-4.5's
  // config class at its defaults: 21 of a 42-dim head, 22 rotated).
  int64_t frequency_dims = 0;

  bool operator==(const RopeConfig& other) const;
  bool operator!=(const RopeConfig& other) const { return !(*this == other); }
};

const char* rope_type_name(RopeType type);
std::string rope_type_names();  // "default, linear, dynamic, yarn, llama3, longrope"

// The RoPE of a transformers config.json object. Both forms are read: transformers 5's "rope_parameters" and
// 4.x's top-level "rope_theta" + "rope_scaling" (with "type" for "rope_type", as older files write it); a
// file holding both must agree, as must a top-level "original_max_position_embeddings".
// `default_max_positions` is the architecture's max_position_embeddings where the file has none. Throws
// std::invalid_argument, one line naming the field: an unsupported rope_type (listing the supported ones), a
// field the type does not use, a missing or malformed value, partial_rotary_factor other than 1.
RopeConfig rope_from_hf_config(const nlohmann::json& config, int64_t default_max_positions);

// `base` with its RoPE replaced by `parameters`, an object in transformers' rope_parameters form (a
// scenario's "rope" key); rope_theta and the max positions stay the base's unless given. Throws
// std::invalid_argument as above, naming fields "rope.<field>".
RopeConfig rope_with_parameters(const RopeConfig& base, const nlohmann::json& parameters);

// yarn's attention factor where a config gives none (transformers' get_mscale): 0.1 mscale ln(scale) + 1,
// or 1 for scale <= 1.
double yarn_mscale(double scale, double mscale = 1.0);

// transformers' rope_parameters object for `rope`, every field resolved (plus max_position_embeddings where
// the type reads it): what results.json records for each cell.
nlohmann::json rope_to_json(const RopeConfig& rope);

// One line for reports and listings: "default, theta 1000000", "llama3 x8 (original 8192), theta 500000";
// the JSON form is rope_to_json's, as results.json records it.
std::string rope_summary(const RopeConfig& rope);
std::string rope_summary(const nlohmann::json& rope_parameters);

}  // namespace bpbench
