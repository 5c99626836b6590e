// rope.cpp: RoPE's frequencies for every type of rope_config.h, in transformers' formulas and float64.
#include "harness/model/rope.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace bpbench {

namespace {

constexpr double kPi = 3.14159265358979323846;

// theta^(-2k/hd) for k = 0 .. ceil(hd/2) - 1.
torch::Tensor default_frequencies(double theta, int64_t hd, const torch::TensorOptions& f64) {
  return 1.0 / torch::pow(theta, torch::arange(0, hd, 2, f64) / static_cast<double>(hd));
}

// yarn: the (fractional) dimension that turns `rotations` times over the original context.
double yarn_correction_dim(double rotations, int64_t hd, double theta, int64_t original) {
  return hd * std::log(original / (rotations * 2 * kPi)) / (2 * std::log(theta));
}

torch::Tensor yarn_frequencies(const RopeConfig& r, int64_t hd, const torch::TensorOptions& f64) {
  auto pos_freqs = torch::pow(r.theta, torch::arange(0, hd, 2, f64) / static_cast<double>(hd));  // (hd/2)
  auto extrapolation = 1.0 / pos_freqs, interpolation = 1.0 / (r.factor * pos_freqs);
  double low = yarn_correction_dim(r.beta_fast, hd, r.theta, r.original_max_positions);
  double high = yarn_correction_dim(r.beta_slow, hd, r.theta, r.original_max_positions);
  if (r.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(hd - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  auto ramp = ((torch::arange(hd / 2, f64) - low) / (high - low)).clamp(0, 1);
  auto extrapolated_share = 1 - ramp;  // 1: the frequency is kept; 0: divided by factor
  return interpolation * (1 - extrapolated_share) + extrapolation * extrapolated_share;
}

torch::Tensor llama3_frequencies(const RopeConfig& r, int64_t hd, const torch::TensorOptions& f64) {
  auto inv_freq = default_frequencies(r.theta, hd, f64);
  const double low_freq_wavelen = r.original_max_positions / r.low_freq_factor;
  const double high_freq_wavelen = r.original_max_positions / r.high_freq_factor;
  auto wavelen = 2 * kPi / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  auto smooth =
      (r.original_max_positions / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  auto medium = wavelen.ge(high_freq_wavelen).logical_and(wavelen.le(low_freq_wavelen));
  return torch::where(medium, smoothed, scaled);
}

}  // namespace

torch::Tensor rope_inverse_frequencies(const RopeConfig& r, int64_t hd, int64_t seq_len,
                                       const torch::Device& device) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  if (r.frequency_dims > 0 && (r.frequency_dims + 1) / 2 != hd / 2)
    throw std::invalid_argument(fmt::format("rope: frequencies over {} dims for {} rotated (valid: {} or {})",
                                            r.frequency_dims, hd, hd - 1, hd));
  const int64_t spaced = r.frequency_dims > 0 ? r.frequency_dims : hd;
  switch (r.type) {
    case RopeType::kDefault:
      return default_frequencies(r.theta, spaced, f64);
    case RopeType::kLinear:
      return default_frequencies(r.theta, spaced, f64) / r.factor;
    case RopeType::kDynamic: {
      // transformers recomputes from the longest position seen, never below max_position_embeddings.
      const double length = static_cast<double>(std::max(seq_len, r.max_positions));
      const double base = r.theta * std::pow(r.factor * length / r.max_positions - (r.factor - 1),
                                             static_cast<double>(hd) / (hd - 2));
      return default_frequencies(base, hd, f64);
    }
    case RopeType::kYarn:
      return yarn_frequencies(r, hd, f64);
    case RopeType::kLlama3:
      return llama3_frequencies(r, hd, f64);
    case RopeType::kLongrope: {
      // transformers picks the factors by its forward's longest position: past the original context, long.
      const auto& ext = seq_len > r.original_max_positions ? r.long_factor : r.short_factor;
      if (static_cast<int64_t>(ext.size()) != hd / 2)
        throw std::invalid_argument(fmt::format("rope longrope: {} factors for a head dim of {} (valid: {})",
                                                ext.size(), hd, hd / 2));
      return default_frequencies(r.theta, hd, f64) / torch::tensor(ext, f64);
    }
  }
  throw std::logic_error("rope_inverse_frequencies: unknown RopeType");
}

RopeTables rope_tables(const RopeConfig& r, int64_t hd, int64_t pos0, int64_t rows, int64_t seq_len,
                       const torch::TensorOptions& options) {
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(options.device());
  auto angles = torch::outer(torch::arange(pos0, pos0 + rows, f64),
                             rope_inverse_frequencies(r, hd, seq_len, options.device()));  // (rows, hd/2)
  const double scale = r.type == RopeType::kYarn || r.type == RopeType::kLongrope ? r.attention_factor : 1.0;
  // Each half in float64, scaled, cast once, then repeated: (rows, hd/2) -> (rows, hd).
  auto table = [&](torch::Tensor half) {
    if (scale != 1.0) half.mul_(scale);
    half = half.to(options.dtype());
    return torch::cat({half, half}, -1);
  };
  auto cos = table(angles.cos());
  auto sin = table(angles.sin());
  return {cos, sin};
}

torch::Tensor apply_rope(const torch::Tensor& x, int64_t pos0, int64_t seq_len, const RopeConfig& rope) {
  const int64_t rows = x.size(2), hd = x.size(3);
  const RopeTables t = rope_tables(rope, hd, pos0, rows, seq_len, x.options().requires_grad(false));
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);  // rotate_half
  return x * t.cos + rotated * t.sin;
}

}  // namespace bpbench
