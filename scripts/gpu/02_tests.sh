#!/usr/bin/env bash
# GPU step: builds the test binary in BUILD_DIR, then runs the device suites first (tests/device/: every suite
# named Cuda* or Device*, parameterised ones included, one at a time since they share the GPU), then the rest in
# parallel on every core. Each test that passed (or skipped itself) is listed in the pack's done.txt: called
# again with that pack, the step runs only the tests not done yet. It exits non-zero while any test failed or
# has not run. TESTS=REGEX limits the step to the tests whose names it matches (a dry run).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
step_begin 02_tests "$@"
state="$BUILD_DIR/gpu-step-tests"
unpack_into "$state"
touch "$state/done.txt" "$state/Passed.txt" "$state/Skipped.txt"

status=0
with_time_limit cmake --build "$BUILD_DIR" --target bpbench_test_groups -j "$(nproc)" | tail -n 5 || status=$?
((status == 0)) || { echo "02_tests: the test build stopped (exit $status): call it again"; exit "$status"; }
cd "$BUILD_DIR"

# Every test as "NUMBER<tab>NAME" (numbers are this build's; names are what done.txt keeps across machines).
ctest -N | sed -nE 's/^ *Test +#([0-9]+): (.+)$/\1\t\2/p' >"$state/all.tsv"
if [[ -n "${TESTS:-}" ]]; then
  awk -F'\t' -v re="$TESTS" '$2 ~ re' "$state/all.tsv" >"$state/selected.tsv"
  mv "$state/selected.tsv" "$state/all.tsv"
fi
# The tests not done yet, as "NUMBER<tab>NAME".
remaining() { awk -F'\t' 'FILENAME == ARGV[1] { done[$0] = 1; next } !($2 in done)' "$state/done.txt" "$state/all.tsv"; }
device_re='^([A-Za-z0-9_]+/)?(Cuda|Device)[A-Za-z0-9_]*\.'
echo "02_tests: $(wc -l <"$state/all.tsv") tests, $(remaining | wc -l) not done yet"

run_group() {  # NAME JOBS AWK-CONDITION: the remaining tests whose name ($2) meets the condition, under ctest
  local name="$1" jobs="$2" condition="$3" numbers
  numbers="$(remaining | awk -F'\t' -v re="$device_re" "$condition { print \$1 }" | paste -sd,)"
  [[ -n "$numbers" ]] || { echo "02_tests: $name: none to run"; return 0; }
  echo "0,0,0,$numbers" >"$state/ctest-$name.list"  # ctest -I FILE: start,end,stride,then test numbers
  echo "02_tests: $name: $(tr ',' '\n' <<<"$numbers" | wc -l) tests"
  local rc=0
  with_time_limit ctest --output-on-failure -j "$jobs" -I "$state/ctest-$name.list" >"$state/ctest-$name.log" 2>&1 ||
    rc=$?
  # "N/M Test #K: NAME ....   Passed" (or "***Skipped"): recorded by number, so names with any characters work.
  local outcome
  for outcome in Passed Skipped; do
    sed -nE "s/^ *[0-9]+\/[0-9]+ +Test +#([0-9]+): .*[ *]$outcome .*\$/\1/p" "$state/ctest-$name.log" |
      awk -F'\t' 'FILENAME == "-" { ok[$1] = 1; next } ($1 in ok) { print $2 }' - "$state/all.tsv" |
      tee -a "$state/done.txt" >>"$state/$outcome.txt"
  done
  grep -E '(tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Not Run|\*\*\*Exception)' "$state/ctest-$name.log" |
    tail -n 40
  return "$rc"
}
run_group device 1 '$2 ~ re' || status=$?
((status == 124 || status == 137)) || run_group rest "$(nproc)" '$2 !~ re' || status=$?
LC_ALL=C sort -u "$state/done.txt" -o "$state/done.txt"
left="$(remaining | cut -f2)"
echo "02_tests: $(wc -l <"$state/done.txt") of $(wc -l <"$state/all.tsv") done (passed or skipped itself);" \
  "$(grep -c . <<<"$left" || true) failed or not run yet:"
sed 's/^/  /' <<<"$left" | head -n 50
if [[ -s "$state/Skipped.txt" ]]; then  # on a GPU machine a device test that skips itself says why in its log
  echo "02_tests: $(sort -u "$state/Skipped.txt" | wc -l) skipped themselves (Skipped.txt):"
  sort -u "$state/Skipped.txt" | head -n 20 | sed 's/^/  /'
fi
pack_dir "$state"
if ((status == 0)) && [[ -n "$left" ]]; then status=1; fi
exit "$status"
