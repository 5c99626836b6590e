#!/usr/bin/env bash
# The CI memory gate: runs scenarios/ci.json and compares every cell's peak with the committed baseline,
# reports/baselines/cpu/ci.json, at 0% tolerance (CPU peaks come from the tracking allocator and are exact
# and deterministic with one thread). Exit status: the number of cells whose peak grew, became oom or error.
#
#   bash scripts/ci_memory_gate.sh            # check (ctest runs this as the test "memory_gate")
#   bash scripts/ci_memory_gate.sh --refresh  # a change meant to move a peak: rewrite the baseline, commit it
#   bash scripts/ci_memory_gate.sh --junit gate.xml --markdown "$GITHUB_STEP_SUMMARY"   # any compare options
# BPBENCH_GATE_OUT=DIR keeps the run's results.json there (a report of it: docs/compare.md's workflow).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bpbench="${BPBENCH:-$root/build/bpbench}"
baseline="$root/reports/baselines/cpu/ci.json"
out="${BPBENCH_GATE_OUT:-$(mktemp -d)}"
"$bpbench" run "$root/scenarios/ci.json" --out "$out" --force > /dev/null
if [[ "${1:-}" == "--refresh" ]]; then
  mkdir -p "$(dirname "$baseline")"
  cp "$out/results.json" "$baseline"
  echo "baseline rewritten: $baseline (review the diff of its peak_bytes, then commit it)"
  exit 0
fi
"$bpbench" compare "$baseline" "$out/results.json" --mem-tol 0 "$@"
