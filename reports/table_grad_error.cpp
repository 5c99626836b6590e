// table_grad_error.cpp: Table 7, the gradient error of every strategy against plain BP in float64.
#include <fmt/format.h>

#include <cmath>

#include "reports/sections.h"

namespace bpbench::report_detail {

namespace {

std::string dtype_short(const std::string& dtype) {
  if (dtype == "float32") return "fp32";
  if (dtype == "bfloat16") return "bf16";
  if (dtype == "float64") return "fp64";
  if (dtype == "float16") return "fp16";
  return dtype;
}

}  // namespace

std::string section_grad_error(const Analysis& a) {
  std::string s = "\n## Gradient error (Table 7)\n\n";
  Cells with;
  for (const auto& c : a.cells)
    if (c.grad_error.is_object()) with.push_back(&c);
  if (with.empty()) return s + "No gradient errors in these results (measure.grad_error).\n";
  std::string reference;
  for (const CellView* c : with)
    if (reference.empty()) reference = text(c->grad_error, "reference");
  s += fmt::format(
      "Against plain BP in {} on the same weights and batch, per parameter group: Er_abs = mean |g_ref - g|, "
      "Er_rel = mean |g_ref - g| / |g_ref + 1e-10|. Row \"loss\": |loss - loss_ref| and its ratio to "
      "|loss_ref|.\n",
      reference.empty() ? "float64" : reference);
  const auto keys = a.heading_keys(
      {"impl", "dtype", "partition", "logits_partition", "offload", "ulysses_degree", "sharding"},
      {"seq_len"}, &with);
  std::vector<std::string> notes;
  for (const auto& [id, cells] :
       group_by(with, [&](const CellView& c) { return axes_label(c.axes, keys); })) {
    const ImplLabeler labeler(cells, [](const CellView&) { return std::string(); });
    std::vector<std::string> order = {"embed", "attention", "mlp", "norms", "lm_head", "lora"};
    for (const CellView* c : cells)
      for (const auto& [g, v] : field(c->grad_error, "groups").items())
        if (!contains(order, g) && g != "all") order.push_back(g);
    order.push_back("all");
    std::vector<std::string> groups;
    for (const auto& g : order)
      for (const CellView* c : cells)
        if (field(field(c->grad_error, "groups"), g.c_str()).is_object() && !contains(groups, g))
          groups.push_back(g);
    groups.push_back("loss");
    std::vector<std::string> header = {"group"};
    std::vector<const CellView*> columns;
    for (const CellView* c : cells) {
      columns.push_back(c);
      const std::string l = fmt::format("{} {}", labeler.label(*c), dtype_short(c->axis("dtype")));
      header.push_back(l + " Er_abs");
      header.push_back(l + " Er_rel");
      if (!text(c->grad_error, "error").empty())
        notes.push_back(fmt::format("{}: no reference: {}", axes_label(c->axes, a.heading_keys({})),
                                    text(c->grad_error, "error")));
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& g : groups) {
      std::vector<std::string> row = {g};
      for (const CellView* c : columns) {
        if (!text(c->grad_error, "error").empty()) {
          row.push_back("n/a");
          row.push_back("n/a");
          continue;
        }
        std::optional<double> abs, rel;
        if (g == "loss") {
          abs = number(c->grad_error, "loss_abs_error");
          const auto ref = number(c->grad_error, "reference_loss");
          if (abs && ref && *ref != 0) rel = *abs / std::fabs(*ref);
        } else {
          const json& st = field(field(c->grad_error, "groups"), g.c_str());
          abs = number(st, "er_abs");
          rel = number(st, "er_rel");
        }
        row.push_back(abs ? fmt::format("{:.2e}", *abs) : "");
        row.push_back(rel ? fmt::format("{:.2e}", *rel) : "");
      }
      rows.push_back(row);
    }
    s += fmt::format("\n### Gradient error: {}\n\n", heading(*cells.front(), keys));
    s += md_table(header, rows);
  }
  if (!notes.empty()) {
    s += "\n";
    for (const auto& n : notes) s += "- " + n + "\n";
  }
  return s;
}

}  // namespace bpbench::report_detail
