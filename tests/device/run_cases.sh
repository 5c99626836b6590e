#!/usr/bin/env bash
# run_cases.sh: ctest's entry for tests/device/ (bpbench_device_tests). Where a GPU is present each case runs
# in a process of its own (they test the CUDA caching allocator's statistics, CUPTI's subscription and the
# recorder, which exist once per process); where none is, every case skips itself, so one process runs them
# all (about 1 s instead of 45 processes). The skipped cases are listed by scripts/test.sh from REPORT.
#   bash tests/device/run_cases.sh BINARY REPORT.json
#   bash tests/device/run_cases.sh --list BINARY      # every case as Suite.Case, one a line (scripts/gpu/check.sh)
set -uo pipefail
list_cases() { "$1" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }'; }
if [[ "$1" == --list ]]; then
  list_cases "$2"
  exit
fi
binary="$1" report="$2"
mkdir -p "$(dirname "$report")"
if ! (command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1); then
  exec "$binary" --gtest_output=json:"$report"
fi
status=0
for name in $(list_cases "$binary"); do
  "$binary" --gtest_filter="$name" || status=1
done
exit "$status"
