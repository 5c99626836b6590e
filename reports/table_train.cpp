// table_train.cpp: training runs as the StreamBP rebuttal tabulates them: for each run, the held-out loss of
// every strategy at each evaluation step beside plain BP's, and their difference (a strategy that is exact
// differs by round-off only; in bfloat16 that round-off compounds over the steps, which is what the table
// shows). Without evaluations the training losses are shown at ten evenly spaced steps.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <vector>

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

}  // namespace

std::string section_train(const Analysis& a) {
  Cells trained;
  for (const CellView* c : a.select(is_grid_cell))
    if (c->ok() && c->train.is_object()) trained.push_back(c);
  if (trained.empty()) return "";

  // Runs that differ only by strategy form one table, plain BP's first.
  std::map<std::string, Cells> runs;
  std::vector<std::string> order;
  for (const CellView* c : trained) {
    json axes = c->axes;
    axes.erase("impl");
    axes.erase("partition");
    axes.erase("logits_partition");
    const std::string key = axes.dump();
    if (!runs.count(key)) order.push_back(key);
    runs[key].push_back(c);
  }
  std::string s = "\n## Training runs: loss trajectories against plain BP\n\n";
  s += "Each strategy trained from the same weights on the same batches (`measure.train`). Per step: plain "
       "BP's loss, each strategy's, and the difference (strategy − plain), as the StreamBP rebuttal's "
       "stability tables give them. Held-out loss where the run evaluated, else the training batch's.\n";
  const auto keys = a.heading_keys({"impl", "partition", "logits_partition"}, {}, &trained);
  for (const auto& key : order) {
    const Cells& cells = runs[key];
    const CellView* plain = nullptr;
    for (const CellView* c : cells)
      if (c->axis("impl") == "plain") plain = c;
    const CellView* base = plain ? plain : cells.front();
    bool held_out = false;
    const auto ref = trajectory(*base, &held_out);
    std::vector<std::string> header = {"step", base->axis("impl")};
    std::vector<std::vector<std::pair<int64_t, double>>> others;
    for (const CellView* c : cells) {
      if (c == base) continue;
      bool unused = false;
      others.push_back(trajectory(*c, &unused));
      header.push_back(c->axis("impl"));
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
    s += fmt::format("\n{} ({} loss)\n\n", keys.empty() ? std::string("run") : axes_label(base->axes, keys),
                     held_out ? "held-out" : "training");
    s += md_table(header, rows);
  }
  return s;
}

}  // namespace bpbench::report_detail
