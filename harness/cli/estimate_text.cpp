// estimate_text.cpp: print_estimate_text (estimate_output.h).
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "harness/cli/estimate_output.h"
#include "harness/cli/quantities.h"
#include "harness/estimate/deepspeed_states.h"

namespace bpbench {

namespace {

std::string sharding_words(const std::string& sharding) {
  if (sharding == "none") return "no sharding: whole gradients and optimizer on every rank";
  if (sharding == "zero1") return "ZeRO-1: the optimizer sharded";
  if (sharding == "zero3") return "ZeRO-3: the layers' parameters sharded too";
  return "ZeRO-2";
}

std::string setting_line(const EstimateRequest& r, const std::string& kernel) {
  const EstimateInput& in = r.in;
  // On CUDA a dtype not given is the model's or bfloat16 (estimate_request.cpp): the line says which.
  const std::string dtype =
      in.device == "cuda" && r.dtype_source != "--dtype"
          ? fmt::format("{} ({}; --dtype to change)", dtype_flag_name(in.dtype), r.dtype_source)
          : dtype_flag_name(in.dtype);
  std::string s = fmt::format("{} ({}), {}, {}, N={}, partition {}, logits partition {}", r.model,
                              r.source == "preset" ? "preset" : "Hugging Face config", dtype, in.objective,
                              in.sequences, in.partition, in.logits_partition);
  if (in.lora_rank > 0) s += fmt::format(", LoRA r={}", in.lora_rank);
  if (in.ranks > 1)
    s += fmt::format(", one rank of {} ({}; data parallel: N per rank; sequence parallel: N shared, T split)",
                     in.ranks, sharding_words(in.sharding));
  if (in.ulysses_degree > 1)
    s += fmt::format(", a {} x {} mesh (Ulysses over {} ranks inside rings of {})", in.ulysses_degree,
                     in.ranks / in.ulysses_degree, in.ulysses_degree, in.ranks / in.ulysses_degree);
  if (in.offload) s += ", checkpoints offloaded";
  if (in.train && in.train->offload_optimizer) s += ", optimizer offloaded";
  if (in.offload_params) s += ", parameters offloaded";
  if (in.train) s += fmt::format(", training run (AdamW, precision {})", in.train->mixed ? "mixed" : "model");
  if (in.device == "cuda")
    s += fmt::format(", on cuda: {} attention (terms from PyTorch 2.11's source, not yet measured on a GPU)",
                     kernel);
  else
    s += fmt::format(", on cpu: {} attention, {} threads", kernel, in.threads);
  return s;
}

// "152576", ">=16777216" (never stopped), "412672 h" (stopped by the host budget), "-" (nothing fits)
std::string longest_cell(const LongestLength& l) {
  if (l.seq_len == 0) return "-";
  if (l.bound == "upper") return fmt::format(">={}", l.seq_len);
  return fmt::format("{}{}", l.seq_len, l.bound == "host" ? " h" : "");
}

void print_lengths(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  const bool offload = offloads_to_host(r.in);
  if (r.verbose) {
    for (const auto& x : a.at_lengths) out << format_estimate(input_at(r, x.impl, x.seq_len), x.memory);
  } else {
    out << fmt::format("{:<24} {:>9} {:>16} {:>16}{}  {}\n", "impl", "seq_len", "peak bytes", "above base",
                       offload ? fmt::format(" {:>16}", "host bytes") : "", "dominant phase");
    for (const auto& x : a.at_lengths)
      out << fmt::format("{:<24} {:>9} {:>16} {:>16}{}  {}\n", x.impl, x.seq_len, x.memory.peak_bytes,
                         x.memory.peak_above_base, offload ? fmt::format(" {:>16}", x.memory.host_bytes) : "",
                         x.memory.dominant_phase);
  }
  out << fmt::format("\n{:<24} {:>9} {:>20} {:>20} {:>9} {:>20}\n", "impl", "seq_len", "model FLOPs",
                     "hardware FLOPs", "overhead", "dense attention");
  bool beyond = false;
  for (const auto& x : a.at_lengths) {
    if (!x.flops) {
      out << fmt::format("{:<24} {:>9} {:>20} {:>20} {:>9} {:>20}\n", x.impl, x.seq_len, "-", "-", "-", "-");
      beyond = true;
      continue;
    }
    const FlopCounts& f = *x.flops;
    const double overhead =
        100.0 * static_cast<double>(f.hardware() - f.model()) / static_cast<double>(f.model());
    out << fmt::format("{:<24} {:>9} {:>20} {:>20} {:>8.1f}% {:>20}\n", x.impl, x.seq_len, f.model(),
                       f.hardware(), overhead, f.attention_dense);
  }
  if (beyond && !flops_estimated_for(r.in.config))
    out << "-: the FLOPs of Gated DeltaNet layers are not estimated yet (a measured cell counts them)\n";
  else if (beyond)
    out << "-: FLOPs not counted at this length (the counts would pass int64)\n";
}

const char* group_name(CommGroup g) {
  return g == CommGroup::ulysses ? "ulysses group" : g == CommGroup::ring ? "ring group" : "all ranks";
}

// One rank's collectives a micro-batch (and the optimizer's once a step), in comm.h's conventions.
void print_collectives(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  bool any = false;
  for (const auto& x : a.at_lengths) any = any || !x.comm.collectives.empty();
  if (!any) return;
  out << fmt::format(
      "\ncollectives of one rank{} (bytes: each call's full buffer, comm.h; wire: what the rank sends with "
      "NCCL's ring algorithms)\n",
      r.in.train ? " a micro-batch, and the optimizer's once a step" : " a step");
  out << fmt::format("{:<24} {:>9}  {:<14} {:<36} {:<13} {:>6} {:>16} {:>16}\n", "impl", "seq_len", "kind",
                     "what", "over", "calls", "bytes", "wire bytes");
  for (const auto& x : a.at_lengths)
    for (const CommEstimate* comm : {&x.comm, &x.optimizer_comm})
      for (const auto& c : comm->collectives)
        out << fmt::format(
            "{:<24} {:>9}  {:<14} {:<36} {:<13} {:>6} {:>16} {:>16.0f}\n", x.impl, x.seq_len,
            dist::collective_name(c.kind), comm == &x.optimizer_comm ? "optimizer: " + c.what : c.what,
            fmt::format("{} ({})", group_name(c.group), c.group_ranks), c.calls, c.bytes, c.wire_bytes());
}

// The time per step at the request's stated rates (estimate_time.h): every assumption in the heading.
void print_step_time(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  if (!r.time || a.at_lengths.empty()) return;
  const TimeAssumptions& t = *r.time;
  out << fmt::format(
      "\ntime per step by estimate on {} GPU{}: FLOPs run at {:.0f}% of {} TFLOP/s ({}, --hfu); collectives "
      "at {} GB/s within a node (NVLink, --nvlink-gbps) and {} GB/s across nodes (InfiniBand, --ib-gbps) "
      "a GPU, {} GPUs a node (--gpus-per-node); offload copies at {} GB/s (PCIe, --pcie-gbps). Not "
      "modelled: each call's latency, the optimizer step's own time, the host's side of a copy\n",
      std::max<int64_t>(r.in.ranks, 1), r.in.ranks > 1 ? "s" : "", 100 * t.hfu, t.peak_tflops, t.gpu,
      t.nvlink_gbps, t.ib_gbps, t.gpus_per_node, t.pcie_gbps);
  out << fmt::format("{:<24} {:>9} {:>11} {:>10} {:>10} {:>10} {:>11} {:>11} {:>15} {:>6}\n", "impl",
                     "seq_len", "compute s", "NVLink s", "IB s", "PCIe s", "serial s", "overlap s",
                     "tokens/s a GPU", "MFU");
  for (const auto& x : a.at_lengths) {
    if (!x.time) {
      out << fmt::format("{:<24} {:>9} {:>11}\n", x.impl, x.seq_len, "-");
      continue;
    }
    const StepTime& s = *x.time;
    out << fmt::format(
        "{:<24} {:>9} {:>11.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>11.3f} {:>15.0f} "
        "{:>5.1f}%\n",
        x.impl, x.seq_len, s.compute_s, s.nvlink_s, s.ib_s, s.pcie_s, s.serial_s(), s.overlapped_s(),
        s.tokens_per_s_per_gpu(), 100 * s.mfu(t));
  }
  out << "serial: the terms one after another; overlap: all of it hidden under the longest term (a lower "
         "bound)\n";
}

void print_host_budget(const EstimateRequest& r, std::ostream& out) {
  if (!r.in.offload) return;
  out << (r.host_budget
              ? fmt::format("host budget for the offloaded checkpoints: {}, {}\n", format_gb(*r.host_budget),
                            r.host_budget_source)
              : fmt::format("host budget for the offloaded checkpoints: {}\n", r.host_budget_source));
}

// The footnote of "-": what is alive before the step's first token (the same for every strategy).
void print_nothing_fits(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  for (const auto& l : a.longest)
    if (l.longest.seq_len == 0) {
      out << fmt::format("-: not even {} tokens fit (base alone: {} bytes of weights, gradients and batch)\n",
                         r.granularity, l.longest.at.base);
      return;
    }
}

void print_one_budget(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  const MemoryBudget& b = r.budgets.front();
  if (b.key == "budget")
    out << fmt::format("longest sequence within {} (--budget), in multiples of {} tokens\n",
                       format_gb(b.bytes()), r.granularity);
  else
    out << fmt::format(
        "longest sequence on {}: {} less {} held back (--reserve) = {}, in multiples of {} tokens\n", b.label,
        format_gb(b.memory_bytes), format_gb(b.reserve_bytes), format_gb(b.bytes()), r.granularity);
  if (!b.note.empty()) out << fmt::format("  ({})\n", b.note);
  print_host_budget(r, out);
  const bool offload = offloads_to_host(r.in);
  out << fmt::format("{:<24} {:>12} {:>16}{} {:>7}  {}\n", "impl", "longest T", "peak bytes",
                     offload ? fmt::format(" {:>16}", "host bytes") : "", "bound", "dominant phase at T");
  for (const auto& l : a.longest) {
    const LongestLength& x = l.longest;
    out << fmt::format(
        "{:<24} {:>12} {:>16}{} {:>7}  {}\n", l.impl, longest_cell(x),
        x.seq_len > 0 ? fmt::format("{}", x.at.peak_bytes) : "-",
        offload ? fmt::format(" {:>16}", x.seq_len > 0 ? fmt::format("{}", x.at.host_bytes) : "-") : "",
        x.bound, x.seq_len > 0 ? x.at.dominant_phase : "");
  }
  print_nothing_fits(r, a, out);
}

void print_budget_table(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  out << fmt::format(
      "longest sequence per GPU (tokens, multiples of {}); budget = the GPU's memory less what is held back "
      "(default 1 GiB + 5%; --reserve)\n",
      r.granularity);
  print_host_budget(r, out);
  std::string head = fmt::format("{:<16} {:>10} {:>10}", "gpu", "memory GB", "budget GB");
  for (const auto& impl : r.impls) head += fmt::format(" {:>{}}", impl, std::max<size_t>(impl.size(), 10));
  out << head << "\n";
  bool host_bound = false, upper = false;
  std::vector<std::string> notes;
  for (size_t b = 0; b < r.budgets.size(); ++b) {
    const MemoryBudget& budget = r.budgets[b];
    std::string row = fmt::format("{:<16} {:>10.2f} {:>10.2f}", budget.label, budget.memory_bytes / 1e9,
                                  budget.bytes() / 1e9);
    for (const auto& l : a.longest) {
      if (l.budget != b) continue;
      row += fmt::format(" {:>{}}", longest_cell(l.longest), std::max<size_t>(l.impl.size(), 10));
      host_bound = host_bound || l.longest.bound == "host";
      upper = upper || l.longest.bound == "upper";
    }
    out << row << "\n";
    if (!budget.note.empty()) notes.push_back(fmt::format("{}: {}", budget.label, budget.note));
  }
  print_nothing_fits(r, a, out);
  if (host_bound) out << "h: bounded by the host budget for the offloaded checkpoints, not by the GPU\n";
  if (upper) out << fmt::format(">=: fits at --upper {} tokens, the longest tried\n", r.upper);
  for (const auto& n : notes) out << n << "\n";
}

// A mixed-precision training run's model states, bpbench's (weights, gradients, optimizer of one rank) beside
// DeepSpeed's calculator for the same ranks, sharding and offload (harness/estimate/deepspeed_states.h).
void print_model_states(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  if (!r.in.train || !r.in.train->mixed || r.in.lora_rank > 0 || a.at_lengths.empty()) return;
  if (r.in.ranks > 1 && r.in.sharding != "zero2" && r.in.sharding != "zero3") return;  // DeepSpeed's two
  const ModelConfig& c = r.in.config;
  const bool offloaded = r.in.train->offload_optimizer;
  const auto ds = deepspeed_model_states(r.in.sharding == "zero3" ? 3 : 2, c.parameter_count(),
                                         std::max(c.vocab, c.intermediate) * c.hidden, r.in.ranks, offloaded,
                                         r.in.offload_params);
  const MemoryEstimate& e = a.at_lengths.front().memory;
  out << fmt::format(
      "\nmodel states of one rank (they do not depend on T), beside DeepSpeed's calculator, which knows no "
      "sequence length:\n"
      "  bpbench ({}): weights {} + gradients {} + optimizer {} on the device{}\n"
      "  DeepSpeed 0.19.8 {} ({}, P = {}, N = {}): {} a GPU; host {} a node (its 1.5 x buffer factor)\n"
      "  the same bytes a parameter: 2 of 16-bit weights, and over the N ranks 2 of 16-bit gradients, 4 + 4 "
      "of float32 masters and their gradients, 8 of moments (DeepSpeed's 18P/N); DeepSpeed's host bytes "
      "carry "
      "its 1.5 x factor, and offloaded it keeps no 16-bit gradients on the GPU, where one bpbench process "
      "keeps the model's .grad\n",
      a.at_lengths.front().impl, format_gb(e.params), format_gb(e.grads),
      format_gb(offloaded ? 0 : e.optimizer),
      offloaded ? fmt::format(", {} on the host", format_gb(e.optimizer)) : "", ds.function, ds.formula,
      c.parameter_count(), r.in.ranks, format_gb(ds.gpu_bytes), format_gb(ds.cpu_bytes));
}

}  // namespace

void print_estimate_text(const EstimateRequest& r, const EstimateAnswers& a, std::ostream& out) {
  const std::string kernel = !a.at_lengths.empty() ? a.at_lengths.front().memory.attention_kernel
                             : !a.longest.empty()  ? a.longest.front().longest.at.attention_kernel
                                                   : "";
  out << setting_line(r, kernel) << "\n";
  if (!a.at_lengths.empty()) {
    out << "\n";
    print_lengths(r, a, out);
    print_collectives(r, a, out);
    print_step_time(r, a, out);
    print_model_states(r, a, out);
  }
  if (r.budgets.empty()) return;
  out << "\n";
  if (r.budgets.size() == 1)
    print_one_budget(r, a, out);
  else
    print_budget_table(r, a, out);
}

}  // namespace bpbench
