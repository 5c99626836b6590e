// train_data.cpp: training and held-out batches (train_data.h).
#include "harness/run/train_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "harness/objectives/data_file.h"
#include "harness/run/scenario.h"

namespace bpbench {

namespace {

// splitmix64: a fixed, portable stream (std::shuffle's algorithm is the library's choice, not ours).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fisher-Yates over 0 .. n-1 with splitmix64(seed).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

}  // namespace

TrainData make_train_data(const TrainSpec& spec, const BatchSpec& base, Model& model,
                          const Objective& objective, int64_t logits_rows, const std::string& data_path,
                          nlohmann::json& data_record) {
  TrainData data;
  const int64_t eval_count = spec.eval_every > 0 ? spec.eval_batches : 0;
  auto batch_of = [&](uint64_t seed, const torch::Tensor& rows) {
    BatchSpec s = base;
    s.seed = seed;
    if (rows.defined()) s.data_tokens = rows;
    return objective.make_batch(s, model, logits_rows);
  };
  if (data_path.empty()) {
    for (int64_t k = 1; k <= spec.steps; ++k) data.train.push_back(batch_of(base.seed + k, {}));
    for (int64_t i = 0; i < eval_count; ++i) data.eval.push_back(batch_of(base.seed + 1000000 + i, {}));
    return data;
  }
  const TokenData d = load_token_data(data_path, base.seq_len, model.config.vocab);
  const int64_t B = base.examples, held_out = eval_count * B;
  if (d.sequences < held_out + B)
    throw InputError(
        fmt::format("data: '{}' has {} sequences; a training run needs {} held out (eval_batches "
                    "x batch) and at least {} to train on",
                    d.file_name, d.sequences, held_out, B));
  const auto order = seeded_permutation(d.sequences, base.seed);
  auto rows = [&](int64_t first, int64_t count) {
    std::vector<int64_t> index(order.begin() + first, order.begin() + first + count);
    return d.tokens.index_select(0, torch::tensor(index, torch::kLong));
  };
  for (int64_t i = 0; i < eval_count; ++i) data.eval.push_back(batch_of(base.seed, rows(i * B, B)));
  const int64_t train_batches = std::min(spec.steps, (d.sequences - held_out) / B);
  for (int64_t k = 0; k < train_batches; ++k)
    data.train.push_back(batch_of(base.seed, rows(held_out + k * B, B)));
  data_record = {{"file", d.file_name},
                 {"sha256", d.sha256},
                 {"sequences", d.sequences},
                 {"train_sequences", train_batches * B},
                 {"eval_sequences", held_out}};
  return data;
}

}  // namespace bpbench
