// objective.cpp: target log-probs, the streamed no-grad reference pass, and the one list of objectives.
#include "harness/objectives/objective.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "harness/model/model.h"
#include "harness/model/ops.h"

namespace bpbench {

// The factories' declarations, from the one list (objectives.def; each is defined in its objective's file).
#define BPBENCH_OBJECTIVE(name, description, factory) std::unique_ptr<Objective> factory();
#include "harness/objectives/objectives.def"
#undef BPBENCH_OBJECTIVE

TargetLogps target_logps(const torch::Tensor& logits, const torch::Tensor& targets) {
  auto mask = targets.ne(kIgnoreIndex);                                                    // (N, c)
  auto logp_all = torch::log_softmax(logits.to(compute_dtype(logits.scalar_type())), -1);  // (N, c, V)
  auto logps = logp_all.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1);        // (N, c)
  return {logps.masked_fill(~mask, 0.0), mask};
}

torch::Tensor reference_target_logps(Model& model, const Batch& batch, int64_t rows_per_chunk) {
  torch::NoGradGuard no_grad;
  const int64_t T = batch.seq_len(), c = std::max<int64_t>(1, rows_per_chunk);
  auto x = model.embed(batch.input_ids);  // (N, T, d)
  for (int64_t i = 0; i < model.config.layers; ++i) x = model.layer_in_chunks(i, x, c);
  auto out = torch::zeros({batch.sequences(), T}, x.options().dtype(torch::kDouble));
  for (int64_t s = 0; s < T; s += c) {
    const int64_t e = std::min(T, s + c);
    auto logits = model.head_logits(x.narrow(1, s, e - s));
    out.narrow(1, s, e - s).copy_(target_logps(logits, batch.targets.narrow(1, s, e - s)).logps);
  }
  return out;
}

namespace {
// The one list of objectives (objectives.def): adding one is a file with its factory plus one line there.
struct ObjectiveEntry {
  std::string name;
  std::string description;
  std::unique_ptr<Objective> (*make)();
};

const std::vector<ObjectiveEntry>& objective_registry() {
  static const std::vector<ObjectiveEntry> entries = {
#define BPBENCH_OBJECTIVE(name, description, factory) {name, description, factory},
#include "harness/objectives/objectives.def"
#undef BPBENCH_OBJECTIVE
  };
  return entries;
}
}  // namespace

const std::vector<std::string>& objective_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& e : objective_registry()) n.push_back(e.name);
    return n;
  }();
  return names;
}

std::string objective_description(const std::string& name) {
  for (const auto& e : objective_registry())
    if (e.name == name) return e.description;
  return "";
}

std::unique_ptr<Objective> make_objective(const std::string& name) {
  for (const auto& e : objective_registry())
    if (e.name == name) return e.make();
  throw std::invalid_argument(
      fmt::format("unknown objective '{}' (valid: {})", name, fmt::join(objective_names(), ", ")));
}

}  // namespace bpbench
