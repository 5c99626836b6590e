// sections.h: the report's sections, one per paper table or figure, each in its own file, and the data of the
// figures they link (internal to reports/, in bpbench::report_detail; report.cpp strings them together in
// the paper's order). Each section is markdown that starts with a blank line and its "## " heading.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "reports/analysis.h"

namespace bpbench::report_detail {

// table_max_length.cpp: Table 3, the longest sequence each strategy fit, from max-length searches (else
// the longest grid length that ran, a lower bound).
std::string section_max_length(const Analysis& a);

// table_memory.cpp: peak BP memory per strategy and sequence length, and its breakdown by category.
std::string section_peak(const Analysis& a, bool plot_drawn);
// table_memory.cpp: Figure 3's curves (peak_vs_seq_len in plot_data.json).
json peak_plot_data(const Analysis& a);

// table_time.cpp: Table 1, the median BP time per strategy and sequence length, the runs' spread where it is
// too wide to compare, and tokens per second.
std::string section_time(const Analysis& a);

// table_peers.cpp: bpbench's streambp beside each peer of a merged report, peak and time as ratios; "" when
// the files hold no such pair.
std::string section_peers(const Analysis& a);

// table_flops.cpp: FLOPs per step of every cell that counted them: model, hardware, the overhead of
// recomputation, the attention as a dense-mask kernel runs it, and the rate.
std::string section_flops(const Analysis& a);

// table_partition.cpp: Figure 5's tables, BP time and peak per partition size, for every partition sweep.
std::string section_partition(const Analysis& a, bool plot_drawn);
// table_partition.cpp: Figure 5's curves (partition_sweep in plot_data.json).
json partition_plot_data(const Analysis& a);

// table_offload.cpp: every offloaded cell beside its twin without offload: device peak, host bytes, BP time
// and the exposed copy time; "" when no cell offloaded.
std::string section_offload(const Analysis& a);

// table_train.cpp: the rebuttal's stability tables: per training run, each strategy's held-out loss (else
// its training loss) step by step beside plain BP's, and the difference; "" when no cell trained. The
// figure's data: per run, every strategy's (step, loss) of training and of evaluation, plain BP's first.
std::string section_train(const Analysis& a, bool plot_drawn);
json train_plot_data(const Analysis& a);

// table_grad_error.cpp: Table 7, Er_abs and Er_rel per parameter group against the float64 reference.
std::string section_grad_error(const Analysis& a);

// timeline.cpp: Figures 1 and 8. The cell whose memory timeline the report shows, chosen once because the
// section and timeline.png must show the same one.
struct TimelineChoice {
  const CellView* cell = nullptr;
  json timeline;        // {"points": [...], "phases": [...]}
  std::string problem;  // why the chosen cell's timeline could not be read
};

// timeline.cpp: a cell's timeline, inline or from its memory.timeline_file under `results_dir`: {"points",
// "phases"}. Throws InputError when the file is missing or holds no points.
json read_timeline(const CellView& c, const fs::path& results_dir);
// timeline.cpp: the categories the points use, in the paper's Figure 1 order (what lives longest at the
// bottom), then any others.
std::vector<std::string> timeline_categories(const json& points);
// timeline.cpp: a point's live bytes ("live", else the sum of its categories).
int64_t point_live(const json& p);
// timeline.cpp: the index of the points' highest live bytes, the first of equals (0 for none).
size_t peak_point(const json& points);
// timeline.cpp: the innermost phase open at t_ms = t (the first of the deepest), "" when none.
std::string innermost_phase(const json& phases, double t);

// timeline.cpp: the cell whose timeline the report shows: `index`, else the first cell with a timeline.
// Throws InputError when `index` is out of range, has no timeline or its timeline cannot be read; the default
// choice records in `problem` why its timeline could not be read instead, so the report is still written.
TimelineChoice choose_timeline(const Analysis& a, std::optional<size_t> index);
// timeline.cpp: the timeline's points (thinned), categories and top-level phases for timeline.png.
json timeline_plot_data(const Analysis& a, const TimelineChoice& t);
// timeline.cpp: the chosen cell, its peak and the phase it fell in, per top-level phase its highest bytes.
std::string section_timeline(const Analysis& a, const TimelineChoice& t, bool plot_drawn);

// table_distributed.cpp: per rank of every distributed cell its status, peak, BP time and collectives; ""
// when no cell ran with several ranks.
std::string section_distributed(const Analysis& a);

}  // namespace bpbench::report_detail
