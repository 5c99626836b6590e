#!/usr/bin/env bash
# Builds bpbench and runs the whole test suite with ctest. This is the README's test command and what CI runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
cd "$root/build"
if ! ctest --output-on-failure -j "$(nproc)" "$@"; then
  # The parallel log buries each failure's message mid-run; repeat the failed tests alone so that what
  # went wrong is the last thing printed (CI shows only the tail).
  echo "== the failed tests again, one at a time =="
  ctest --rerun-failed --output-on-failure 2>&1 | grep -v -E '^\[ +(RUN|OK) +\]' | tail -n 120
  exit 1
fi
