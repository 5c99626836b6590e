// run_detail.h: what the run layer's files share about running one cell; internal to harness/run/.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/run/runner.h"
#include "impls/interface/strategy.h"

namespace bpbench::run_detail {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0);
// Results and the console are line-oriented: an exception message must not break a line.
std::string one_line(std::string s);
std::string read_file(const std::string& path);  // the whole file; "" when it cannot be read
std::string host_name();                         // this machine's, "unknown" when it cannot be read

bool is_distributed(const Strategy& strategy);
// The registry's distributed strategies, for messages.
std::vector<std::string> distributed_strategy_names();
// True for the "error" of a cell whose process (or one of whose ranks) died of SIGKILL, which the system's
// OOM killer sends: run_cell_isolated's and run_cell_distributed's reasons say "by signal 9 (".
bool killed_by_sigkill(const CellResult& r);
// One distributed cell from its ranks' records (rank r's at r): rank 0's record, every rank's measurements
// under "ranks", the highest rank's peak and the worst status. `first_failure`: the rank whose failure came
// first, whose reason the cell takes when it failed (not out of memory) on several.
CellResult merge_rank_results(const std::vector<CellResult>& ranks,
                              std::optional<size_t> first_failure = std::nullopt);
// A result for `job` before anything ran: its cell, threads and RoPE, status `status`.
CellResult result_for(const CellJob& job, std::string status = "ok");
// The cell's strategy: the registry's, a distributed one with the cell's ulysses_degree in its options.
std::unique_ptr<Strategy> strategy_of(const Cell& cell);
// The strategy of `job`, with what the result records about it (partition use, ranks). Null when the cell
// is not run: `r` then says "skipped" and why.
std::unique_ptr<Strategy> strategy_for(const CellJob& job, CellResult& r);

}  // namespace bpbench::run_detail
