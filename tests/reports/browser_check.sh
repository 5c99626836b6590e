#!/usr/bin/env bash
# ctest entry "report_browser": report.html in a real browser. Runs the two tiny scenarios beside this file
# (a grid with timelines and a partition sweep; training runs), reports both in one page, and opens it in
# Debian's chromium, headless, offline (browser_check.py says what it checks); then a history page and a
# compare page. Then the check must refuse a copy of the report that loads a script from another host: a check
# that cannot fail proves nothing.
# Usage: browser_check.sh BPBENCH SCREENSHOT.png   (the screenshot is kept for a look: docs/compare.md)
set -euo pipefail
bpbench=$1 screenshot=$2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
chromium=$(command -v chromium || true)
[ -n "$chromium" ] || { echo "report_browser: chromium is missing: bash scripts/setup_test_tools.sh installs it" >&2; exit 1; }
work=$(mktemp -d /tmp/bpbench-browser-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bpbench" run "$here/browser_grid.json" --out "$work/grid" --quiet >/dev/null
"$bpbench" run "$here/browser_train.json" --out "$work/train" --quiet >/dev/null
"$bpbench" report "$work/grid/results.json" "$work/train/results.json" --out "$work/report"
python3 "$here/browser_check.py" --chromium "$chromium" --html "$work/report/report.html" \
  --results "$work/grid/results.json" "$work/train/results.json" --screenshot "$screenshot"

# history.html and compare.html: their figures, their sortable tables and their console. Two runs of the
# grid make a history with trends; the grid against the training run's file, a compare with cells missing.
"$bpbench" run "$here/browser_grid.json" --out "$work/grid2" --quiet >/dev/null
"$bpbench" history append "$work/grid/results.json" "$work/grid2/results.json" --to "$work/history.jsonl" >/dev/null
"$bpbench" history report "$work/history.jsonl" --out "$work/history" >/dev/null
python3 "$here/browser_check.py" --chromium "$chromium" --html "$work/history/history.html"
set +e  # compare exits with its count of regressions
"$bpbench" compare "$work/grid/results.json" "$work/grid2/results.json" --html "$work/compare.html" >/dev/null
set -e
python3 "$here/browser_check.py" --chromium "$chromium" --html "$work/compare.html"

# The report with a script from another host: refused (the request, and the policy's console error).
sed 's|</head>|<script src="https://cdn.example.invalid/memory_viz.js"></script></head>|' \
  "$work/report/report.html" >"$work/report/fetching.html"
set +e
python3 "$here/browser_check.py" --chromium "$chromium" --html "$work/report/fetching.html" \
  --results "$work/grid/results.json" "$work/train/results.json" 2>"$work/refused.txt"
status=$?
set -e
if [ "$status" -ne 1 ] || ! grep -q "cdn.example.invalid" "$work/refused.txt"; then
  echo "report_browser: a page that loads https://cdn.example.invalid was not refused (exit $status):" >&2
  cat "$work/refused.txt" >&2
  exit 1
fi
echo "report_browser: a page fetching from another host is refused: $(head -n 1 "$work/refused.txt")"
