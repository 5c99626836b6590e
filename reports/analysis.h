// analysis.h: the model of a results file that every table of the report reads (internal to reports/: the
// files of the report share it through bpbench::report_detail; nothing outside reports/ includes it).
//
// Reading is tolerant: results.json is read as JSON, not through CellResult::from_json, so that cells from
// newer issues (max-length searches without a seq_len axis, timelines, estimates) and older files with fields
// missing still render. Every value that is absent renders as "–".
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "reports/results_file.h"
#include "reports/results_json.h"

namespace bpbench::report_detail {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace results_json;  // field, number, integer, text, flag

inline constexpr const char* kDash = "–";  // a value that is absent

// ---- markdown ---------------------------------------------------------------------------------------------

// Cut to at most max_chars bytes, marked with "…": reasons of failed cells can be pages of text.
std::string shorten(const std::string& s, size_t max_chars = 60);
// A markdown table; the first `left_columns` columns are left-aligned, the rest (numbers) right-aligned.
std::string md_table(const std::vector<std::string>& header,
                     const std::vector<std::vector<std::string>>& rows, size_t left_columns = 1);

// ---- one cell, normalised ---------------------------------------------------------------------------------

struct CellView {
  size_t index = 0;
  json axes = json::object();
  std::string status, reason;
  std::optional<int64_t> seq_len, partition, logits_partition;
  bool uses_partition = false, uses_logits_partition = false;
  json memory;  // the raw "memory" object or null
  std::optional<int64_t> peak, base, above_base, estimate;
  std::optional<double> time_median;
  int64_t time_count = 0;
  std::optional<double> time_cv, tokens_per_s;  // the runs' spread (stddev / mean) and throughput
  std::optional<int64_t> max_seq_len;
  std::optional<int64_t> estimate_max_seq_len;  // search.estimate_max_seq_len: the estimate's answer
  json probes;                                  // array or null
  json grad_error;                              // object or null
  // "compute" (results.h): FLOPs of the step and their rate; nullopt where the results have none.
  std::optional<int64_t> model_flops, hardware_flops, dense_attention_flops;
  std::optional<double> tflops_per_s, mfu, hfu;
  json ranks;               // a distributed cell: one record per rank (peak, time, comm), else null
  json train;               // a training run (measure.train): {"steps": [...], "eval": [...]}, else null
  bool max_length = false;  // a max-length search: "max_seq_len"/"probes", or no seq_len axis
  bool hit_upper = false;   // the search stopped at its upper limit: the maximum is at least max_seq_len

  bool ok() const { return status == "ok"; }
  std::string axis(const std::string& key) const {
    auto it = axes.find(key);
    return it == axes.end() ? std::string() : axis_value_text(*it);
  }
  bool has_timeline() const {
    return field(memory, "timeline").is_object() || field(memory, "timeline_file").is_string();
  }
};

// What a cell that did not run shows instead of a value.
std::string outcome_text(const CellView& c);

// The rate a cell's step ran at, for beside its time: "4.52 TFLOP/s", on a GPU with a known peak
// "412 TFLOP/s, MFU 38.1%, HFU 46.0%"; "" where the results have no rate.
std::string rate_text(const CellView& c);

// ---- grouping ---------------------------------------------------------------------------------------------

using Cells = std::vector<const CellView*>;

// Groups in first-appearance order.
template <class KeyFn>
std::vector<std::pair<std::string, Cells>> group_by(const Cells& cells, KeyFn key) {
  std::vector<std::pair<std::string, Cells>> groups;
  std::map<std::string, size_t> where;
  for (const CellView* c : cells) {
    const std::string k = key(*c);
    auto it = where.find(k);
    if (it == where.end()) {
      where[k] = groups.size();
      groups.push_back({k, {c}});
    } else {
      groups[it->second].second.push_back(c);
    }
  }
  return groups;
}

bool contains(const std::vector<std::string>& v, const std::string& s);

// The memory categories (profiles/recorder.h) in the paper's Figure 1 order, what lives longest first: the
// peak breakdown's columns and the timeline's stack.
const std::vector<std::string>& memory_categories();

// A cell whose layer checkpoints were offloaded to host memory (the "offload" axis,
// impls/machinery/offload.h).
inline bool is_offloaded(const CellView& c) {
  const std::string o = c.axis("offload");
  return !o.empty() && o != "none";
}
inline constexpr const char* kOffloadTag = " +offload";
// The ring strategies' 2-D mesh (the "ulysses_degree" axis): " U=2" for Ulysses over pairs inside the ring,
// nothing for the plain ring (1); and " zero3" for a distributed cell whose parameters are sharded too (the
// "sharding" axis; nothing for zero2).
inline std::string mesh_tag(const CellView& c) {
  const std::string u = c.axis("ulysses_degree"), sharding = c.axis("sharding");
  return (u.empty() || u == "1" ? "" : " U=" + u) +
         (sharding.empty() || sharding == "zero2" ? "" : " " + sharding);
}

// A strategy label: the impl, plus "ps=N" / "lps=N" where the same impl appears with several partition sizes
// in the same slot (e.g. the same seq_len column) of one table, so that a partition sweep gets one row per
// size; " U=N" for a ring strategy on a 2-D mesh (mesh_tag); and " +offload" for a cell with offloaded
// checkpoints, beside the same impl without.
class ImplLabeler {
 public:
  template <class SlotFn>
  ImplLabeler(const Cells& cells, SlotFn slot) {
    std::map<std::string, std::set<int64_t>> ps, lps;
    for (const CellView* c : cells) {
      const std::string k = c->axis("impl") + "\x1f" + slot(*c);
      if (c->uses_partition && c->partition) ps[k].insert(*c->partition);
      if (c->uses_logits_partition && c->logits_partition) lps[k].insert(*c->logits_partition);
    }
    for (const auto& [k, s] : ps)
      if (s.size() > 1) split_ps_.insert(k.substr(0, k.find('\x1f')));
    for (const auto& [k, s] : lps)
      if (s.size() > 1) split_lps_.insert(k.substr(0, k.find('\x1f')));
  }
  std::string label(const CellView& c) const {
    std::string s = c.axis("impl");
    if (split_ps_.count(c.axis("impl")) && c.uses_partition && c.partition)
      s += fmt::format(" ps={}", *c.partition);
    if (split_lps_.count(c.axis("impl")) && c.uses_logits_partition && c.logits_partition)
      s += fmt::format(" lps={}", *c.logits_partition);
    s += mesh_tag(c);
    if (is_offloaded(c)) s += kOffloadTag;
    return s;
  }

