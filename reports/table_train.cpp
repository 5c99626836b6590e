// table_train.cpp: training runs as the StreamBP rebuttal tabulates them: for each run, the held-out loss of
// every strategy at each evaluation step beside plain BP's, and their difference (a strategy that is exact
// differs by round-off only; in bfloat16 that round-off compounds over the steps, which is what the table
// shows). Without evaluations the training losses are shown at ten evenly spaced steps.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <vector>

#include "impls/interface/strategy.h"
#include "reports/sections.h"

namespace bpbench::report_detail {

namespace {

// (step, loss) of a cell's run: its evaluations, else its training steps (every tenth of the run).
std::vector<std::pair<int64_t, double>> trajectory(const CellView& c, bool* held_out) {
  std::vector<std::pair<int64_t, double>> out;
  const json& eval = field(c.train, "eval");
  if (eval.is_array() && !eval.empty()) {
    *held_out = true;
    for (const auto& e : eval) out.emplace_back(e.value("step", int64_t{0}), e.value("loss", 0.0));
    return out;
  }
  *held_out = false;
  const json& steps = field(c.train, "steps");
  if (!steps.is_array() || steps.empty()) return out;
  const size_t stride = std::max<size_t>(1, steps.size() / 10);
  for (size_t i = 0; i < steps.size(); ++i)
    if ((i + 1) % stride == 0 || i == 0 || i + 1 == steps.size())
      out.emplace_back(steps[i].value("step", int64_t{0}), steps[i].value("loss", 0.0));
  return out;
}

// Training runs that differ only by strategy, each with plain BP's cell first (else the first cell), in the
// order they first appear.
struct TrainingRun {
  std::string label;  // the axes that tell runs apart, "run" when there is one
  Cells cells;        // the base cell first
};

std::vector<TrainingRun> training_runs(const Analysis& a) {
  Cells trained;
  for (const CellView* c : a.select(is_grid_cell))
    if (c->ok() && c->train.is_object()) trained.push_back(c);
  std::map<std::string, size_t> index;
  std::vector<TrainingRun> runs;
  const auto keys = a.heading_keys({"impl", "partition", "logits_partition"}, {}, &trained);
  for (const CellView* c : trained) {
    json axes = c->axes;
    axes.erase("impl");
    axes.erase("partition");
    axes.erase("logits_partition");
    const auto [it, added] = index.emplace(axes.dump(), runs.size());
    if (added) runs.push_back({keys.empty() ? std::string("run") : axes_label(c->axes, keys), {}});
    Cells& cells = runs[it->second].cells;
    if (c->axis("impl") == reference_strategy_name())
      cells.insert(cells.begin(), c);
    else
      cells.push_back(c);
  }
  return runs;
}

json points(const json& records) {
  json out = json::array();
  if (records.is_array())
    for (const auto& r : records) out.push_back({r.value("step", int64_t{0}), r.value("loss", 0.0)});
  return out;
}

}  // namespace

std::string section_train(const Analysis& a, bool plot_drawn) {
  const auto runs = training_runs(a);
  if (runs.empty()) return "";
  std::string s = "\n## Training runs: loss trajectories against plain BP\n\n";
  s += "Each strategy trained from the same weights on the same batches (`measure.train`). Per step: plain "
       "BP's loss, each strategy's, and the difference (strategy − plain), as the StreamBP rebuttal's "
       "stability tables give them. Held-out loss where the run evaluated, else the training batch's.\n";
  if (plot_drawn)
    s += "\n![training loss of every strategy, and its difference from plain BP](train_loss.png)\n";
  for (const auto& run : runs) {
    const CellView* base = run.cells.front();
    bool held_out = false;
    const auto ref = trajectory(*base, &held_out);
    std::vector<std::string> header = {"step", base->axis("impl")};
    std::vector<std::vector<std::pair<int64_t, double>>> others;
    for (size_t k = 1; k < run.cells.size(); ++k) {
      bool unused = false;
      others.push_back(trajectory(*run.cells[k], &unused));
      header.push_back(run.cells[k]->axis("impl"));
      header.push_back("difference");
    }
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < ref.size(); ++i) {
      std::vector<std::string> row = {fmt::format("{}", ref[i].first), fmt::format("{:.4f}", ref[i].second)};
      for (const auto& o : others) {
        if (i < o.size() && o[i].first == ref[i].first) {
          row.push_back(fmt::format("{:.4f}", o[i].second));
          row.push_back(fmt::format("{:+.2e}", o[i].second - ref[i].second));
        } else {
          row.push_back(kDash);
          row.push_back(kDash);
        }
      }
      rows.push_back(row);
    }
    s += fmt::format("\n{} ({} loss)\n\n", run.label, held_out ? "held-out" : "training");
    s += md_table(header, rows);
  }
  return s;
}

json train_plot_data(const Analysis& a) {
  json panels = json::array();
  for (const auto& run : training_runs(a)) {
    json series = json::array();
    for (const CellView* c : run.cells)
      series.push_back({{"label", c->axis("impl")},
                        {"steps", points(field(c->train, "steps"))},
                        {"eval", points(field(c->train, "eval"))}});
    panels.push_back({{"title", run.label}, {"series", series}});
  }
  return {{"panels", panels}};
}

}  // namespace bpbench::report_detail
