// estimate_command.cpp: `bpbench estimate`: its flags, read into an EstimateInput, and one line per impl.
#include "harness/cli/estimate_command.h"

#include <fmt/format.h>

#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "harness/model/model_config.h"
#include "harness/run/estimate.h"
#include "harness/run/estimate_flops.h"
#include "harness/run/runner.h"
#include "impls/offload.h"
#include "impls/strategy.h"

namespace bpbench {

const char* kEstimateHelp =
    R"(usage: bpbench estimate --model NAME --seq-len T [--impl I[,I...]] [--batch B] [--group G]
                        [--partition C] [--logits-partition CL] [--dtype D] [--objective O]
                        [--lora-rank R] [--threads N] [--offload none|checkpoints]
                        [--device cpu|cuda] [--train model|mixed] [--verbose]

The analytic peak memory of one forward + backward of each strategy (default: all of them), from the model's
dimensions: base (parameters, gradients, batch) plus the largest phase above it (forward, head, a layer's MLP
or attention backward), counted as the harness's CPU tracking allocator counts LibTorch tensors. Then the
step's FLOPs, as a run counts them: model (the network's own forward + backward), hardware (what the strategy
runs: recomputation and the attention kernel's rescoring included), and attention as a kernel that computes
every score of its key range would run it (the paper's accounting). Formulas: reports/ESTIMATE.md.

options:
  --model NAME            a preset (bpbench list models)
  --seq-len T             tokens per sequence
  --impl I[,I...]         plain, checkpoint, checkpoint-chunked-head, mst, streambp (default: all)
  --batch B               SFT sequences, DPO pairs, GRPO prompts (default 1)
  --group G               GRPO completions per prompt (default 8)
  --partition C           rows per layer chunk (default T)
  --logits-partition CL   rows per LM-head chunk (default T)
  --dtype D               float32 | bfloat16 | float64 (default float32)
  --objective O           sft | dpo | grpo (default sft)
  --lora-rank R           LoRA adapters of rank R (default 0: full fine-tuning)
  --threads N             CPU threads of the run (default: every core, as `bpbench run`); the attention
                          kernel keeps a scratch block per thread
  --offload O             none | checkpoints: the layer checkpoints in host memory; adds the host bytes
                          and the bytes copied per step (default none; every impl but plain)
  --device D              cpu | cuda: whose attention kernel the terms model (default cpu, the variant
                          measured to the byte). cuda: FlashAttention-2 for bfloat16, the memory-efficient
                          kernel for float32, as PyTorch 2.11 allocates them (not yet measured on a GPU);
                          float64 there runs the math kernel, which is not estimated
  --train P               the peak of a training run with AdamW (measure.train) instead of one step: the
                          moments alive through every step after the first, the optimizer's step as a
                          phase; P = model (moments in the model dtype) or mixed (bfloat16 weights,
                          float32 masters, their gradients and the moments)
  --verbose               every phase and term
)";

int estimate_command(const std::vector<std::string>& args, std::ostream& out) {
  EstimateInput in;
  in.threads = default_threads();
  std::string model, impls;
  int64_t batch = 1, group = 8;
  bool verbose = false, have_t = false;
  auto integer = [](const std::string& flag, const std::string& v) {
    size_t used = 0;
    int64_t x = 0;
    try {
      x = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || v.empty())
      throw std::invalid_argument(fmt::format("estimate: {} expects an integer, got '{}'", flag, v));
    return x;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--verbose") {
      verbose = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= args.size())
      throw std::invalid_argument(fmt::format(
          "estimate: unexpected argument '{}' (valid: --model, --seq-len, --impl, --batch, --group, "
          "--partition, --logits-partition, --dtype, --objective, --lora-rank, --threads, --offload, "
          "--device, --train, --verbose; each with a value but --verbose)",
          a));
    const std::string& v = args[++i];
    if (a == "--model")
      model = v;
    else if (a == "--seq-len")
      in.seq_len = integer(a, v), have_t = true;
    else if (a == "--impl")
      impls = v;
    else if (a == "--batch")
      batch = integer(a, v);
    else if (a == "--group")
      group = integer(a, v);
    else if (a == "--partition")
      in.partition = integer(a, v);
    else if (a == "--logits-partition")
      in.logits_partition = integer(a, v);
    else if (a == "--objective")
      in.objective = v;
    else if (a == "--lora-rank")
      in.lora_rank = integer(a, v);
    else if (a == "--threads")
      in.threads = integer(a, v);
    else if (a == "--offload")
      in.offload = parse_offload(v) == Offload::checkpoints;
    else if (a == "--device") {
      if (v != "cpu" && v != "cuda")
        throw std::invalid_argument(fmt::format("estimate: unknown device '{}' (valid: cpu, cuda)", v));
      in.device = v;
    } else if (a == "--train") {
      if (v != "model" && v != "mixed")
        throw std::invalid_argument(
            fmt::format("estimate: unknown --train precision '{}' (valid: model, mixed)", v));
      in.train = TrainEstimate{/*steps=*/2, /*batches=*/1, v == "mixed"};
    } else if (a == "--dtype") {
      if (v == "float32")
        in.dtype = torch::kFloat;
      else if (v == "bfloat16")
        in.dtype = torch::kBFloat16;
      else if (v == "float64")
        in.dtype = torch::kDouble;
      else
        throw std::invalid_argument(
            fmt::format("estimate: unknown dtype '{}' (valid: float32, bfloat16, float64)", v));
    } else
      throw std::invalid_argument(fmt::format("estimate: unknown option '{}'", a));
  }
  if (model.empty() || !have_t) throw std::invalid_argument("estimate: --model and --seq-len are required");
  if (in.train && in.train->mixed && in.dtype != torch::kBFloat16)
    throw std::invalid_argument(
        "estimate: --train mixed keeps float32 masters of bfloat16 weights (valid with "
        "--dtype bfloat16; --train model otherwise)");
  in.config = find_model_preset(model);
  in.sequences = sequences_for(in.objective, batch, group);
  std::vector<std::string> names;
  if (impls.empty()) {
    for (const auto& name : estimated_impls())
      if (!in.offload || make_strategy(name)->uses_offload()) names.push_back(name);
  } else {
    std::stringstream ss(impls);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) names.push_back(item);
  }
  std::vector<std::pair<std::string, MemoryEstimate>> rows;
  std::vector<FlopCounts> flops;
  for (const auto& name : names) {  // all validated before anything is printed
    in.impl = name;
    rows.emplace_back(name, estimate_peak(in));
    flops.push_back(estimate_flops(in));
  }
  if (!verbose && in.device == "cuda" && !rows.empty())
    out << fmt::format(
        "on cuda: {} attention (terms from PyTorch 2.11's source, not yet measured on a GPU)\n",
        rows.front().second.attention_kernel);
  if (!verbose)
    out << fmt::format("{:<24} {:>16} {:>16}{}  {}\n", "impl", "peak bytes", "above base",
                       in.offload ? fmt::format(" {:>16}", "host bytes") : "", "dominant phase");
  for (const auto& [name, e] : rows) {
    in.impl = name;
    if (verbose)
      out << format_estimate(in, e);
    else
      out << fmt::format("{:<24} {:>16} {:>16}{}  {}\n", name, e.peak_bytes, e.peak_above_base,
                         in.offload ? fmt::format(" {:>16}", e.host_bytes) : "", e.dominant_phase);
  }
  out << fmt::format("\n{:<24} {:>20} {:>20} {:>9} {:>20}\n", "impl", "model FLOPs", "hardware FLOPs",
                     "overhead", "dense attention");
  for (size_t i = 0; i < rows.size(); ++i) {
    const FlopCounts& f = flops[i];
    const double overhead =
        100.0 * static_cast<double>(f.hardware() - f.model()) / static_cast<double>(f.model());
    out << fmt::format("{:<24} {:>20} {:>20} {:>8.1f}% {:>20}\n", rows[i].first, f.model(), f.hardware(),
                       overhead, f.attention_dense);
  }
  return 0;
}

}  // namespace bpbench
