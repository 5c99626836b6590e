// maxlen_cell.cpp: one max-sequence-length cell: the search of maxlen.h over child-process probes, started
// near the estimate, bounded by host memory when checkpoints are offloaded, and resumable probe by probe.
#include <fmt/format.h>

#include <algorithm>

#include "harness/estimate/estimate_inverse.h"
#include "harness/run/run_detail.h"
#include "harness/run/runner.h"
#include "profiles/host_memory.h"

namespace bpbench {

using namespace run_detail;

int64_t default_host_budget() {
  const int64_t available = profiles::host_available_bytes().value_or(0);
  return std::max<int64_t>(0, available - available / 10 - (int64_t{4} << 30));
}

namespace {

// A probe started this many times without finishing (the whole run killed while it ran, each time) is not
// started again: a device call's time limit or the OOM killer would end it the same way forever.
constexpr int64_t kMaxProbeStarts = 2;

// The cell at length T as a probe: null partitions follow T, one measured step, memory only.
CellJob probe_job(const CellJob& job, int64_t T, const MeasureSpec::MaxSeqLen& spec) {
  CellJob p = job;
  p.cell.seq_len = T;
  if (job.cell.partition == 0) p.cell.partition = T;
  if (job.cell.logits_partition == 0) p.cell.logits_partition = T;
  p.settings.measure.max_seq_len.reset();
  p.settings.measure.memory = true;
  p.settings.measure.time.enabled = false;
  p.settings.measure.grad_error_reference.clear();
  p.settings.measure.timeline = false;
  p.settings.measure.budget_bytes = spec.budget_bytes;  // none on a GPU: its own memory is the limit
  p.timeline_dir.clear();
  return p;
}

constexpr const char* kNotRunHost = "not run";

// What bounded the answer when it was not the device's memory: the first failing probe above it.
std::string bracket_reason(const MaxLenResult& m) {
  const Probe* bracket = nullptr;
  for (const Probe& p : m.probes)
    if (p.seq_len > m.max_seq_len && probe_failed_to_fit(p) && (!bracket || p.seq_len < bracket->seq_len))
      bracket = &p;
  if (!bracket) return "";
  if (bracket->status == "killed")
    return fmt::format(
        "bounded by a killed probe: T={} was killed from outside, so the length is the longest "
        "that fit and finished here, not a memory bound",
        bracket->seq_len);
  if (bracket->reason.rfind(kNotRunHost, 0) == 0)
    return fmt::format(
        "bounded by the host budget: T={} would need more pinned host memory for its offloaded "
        "checkpoints than the budget allows (estimated, not run)",
        bracket->seq_len);
  return "";
}

std::string killed_reason(int64_t starts) {
  return fmt::format(
      "started {} times and never finished: killed from outside (a time limit on the run, or "
      "the system's OOM killer); not started again",
      starts);
}

}  // namespace

CellResult search_cell_max_seq_len(const CellJob& job, const std::string& exe,
                                   const ProbeCallbacks& callbacks, const std::vector<Probe>& finished) {
  const MeasureSpec::MaxSeqLen spec = job.settings.measure.max_seq_len.value();
  CellResult r = result_for(job);
  const auto t0 = Clock::now();
  try {
    if (!strategy_for(job, r)) {
      r.wall_s = seconds_since(t0);
      return r;
    }
  } catch (const std::exception& e) {
    r.status = "error";
    r.reason = one_line(e.what());
    return r;
  }

  const int64_t threads = job.settings.threads > 0 ? job.settings.threads : default_threads();
  auto estimate_at = [&](int64_t T) {
    return estimate_cell(probe_job(job, T, spec).cell, threads, job.settings.device, std::nullopt,
                         job.settings.world_size);
  };
  const bool offloads = job.cell.offload != "none";
  const int64_t host_budget = offloads ? spec.host_budget_bytes.value_or(default_host_budget()) : 0;
  // Estimated host bytes past the host budget: such a probe is not run (see default_host_budget).
  auto over_host = [&](const std::optional<MemoryEstimate>& e) -> std::optional<int64_t> {
    if (!offloads || !e || e->host_bytes <= host_budget) return std::nullopt;
    return e->host_bytes;
  };

  MaxLenSearch search;
  search.budget_bytes = spec.budget_bytes.value_or(0);
  search.granularity = spec.granularity;
  search.upper = spec.upper;
  // Start at the largest length the analytic estimate puts within the budgets (the device's and, offloaded,
  // the host's), and grow or shrink by a quarter from there: the estimate is within a few percent for the
  // strategies it knows. Without a device budget (a GPU's own memory) the search starts at one granularity.
  std::optional<int64_t> estimated;
  if (spec.budget_bytes && estimate_at(spec.granularity)) {
    auto fits = [&](int64_t T) {
      const auto e = estimate_at(T);
      return e && e->peak_bytes <= *spec.budget_bytes && !over_host(e);
    };
    estimated = largest_fitting_multiple(spec.granularity, spec.upper, fits);
    search.start = std::max(spec.granularity, *estimated);
    search.growth = 1.25;
  }

  auto probe = [&](int64_t T) {
    int64_t starts = 0;
    for (const Probe& done : finished) {
      if (done.seq_len != T) continue;
      if (done.status != "started") return done;
      starts = done.attempts;
    }
    Probe p;
    p.seq_len = T;
    if (starts >= kMaxProbeStarts) {
      p.status = "killed";
      p.reason = killed_reason(starts);
      return p;
    }
    if (const auto host = offloads ? over_host(estimate_at(T)) : std::nullopt) {
      p.status = "oom";
      p.reason = fmt::format(
          "{}: its offloaded checkpoints need about {} bytes of pinned host memory (estimated), more than "
          "the host budget of {} bytes",
          kNotRunHost, *host, host_budget);
      return p;
    }
    if (callbacks.on_start) callbacks.on_start(Probe{T, "started", 0, "", starts + 1});
    const CellResult pr = job.settings.world_size > 1 ? run_cell_distributed(probe_job(job, T, spec), exe)
                                                      : run_cell_isolated(probe_job(job, T, spec), exe);
    p.status = pr.status == "skipped" ? "error" : pr.status;
    p.peak_bytes = pr.memory ? pr.memory->peak_bytes : 0;
    p.reason = pr.reason;
    if (killed_by_sigkill(pr)) {  // the OOM killer (host memory), or a kill from outside
      p.status = "killed";
    }
    return p;
  };
  r.max_len = MaxLenRecord{search_max_seq_len(search, probe, callbacks.on_probe), search,
                           offloads ? std::optional<int64_t>(host_budget) : std::nullopt, estimated};
  if (!r.max_len->error.empty()) {
    r.status = "error";
    r.reason = r.max_len->error;
  } else {
    r.reason = bracket_reason(*r.max_len);
  }
  r.wall_s = seconds_since(t0);
  return r;
}

}  // namespace bpbench
