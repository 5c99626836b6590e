// train_spec.cpp: measure.train's keys, parsed and checked one by one (train_spec.h says what each means).
#include "harness/run/train_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "harness/run/scenario.h"
#include "harness/run/scenario_read.h"

namespace bpbench {

using nlohmann::json;
using namespace scenario_detail;

namespace {

constexpr double kPiForCosine = 3.14159265358979323846;

struct TrainKey {
  const char* key;
  std::function<void(TrainSpec&, const json&)> parse;
};

std::string where(const char* key) {
  return fmt::format("measure.train.{}", key);
}

const std::vector<TrainKey>& train_keys() {
  static const std::vector<TrainKey> keys = {
      {"steps",
       [](TrainSpec& t, const json& v) { t.steps = read_int(v, where("steps"), 1, "integers >= 1"); }},
      {"lr", [](TrainSpec& t, const json& v) { t.lr = read_number(v, where("lr"), 0, true, "numbers > 0"); }},
      {"betas",
       [](TrainSpec& t, const json& v) {
         if (!v.is_array() || v.size() != 2)
           input_error(fmt::format("{}: expected two numbers, got {}", where("betas"), show(v)),
                       "[beta1, beta2] in [0, 1)");
         t.beta1 = read_number(v[0], where("betas[0]"), 0, false, "numbers in [0, 1)");
         t.beta2 = read_number(v[1], where("betas[1]"), 0, false, "numbers in [0, 1)");
         if (t.beta1 >= 1 || t.beta2 >= 1)
           input_error(fmt::format("{}: {} is not below 1", where("betas"), show(v)), "numbers in [0, 1)");
       }},
      {"eps",
       [](TrainSpec& t, const json& v) { t.eps = read_number(v, where("eps"), 0, true, "numbers > 0"); }},
      {"weight_decay",
       [](TrainSpec& t, const json& v) {
         t.weight_decay = read_number(v, where("weight_decay"), 0, false, "numbers >= 0");
       }},
      {"warmup_steps",
       [](TrainSpec& t, const json& v) {
         t.warmup_steps = read_int(v, where("warmup_steps"), 0, "integers >= 0");
       }},
      {"schedule",
       [](TrainSpec& t, const json& v) {
         t.schedule = read_choice(v, where("schedule"), "schedule", {"cosine", "constant"});
       }},
      {"min_lr_ratio",
       [](TrainSpec& t, const json& v) {
         t.min_lr_ratio = read_number(v, where("min_lr_ratio"), 0, false, "numbers in [0, 1]");
         if (t.min_lr_ratio > 1)
           input_error(fmt::format("{}: {} is above 1", where("min_lr_ratio"), t.min_lr_ratio),
                       "numbers in [0, 1]");
       }},
      {"clip_grad_norm",
       [](TrainSpec& t, const json& v) {
         t.clip_grad_norm =
             read_number(v, where("clip_grad_norm"), 0, false, "numbers >= 0 (0: no clipping)");
       }},
      {"eval_every",
       [](TrainSpec& t, const json& v) {
         t.eval_every = read_int(v, where("eval_every"), 0, "integers >= 0 (0: no evaluation)");
       }},
      {"eval_batches",
       [](TrainSpec& t, const json& v) {
         t.eval_batches = read_int(v, where("eval_batches"), 1, "integers >= 1");
       }},
      {"grad_accum",
       [](TrainSpec& t, const json& v) {
         t.grad_accum = read_int(v, where("grad_accum"), 1, "integers >= 1 (micro-batches per step)");
       }},
      {"precision",
       [](TrainSpec& t, const json& v) {
         t.precision = read_choice(v, where("precision"), "precision", {"model", "mixed"},
                                   "model (weights and optimizer state in the cell's dtype), mixed (bfloat16 "
                                   "weights, float32 master weights and optimizer state)");
       }},
  };
  return keys;
}

std::string key_names() {
  return join(TrainSpec::keys());
}

}  // namespace

double TrainSpec::lr_at(int64_t step) const {
  if (step <= warmup_steps) return lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  if (schedule == "constant" || steps <= warmup_steps + 1) return lr;
  // Cosine from lr (first step after warm-up) to min_lr_ratio * lr (the last step).
  const double progress =
      static_cast<double>(step - warmup_steps - 1) / static_cast<double>(steps - warmup_steps - 1);
  return lr * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + std::cos(kPiForCosine * progress)));
}

json TrainSpec::to_json() const {
  return json::object({{"steps", steps},
                       {"lr", lr},
                       {"betas", {beta1, beta2}},
                       {"eps", eps},
                       {"weight_decay", weight_decay},
                       {"warmup_steps", warmup_steps},
                       {"schedule", schedule},
                       {"min_lr_ratio", min_lr_ratio},
                       {"clip_grad_norm", clip_grad_norm},
                       {"eval_every", eval_every},
                       {"eval_batches", eval_batches},
                       {"grad_accum", grad_accum},
                       {"precision", precision}});
}

std::vector<std::string> TrainSpec::keys() {
  std::vector<std::string> names;
  for (const auto& k : train_keys()) names.push_back(k.key);
  return names;
}

TrainSpec TrainSpec::from_json(const json& j) {
  if (!j.is_object())
    input_error(fmt::format("measure.train: expected an object, got {}", type_word(j)),
                "an object of keys " + key_names());
  TrainSpec t;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();  // a plain name: C++17 lambdas cannot capture structured bindings
    auto it = std::find_if(train_keys().begin(), train_keys().end(),
                           [&](const TrainKey& k) { return key == k.key; });
    if (it == train_keys().end())
      input_error(fmt::format("unknown measure.train key '{}'", key), key_names());
    it->parse(t, item.value());
  }
  if (!j.contains("steps")) input_error("measure.train: missing key 'steps'", "integers >= 1");
  if (t.warmup_steps > t.steps)
    input_error(
        fmt::format("measure.train.warmup_steps: {} is more than the {} steps", t.warmup_steps, t.steps),
        fmt::format("integers in [0, {}]", t.steps));
  return t;
}

}  // namespace bpbench
