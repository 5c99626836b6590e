#!/usr/bin/env bash
# The main job: builds bpbench, runs scenarios/quickstart.json on CPU with the built-in `small` model, and writes
# out/quickstart/results.json plus a report with plots (out/quickstart/report/report.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
out="${1:-$root/out/quickstart}"
"$root/build/bpbench" run "$root/scenarios/quickstart.json" --out "$out"
"$root/build/bpbench" report "$out/results.json" --out "$out/report"
echo "report: $out/report/report.md"
