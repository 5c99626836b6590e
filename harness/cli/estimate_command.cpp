// estimate_command.cpp: `bpbench estimate`: its help, and the request -> answers -> output path.
#include "harness/cli/estimate_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ostream>

#include "harness/cli/estimate_output.h"
#include "harness/cli/estimate_request.h"
#include "harness/cli/help_text.h"
#include "harness/estimate/estimate.h"
#include "harness/model/hf_model.h"
#include "harness/objectives/objective.h"
#include "impls/interface/strategy.h"

namespace bpbench {

namespace {
// The help; estimate_help() puts the registries' names where it says @FAMILIES@, @DATA_PARALLEL@,
// @SEQUENCE_PARALLEL@, @IMPLS@, @RANK_IMPLS@, @OBJECTIVES@.
const char* kEstimateHelp =
    R"(usage: bpbench estimate --model M (--seq-len T[,T...] | --budget BYTES | --gpu NAME|all) [options]

Will it fit, and how long a sequence can each strategy train? The analytic peak memory of one forward +
backward (or, with --train, of a training run) of each strategy, from the model's dimensions alone (no
weights are read): base (parameters, gradients, batch) plus the largest phase above it (forward, head, a
layer's MLP or attention backward), counted as bpbench's allocators count tensors (allocated bytes; on CUDA
what torch.cuda.max_memory_allocated reports). Then the step's FLOPs: model (the network's own forward +
backward), hardware (recomputation and the attention kernel's rescoring included), and attention as a kernel
that computes every score of its key range would run it; with --ranks, one rank's collectives a step. With a
memory budget, the longest sequence length per strategy that fits it; on one GPU, the time per step.
Formulas: docs/estimate.md.

model and lengths:
  --model M               a preset (bpbench list models), a Hugging Face model directory, or its config.json
                          of a family bpbench loads (bpbench list families: @FAMILIES@); what
                          bpbench cannot model is refused by name
  --seq-len T[,T...]      tokens per sequence; a list, with k (x1024) and M (x1048576): 8k,32k,128k
  --impl I[,I...]         @IMPLS@
                          (default: all; with --offload checkpoints: those that keep layer checkpoints);
                          with --ranks: @RANK_IMPLS@
                          (those whose heads split over the ranks)
  --ranks R               R ranks (a scenario's world_size): one rank's peak and collectives of the data
                          parallel @DATA_PARALLEL@ (--batch is per rank, as in a scenario) or of the
                          sequence-parallel @SEQUENCE_PARALLEL@ (--seq-len is the whole sequence, --batch
                          shared by the ranks)
  --ulysses-degree U      ring and streambp-ring on the 2-D mesh (a cell's ulysses_degree): Ulysses over
                          groups of U ranks inside rings of R / U (default 1: the ring over every rank)

the longest length within a memory budget:
  --budget BYTES          the device's allocated bytes allowed: 80GB (x1e9), 74.5GiB (x2^30), or bytes
  --gpu NAME|all          a GPU's memory less --reserve; all: every GPU in one table. NAME: l4, rtx-4090,
                          rtx-3090, a100-40gb, l40s, a100-80gb, a800-80gb, h100-sxm, h100-pcie, h100-nvl,
                          h200, b200, mi300x (sizes as nvidia-smi / rocm-smi report them; sources in
                          harness/cli/accelerators.cpp). Implies --device cuda
  --reserve BYTES         held back of the GPU's memory (default 1 GiB + 5% of it: the driver's own
                          reservation, the CUDA context, cuBLAS workspaces, and the caching allocator's
                          slack between reserved and allocated bytes; an H100 SXM keeps 80.17 GB)
  --host-budget BYTES     with --offload checkpoints: pinned host memory for the checkpoints (default with
                          --budget: this machine's available memory less a tenth and 4 GiB, as a max-length
                          search bounds it; with --gpu: not bounded, the host bytes needed are printed)
  --granularity G         lengths are multiples of G (default 1024)
  --upper T               the longest length tried (default 16M)

the setting (as a scenario's grid names it):
  --batch B               SFT sequences, DPO pairs, GRPO prompts (default 1)
  --group G               GRPO completions per prompt (default 8)
  --partition C           rows per layer chunk (default 500, the paper's; a shorter sequence is one chunk)
  --logits-partition CL   rows per LM-head chunk (default 100, the paper's)
  --dtype D               float32 | bfloat16 | float64 (default: float32 on the cpu; on cuda the dtype
                          config.json names, else bfloat16)
  --objective O           @OBJECTIVES@ (default sft)
  --lora-rank R           LoRA adapters of rank R (default 0: full fine-tuning)
  --threads N             CPU threads of the run (default: every core, as `bpbench run`); the CPU attention
                          kernel keeps a scratch block per thread
  --offload O             none, or a list of checkpoints, optimizer, parameters in that order: what goes
                          to host memory: the layer checkpoints (pinned); with --train AdamW's tensors and
                          step (as DeepSpeed's CPU Adam); with --ranks and --sharding zero3 the layers'
                          parameter shards, copied in for each gather (ZeRO-Infinity's offload_param; in a
                          training run with the optimizer). Adds the host bytes and the bytes copied per
                          step (default none)
  --device D              cpu | cuda: whose attention kernel the terms model (default cpu, measured to the
                          byte; --gpu: cuda). cuda: FlashAttention-2 for bfloat16, the memory-efficient
                          kernel for float32, as PyTorch 2.11 allocates them (not yet measured on a GPU)
  --train P               the peak of a training run with AdamW (measure.train): P = model (moments in the
                          model dtype) or mixed (bfloat16 weights, float32 masters and moments); with
                          --ranks, one rank's, its optimizer over its gradient shards (ZeRO-2)
  --grad-accum K          with --train: K micro-batches a step (default 1); with --ranks every gradient
                          shard is alive from the second micro-batch on
  --sharding S            with --ranks: none (whole gradients and optimizer on every rank, as DDP), zero1
                          (the optimizer sharded), zero2 (the gradients too; default) or zero3 (the layers'
                          parameters too, gathered per layer)

the time per step (with --seq-len and one --gpu whose peak FLOP/s is known: A100, H100, H200): the FLOPs
the strategy runs at a fraction of the peak, plus its collectives' bytes over the links, plus the offload
copies over PCIe, each term printed; nothing of it is measured (docs/estimate.md, "Time per step"):
  --hfu F                 the fraction of the dense peak the kernels reach on every FLOP they run (default
                          0.4); MFU is printed from it
  --nvlink-gbps B         GB/s a GPU sends within its node (default 450: NVLink 4, per direction)
  --ib-gbps B             GB/s a GPU sends to other nodes (default 50: one 400 Gb/s NDR port a GPU)
  --pcie-gbps B           GB/s between a GPU and its host (default 64: PCIe 5.0 x16, per direction)
  --gpus-per-node G       ranks a node (default 8); a collective whose ranks span nodes runs at --ib-gbps

output:
  --verbose               every phase and term of each estimate
  --json                  everything as one JSON document (reports/estimate.schema.json; bpbench validate
                          checks it)
  --plot FILE.png         peak against sequence length per strategy, the budgets as lines, the longest
                          lengths marked (needs python3-matplotlib)
)";
}  // namespace

std::string estimate_help() {
  const auto ranked = estimated_data_parallel_impls();
  return with_names(kEstimateHelp,
                    {{"@FAMILIES@", hf_family_labels()},
                     {"@DATA_PARALLEL@",
                      fmt::format("{}", fmt::join(strategies_where_sequence_parallel(ranked, false), ", "))},
                     {"@SEQUENCE_PARALLEL@",
                      fmt::format("{}", fmt::join(strategies_where_sequence_parallel(ranked, true), ", "))},
                     {"@IMPLS@", fmt::format("{}", fmt::join(estimated_impls(), ", "))},
                     {"@RANK_IMPLS@", fmt::format("{}", fmt::join(estimated_data_parallel_impls(), ", "))},
                     {"@OBJECTIVES@", fmt::format("{}", fmt::join(objective_names(), " | "))}});
}

int estimate_command(const std::vector<std::string>& args, std::ostream& out) {
  const EstimateRequest request = parse_estimate_request(args);
  const EstimateAnswers answers = answer_estimate(request);  // every answer before anything is printed
  if (!request.plot_file.empty()) draw_estimate_plot(request, answers);
  if (request.json)
    out << estimate_json(request, answers).dump(2) << "\n";
  else
    print_estimate_text(request, answers, out);
  return 0;
}

}  // namespace bpbench
