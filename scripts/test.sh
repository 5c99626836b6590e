#!/usr/bin/env bash
# Builds bpbench and runs the whole test suite with ctest. This is the README's test command and what CI runs.
# Arguments go to ctest: `scripts/test.sh -LE slow` leaves out the cases labelled slow (tests/test_groups.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "$root/build"
status=0
ctest --output-on-failure -j "$(nproc)" "$@" || status=$?
# A case that skips itself inside a shard leaves its shard passed: name those cases (ctest's log keeps every
# entry's output), as ctest names the skipped entries.
log=Testing/Temporary/LastTest.log
if [[ -f "$log" ]]; then
  skipped="$(sed -nE 's/^\[  SKIPPED \] ([^ ]+) \([0-9]+ ms\)$/\1/p' "$log" | LC_ALL=C sort -u)"
  if [[ -n "$skipped" ]]; then
    echo "Cases that skipped themselves ($(wc -l <<<"$skipped"); their reasons are in build/$log):"
    awk 'NR <= 60 { print "  " $0 }' <<<"$skipped"
  fi
fi
if ((status != 0)); then
  # The parallel log buries each failure's message mid-run; repeat the failed tests alone so that what
  # went wrong is the last thing printed (CI shows only the tail). A failed shard repeats all its cases.
  echo "== the failed tests again, one at a time =="
  ctest --rerun-failed --output-on-failure 2>&1 | grep -v -E '^\[ +(RUN|OK) +\]' | tail -n 120
  exit 1
fi
