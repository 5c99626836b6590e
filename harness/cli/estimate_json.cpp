// estimate_json.cpp: estimate_json (estimate_output.h), in the layout reports/estimate.schema.json publishes.
#include <nlohmann/json.hpp>

#include "harness/cli/estimate_output.h"

namespace bpbench {

using nlohmann::json;

namespace {

json model_json(const EstimateRequest& r) {
  const ModelConfig& c = r.in.config;
  return {{"name", c.name},
          {"given", r.model},
          {"source", r.source},
          {"layers", c.layers},
          {"hidden", c.hidden},
          {"intermediate", c.intermediate},
          {"heads", c.heads},
          {"kv_heads", c.kv_heads},
          {"head_dim", c.head_dim},
          {"vocab", c.vocab},
          {"tied_embeddings", c.tie_embeddings},
          {"parameters", c.parameter_count()}};
}

json setting_json(const EstimateRequest& r) {
  const EstimateInput& in = r.in;
  return {{"dtype", dtype_flag_name(in.dtype)},
          {"objective", in.objective},
          {"batch", r.batch},
          {"group", r.group},
          {"sequences", in.sequences},
          {"partition", in.partition},
          {"logits_partition", in.logits_partition},
          {"lora_rank", in.lora_rank},
          {"threads", in.threads},
          {"ranks", in.ranks},
          {"ulysses_degree", in.ulysses_degree},
          {"device", in.device},
          {"offload", offload_value(in)},
          {"sharding", in.sharding},
          {"train", in.train ? json(in.train->mixed ? "mixed" : "model") : json(nullptr)}};
}

json memory_json(const MemoryEstimate& e) {
  json phases = json::array();
  for (const auto& p : e.phases) {
    json terms = json::array();
    for (const auto& t : p.terms)
      terms.push_back({{"name", t.name}, {"bytes", t.bytes}, {"checkpoint", t.checkpoint}});
    phases.push_back({{"name", p.name}, {"bytes", p.bytes}, {"terms", terms}});
  }
  return {{"peak_bytes", e.peak_bytes},
          {"above_base_bytes", e.peak_above_base},
          {"base_bytes", e.base},
          {"params_bytes", e.params},
          {"grads_bytes", e.grads},
          {"batch_bytes", e.batch},
          {"optimizer_bytes", e.optimizer},
          {"checkpoint_bytes", e.checkpoints},
          {"host_bytes", e.host_bytes},
          {"offload_traffic_bytes", e.offload_traffic_bytes},
          {"dominant_phase", e.dominant_phase},
          {"attention_kernel", e.attention_kernel},
          {"phases", phases}};
}

const char* comm_group_name(CommGroup g) {
  return g == CommGroup::ulysses ? "ulysses" : g == CommGroup::ring ? "ring" : "world";
}

json time_json(const StepTime& t, const TimeAssumptions& a) {
  return {{"gpu", a.gpu},
          {"peak_tflops", a.peak_tflops},
          {"hfu", a.hfu},
          {"nvlink_gbps", a.nvlink_gbps},
          {"ib_gbps", a.ib_gbps},
          {"pcie_gbps", a.pcie_gbps},
          {"gpus_per_node", a.gpus_per_node},
          {"compute_s", t.compute_s},
          {"nvlink_s", t.nvlink_s},
          {"ib_s", t.ib_s},
          {"pcie_s", t.pcie_s},
          {"serial_s", t.serial_s()},
          {"overlapped_s", t.overlapped_s()},
          {"tokens_per_s_per_gpu", t.tokens_per_s_per_gpu()},
          {"mfu", t.mfu(a)}};
}

}  // namespace

json estimate_json(const EstimateRequest& r, const EstimateAnswers& a) {
  json doc = {
      {"bpbench_estimate", kEstimateJsonVersion}, {"model", model_json(r)}, {"setting", setting_json(r)}};
  json at = json::array();
  for (const auto& x : a.at_lengths) {
    json row = {{"impl", x.impl}, {"seq_len", x.seq_len}};
    row["memory"] = memory_json(x.memory);
    row["flops"] = x.flops ? json{{"model", x.flops->model()},
                                  {"hardware", x.flops->hardware()},
                                  {"attention_dense", x.flops->attention_dense}}
                           : json(nullptr);
    json comm = json::array();
    for (const CommEstimate* c : {&x.comm, &x.optimizer_comm})
      for (const auto& k : c->collectives)
        comm.push_back({{"kind", dist::collective_name(k.kind)},
                        {"what", k.what},
                        {"per", c == &x.optimizer_comm ? "step" : "micro-batch"},
                        {"group", comm_group_name(k.group)},
                        {"group_ranks", k.group_ranks},
                        {"calls", k.calls},
                        {"bytes", k.bytes},
                        {"wire_bytes", k.wire_bytes()}});
    row["comm"] = comm;
    row["time"] = x.time && r.time ? time_json(*x.time, *r.time) : json(nullptr);
    at.push_back(row);
  }
  doc["estimates"] = at;
  if (r.budgets.empty()) {
    doc["longest"] = nullptr;
    return doc;
  }
  json budgets = json::array();
  for (size_t b = 0; b < r.budgets.size(); ++b) {
    const MemoryBudget& m = r.budgets[b];
    json impls = json::array();
    for (const auto& l : a.longest) {
      if (l.budget != b) continue;
      const LongestLength& x = l.longest;
      impls.push_back({{"impl", l.impl},
                       {"seq_len", x.seq_len},
                       {"bound", x.bound},
                       {"peak_bytes", x.seq_len > 0 ? json(x.at.peak_bytes) : json(nullptr)},
                       {"host_bytes", x.seq_len > 0 ? json(x.at.host_bytes) : json(nullptr)},
                       {"dominant_phase", x.seq_len > 0 ? json(x.at.dominant_phase) : json(nullptr)}});
    }
    budgets.push_back({{"key", m.key},
                       {"label", m.label},
                       {"memory_bytes", m.memory_bytes},
                       {"reserve_bytes", m.reserve_bytes},
                       {"budget_bytes", m.bytes()},
                       {"note", m.note},
                       {"impls", impls}});
  }
  doc["longest"] = {{"granularity", r.granularity},
                    {"upper", r.upper},
                    {"host_budget_bytes", r.host_budget ? json(*r.host_budget) : json(nullptr)},
                    {"host_budget_source", r.host_budget_source},
                    {"budgets", budgets}};
  return doc;
}

}  // namespace bpbench
