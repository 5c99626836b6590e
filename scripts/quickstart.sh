#!/usr/bin/env bash
# The main job: builds bpbench (not the tests), runs scenarios/quickstart.json on CPU with the built-in `small` model (every
# single-process strategy, with memory timelines) and scenarios/quickstart_dist.json (streambp-dist and
# checkpoint-dist on 2 local ranks), and writes a report with plots for each:
#   out/quickstart/report/report.md, out/quickstart/dist/report/report.md
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_TARGETS=bpbench bash "$root/scripts/build.sh"  # the main job runs bpbench only; scripts/test.sh builds the rest
out="${1:-$root/out/quickstart}"
bpbench="$root/build/bpbench"
# --force: a second quickstart starts anew, its earlier results kept beside as results.replaced-TIME.json
"$bpbench" run "$root/scenarios/quickstart.json" --out "$out" --force
"$bpbench" run "$root/scenarios/quickstart_dist.json" --out "$out/dist" --force
# The timeline plotted is StreamBP's at T = 1024: cell 14 (lengths vary slowest, then the five impls).
"$bpbench" report "$out/results.json" --out "$out/report" --timeline-cell 14
"$bpbench" report "$out/dist/results.json" --out "$out/dist/report"
echo "reports: $out/report/report.html (and report.md), $out/dist/report/report.html (and report.md)"
