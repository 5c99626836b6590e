#!/usr/bin/env bash
# Builds bpbench and runs the whole test suite with ctest. This is the README's test command and what CI runs.
# Arguments go to ctest: `scripts/test.sh -LE slow` leaves out the cases labelled slow (tests/test_groups.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/build.sh"
bash "$root/scripts/setup_test_tools.sh"  # the real Slurm that tests/slurm/check.sh starts
cd "$root/build"
rm -rf "$root/build/tests/shard-reports"  # this run's reports only
log="$root/build/tests/ctest-last.log"
mkdir -p "$(dirname "$log")"
set +e
ctest --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# Where the time went: the ten longest entries of this run (docs/development.md: the suite stays near 5 minutes).
echo "The ten longest ctest entries of this run:"
# awk takes the first ten itself: `head` would close the pipe early, and under pipefail sort's SIGPIPE (141)
# would end this script after a passing run (it did once, 2026-12-04).
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log" | sort -rn |
  awk 'NR <= 10 {printf "  %7.1f s  %s\n", $1, $2}'
# A case that skips itself inside a shard or a together group leaves its entry passed: name those cases, as
# ctest names the skipped entries, from those entries' GoogleTest reports (tests/discover_test_groups.py).
reports="$root/build/tests/shard-reports"
if compgen -G "$reports/*.json" >/dev/null; then
  python3 - "$reports" <<'PY'
import glob, json, sys
skipped = sorted(f"{suite['name']}.{case['name']}"
                 for report in glob.glob(sys.argv[1] + "/*.json")
                 for suite in json.load(open(report))["testsuites"] for case in suite["testsuite"]
                 if case.get("result") == "SKIPPED")
if skipped:
    print(f"Cases skipped inside shared entries ({len(skipped)}; their reasons: that entry's output, "
          "ctest -V -R ENTRY):")
    print("\n".join("  " + name for name in skipped))
PY
fi
if ((status != 0)); then
  # The parallel log buries each failure's message mid-run; repeat the failed tests alone so that what
  # went wrong is the last thing printed (CI shows only the tail). A failed shard repeats all its cases.
  echo "== the failed tests again, one at a time =="
  ctest --rerun-failed --output-on-failure 2>&1 | grep -v -E '^\[ +(RUN|OK) +\]' | tail -n 120
  exit 1
fi
