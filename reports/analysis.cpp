// analysis.cpp: results.json, read leniently into the one model every table of the report reads (see
// analysis.h): cells normalised, axis keys ordered, strategies ranked by first appearance.
#include "reports/analysis.h"

namespace bpbench::report_detail {

namespace {

std::string md_escape(std::string s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|')
      out += "\\|";
    else if (ch == '\n' || ch == '\r')
      out += ' ';
    else
      out += ch;
  }
  return out;
}

CellView view_cell(const json& c, size_t index) {
  CellView v;
  v.index = index;
  v.axes = field(c, "axes").is_object() ? field(c, "axes") : json::object();
  v.status = text(c, "status");
  v.reason = text(c, "reason");
  v.seq_len = integer(v.axes, "seq_len");
  v.partition = integer(v.axes, "partition");
  v.logits_partition = integer(v.axes, "logits_partition");
  v.uses_partition = flag(c, "uses_partition");
  v.uses_logits_partition = flag(c, "uses_logits_partition");
  v.memory = field(c, "memory");
  v.peak = integer(v.memory, "peak_bytes");
  v.base = integer(v.memory, "base_bytes");
  v.above_base = integer(v.memory, "peak_above_base_bytes");
  if (!v.above_base && v.peak && v.base) v.above_base = *v.peak - *v.base;
  v.estimate = integer(v.memory, "estimate_bytes");
  const json& t = field(c, "time");
  v.time_median = number(t, "median_s");
  v.time_cv = number(t, "cv");
  v.tokens_per_s = number(t, "tokens_per_s");
  v.time_count = integer(t, "count").value_or(field(t, "runs_s").is_array() ? field(t, "runs_s").size() : 0);
  v.max_seq_len = integer(c, "max_seq_len");
  v.estimate_max_seq_len = integer(field(c, "search"), "estimate_max_seq_len");
  v.hit_upper = flag(c, "hit_upper");
  v.probes = field(c, "probes").is_array() ? field(c, "probes") : json();
  v.grad_error = field(c, "grad_error").is_object() ? field(c, "grad_error") : json();
  const json& compute = field(c, "compute");
  v.model_flops = integer(compute, "model_flops");
  v.hardware_flops = integer(compute, "hardware_flops");
  v.dense_attention_flops = integer(field(compute, "counts"), "attention_dense");
  v.tflops_per_s = number(compute, "tflops_per_s");
  v.mfu = number(compute, "mfu");
  v.hfu = number(compute, "hfu");
  v.ranks = field(c, "ranks").is_array() ? field(c, "ranks") : json();
  v.train = field(c, "train").is_object() ? field(c, "train") : json();
  v.max_length = v.max_seq_len.has_value() || v.probes.is_array() || !v.seq_len.has_value();
  return v;
}

}  // namespace

// ---- markdown ---------------------------------------------------------------------------------------------

std::string shorten(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return s.substr(0, cut) + "…";
}

std::string md_table(const std::vector<std::string>& header,
                     const std::vector<std::vector<std::string>>& rows, size_t left_columns) {
  std::string out = "|";
  for (const auto& h : header) out += " " + md_escape(h) + " |";
  out += "\n|";
  for (size_t i = 0; i < header.size(); ++i) out += i < left_columns ? "---|" : "--:|";
  out += "\n";
  for (const auto& row : rows) {
    out += "|";
    for (size_t i = 0; i < header.size(); ++i) out += " " + md_escape(i < row.size() ? row[i] : "") + " |";
    out += "\n";
  }
  return out;
}

// ---- one cell, normalised ---------------------------------------------------------------------------------

std::string outcome_text(const CellView& c) {
  if (c.status == "oom") return "oom";
  if (c.status == "skipped") return "skipped: " + shorten(c.reason);
  if (c.status == "error") return "error: " + shorten(c.reason);
  return c.status.empty() ? std::string(kDash) : c.status;
}

std::string rate_text(const CellView& c) {
  if (!c.tflops_per_s) return "";
  std::string s = fmt::format("{:.3g} TFLOP/s", *c.tflops_per_s);
  if (c.mfu) s += fmt::format(", MFU {:.1f}%", 100 * *c.mfu);
  if (c.hfu) s += fmt::format(", HFU {:.1f}%", 100 * *c.hfu);
  return s;
}

// ---- grouping ---------------------------------------------------------------------------------------------

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

const std::vector<std::string>& memory_categories() {
  static const std::vector<std::string> order = {"params",      "grads",  "optimizer", "checkpoints", "kv",
                                                 "activations", "logits", "comm",      "other"};
  return order;
}

// ---- the whole results file, analysed ---------------------------------------------------------------------

Analysis analyse(const json& doc, const fs::path& results_dir) {
  Analysis a;
  a.doc = doc;
  a.results_dir = results_dir;
  const json& cells = field(doc, "cells");
  std::vector<json> axes_list;
  for (size_t i = 0; i < cells.size(); ++i) {
    a.cells.push_back(view_cell(cells[i], i));
    axes_list.push_back(a.cells.back().axes);
  }
  a.keys = ordered_axis_keys(axes_list);
  a.varying = varying_axis_keys(axes_list);
  for (const auto& c : a.cells)
    if (!a.impl_rank.count(c.axis("impl"))) a.impl_rank[c.axis("impl")] = a.impl_rank.size();
  const json& measure = field(field(field(doc, "meta"), "scenario"), "measure");
  a.budget = integer(measure, "budget_bytes");
  return a;
}

bool is_grid_cell(const CellView& c) {
  return !c.max_length;
}
bool is_max_length_cell(const CellView& c) {
  return c.max_length;
}

std::vector<int64_t> sorted_seq_lens(const Cells& cells) {
  std::set<int64_t> s;
  for (const CellView* c : cells)
    if (c->seq_len) s.insert(*c->seq_len);
  return {s.begin(), s.end()};
}

std::string heading(const CellView& c, const std::vector<std::string>& keys) {
  const std::string l = axes_label(c.axes, keys);
  return l.empty() ? "all cells" : l;
}

}  // namespace bpbench::report_detail