 private:
  std::set<std::string> split_ps_, split_lps_;
};

// ---- the whole results file, analysed ---------------------------------------------------------------------

struct Analysis {
  json doc;
  fs::path results_dir;
  std::vector<CellView> cells;
  std::vector<std::string> keys;     // every axis key, display order
  std::vector<std::string> varying;  // keys whose values differ between cells
  std::map<std::string, size_t> impl_rank;
  std::optional<int64_t> budget;

  Cells select(bool (*pred)(const CellView&)) const {
    Cells out;
    for (const auto& c : cells)
      if (pred(c)) out.push_back(&c);
    return out;
  }
  // Axis keys whose values differ between the given cells.
  static std::vector<std::string> varying_in(const Cells& subset) {
    std::vector<json> axes;
    for (const CellView* c : subset) axes.push_back(c->axes);
    return varying_axis_keys(axes);
  }
  // Keys that name a table: always model/objective/dtype (and the `extra` ones), plus whatever else varies
  // (among `subset` when given, else among all cells), minus the keys the table spreads over its rows and
  // columns.
  std::vector<std::string> heading_keys(const std::vector<std::string>& exclude,
                                        const std::vector<std::string>& extra = {},
                                        const Cells* subset = nullptr) const {
    const std::vector<std::string> vary = subset ? varying_in(*subset) : varying;
    std::vector<std::string> out;
    for (const auto& k : keys) {
      const bool wanted =
          k == "model" || k == "objective" || k == "dtype" || contains(extra, k) || contains(vary, k);
      if (wanted && !contains(exclude, k)) out.push_back(k);
    }
    return out;
  }
  size_t rank(const std::string& impl) const {
    auto it = impl_rank.find(impl);
    return it == impl_rank.end() ? impl_rank.size() : it->second;
  }
  // Sorts row labels "impl[ ps=N][ lps=N][ U=N][ +offload]" by the impl's first appearance, then by the
  // mesh and the partition numbers.
  void sort_labels(std::vector<std::string>& labels) const {
    auto key = [&](const std::string& l) {
      const std::string impl = l.substr(0, l.find(' '));
      auto num_after = [&](const std::string& tag) -> int64_t {
        auto p = l.find(tag);
        return p == std::string::npos ? -1 : std::atoll(l.c_str() + p + tag.size());
      };
      return std::make_tuple(rank(impl), impl, num_after(" U="), l.find(kOffloadTag) != std::string::npos,
                             num_after(" ps="), num_after(" lps="));
    };
    std::stable_sort(labels.begin(), labels.end(),
                     [&](const auto& a, const auto& b) { return key(a) < key(b); });
  }
};

Analysis analyse(const json& doc, const fs::path& results_dir);

// Predicates for Analysis::select: a grid cell measured one sequence length, a max-length cell searched for
// the longest.
bool is_grid_cell(const CellView& c);
bool is_max_length_cell(const CellView& c);

std::vector<int64_t> sorted_seq_lens(const Cells& cells);

// A table: rows = strategy labels, columns = sequence lengths, one string per cell from `value`.
template <class ValueFn>
std::string impl_by_seq_len_table(const Analysis& a, const Cells& cells, ValueFn value) {
  const ImplLabeler labeler(cells, [](const CellView& c) { return c.axis("seq_len"); });
  std::vector<std::string> labels;
  std::map<std::pair<std::string, int64_t>, const CellView*> at;
  for (const CellView* c : cells) {
    const std::string l = labeler.label(*c);
    if (!contains(labels, l)) labels.push_back(l);
    at.emplace(std::make_pair(l, c->seq_len.value_or(0)), c);  // the first of duplicates wins
  }
  a.sort_labels(labels);
  const auto lens = sorted_seq_lens(cells);
  std::vector<std::string> header = {"impl"};
  for (int64_t t : lens) header.push_back(fmt::format("T={}", t));
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : labels) {
    std::vector<std::string> row = {l};
    for (int64_t t : lens) {
      auto it = at.find({l, t});
      row.push_back(it == at.end() ? "" : value(*it->second));
    }
    rows.push_back(row);
  }
  return md_table(header, rows);
}

// A table's heading: the axes in `keys` of its first cell, or "all cells" when none is set.
std::string heading(const CellView& c, const std::vector<std::string>& keys);

}  // namespace bpbench::report_detail
