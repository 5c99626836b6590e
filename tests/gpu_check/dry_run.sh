#!/usr/bin/env bash
# dry_run.sh: scripts/gpu/check.sh and continue.sh on the CPU, as CI can run them: tiny-preset stand-ins for
# the checks' scenarios (device cpu), the CPU build's bpbench and device-test binary (whose cases skip
# themselves here), the peers on the CPU, and a deadline scaled down. Checks, each of which fails this test:
#   1. with a stage that hangs (CHECK_HANG_IN) and more large output than the device tool returns, check.sh
#      still packs before its deadline: the hung stage is stopped and recorded as not finished, the stages after
#      it run, at most 8 files and 64 MiB come back (each file at most 16 MiB), what was left out is named,
#      memory_viz pickles go before traces, the summary's last line names the max-length probes' lengths and
#      outcomes (the estimate's answer ok, a step above oom), and the log's last lines say what ran, what did
#      not and the pack;
#   2. continue.sh, given that pack on a fresh work folder, skips every stage the pack holds as done (its cells
#      are kept, not measured again) and the device tests, and finishes the stage that hung.
# BPBENCH, DEVICE_TESTS and PYTHON (with torch and transformers) come from ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${BPBENCH:?BPBENCH= the bpbench binary}" "${DEVICE_TESTS:?DEVICE_TESTS= the device-test binary}"
: "${PYTHON:?PYTHON= a python with torch and transformers}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "dry_run: FAIL: $*" >&2; exit 1; }
json() {  # FILE EXPRESSION: a Python expression over the parsed file `d`
  "$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# 0. The real checks' scenarios parse and match the schema, and the max-length probes come out of the
#    estimate for the real template (Qwen3-8B on an H100's budget), so that no typo waits for a GPU.
"$BPBENCH" validate "$root"/scenarios/gpu_check/*.json >/dev/null || fail "a scenarios/gpu_check file does not validate"
"$PYTHON" "$root/scripts/gpu/maxlen_probes.py" "$root/scenarios/gpu_check/streambp_maxlen.json" "$BPBENCH" \
  "$tmp/real_probes.json" >/dev/null || fail "maxlen_probes.py failed on the real template"
[[ "$(json "$tmp/real_probes.json" 'd["grid"]["seq_len"][1] - d["grid"]["seq_len"][0]')" == 4096 ]] ||
  fail "the real probes are not a step of 4096 apart"

# The stand-ins: scenarios/gpu_check/*.json with the tiny preset on the CPU, one thread.
mkdir -p "$tmp/scenarios"
standin() {  # NAME IMPLS LENGTHS [MEASURE-EXTRA]
  cat >"$tmp/scenarios/$1.json" <<JSON
{"name": "dry_$1", "device": "cpu", "seed": 0, "threads": 1,
 "grid": {"model": "tiny", "impl": $2, "seq_len": $3, "partition": 16, "logits_partition": 16},
 "measure": {"memory": true, "time": {"warmup": 0, "repeat": 1}, "grad_error": false${4:-}}}
JSON
}
standin qwen3_8b '["streambp", "checkpoint", "plain"]' '[16, 33]'
standin llama_rows '["streambp", "checkpoint"]' '[16, 33]'
standin snapshot '"streambp"' 64 ', "timeline": true'
# A budget whose longest length is short (816 tokens: probes of a few tenths of a second), with the real
# template's peak phase (layer attention backward).
standin streambp_maxlen '"streambp"' 16 ', "budget_bytes": 600000'

export BPBENCH DEVICE_TESTS PYTHON DEVICE=cpu CHECK_SCENARIOS="$tmp/scenarios" MAXLEN_GRANULARITY=16
export PEER_MODEL=tiny PEER_SEQ_LEN=16 PEER_DTYPE=float32 PACK_RESERVE_S=10 DEVICE_TESTS_ONLY='^Device\.'
# hf_checkpoint's run is hf's with checkpointing on (the same script; tests/peers run both): the dry run
# checks the stage's mechanics with the two scripts it starts, 8 s less.
export CHECK_PEERS="hf streambp_official"
export CHECK_EXPECTED_S="device_tests=30 qwen3_8b=10 llama_rows=3 snapshot=5 peers=40 streambp_maxlen=10"
export CHECK_CAP_FACTOR=2
# check.sh's run, where llama_rows hangs: the planted hang is stopped after 2 s. continue.sh's llama_rows runs
# to its end (about 2 s alone): 10 s expected, a cap of 20 s, so that a loaded machine does not stop it (the
# dry run failed once with a 6 s cap, under a build beside ctest; its output was not kept).
hang_expected_s="${CHECK_EXPECTED_S/llama_rows=3/llama_rows=1}"
finish_expected_s="${CHECK_EXPECTED_S/llama_rows=3/llama_rows=10}"

# 1. A planted hang and planted large outputs: 8 incompressible files of 9 MiB, a 20 MiB one (over a part).
work1="$tmp/work1"
mkdir -p "$work1/runs/planted"
for i in 1 2 3 4 5 6 7; do head -c $((9 << 20)) /dev/urandom >"$work1/runs/planted/trace-$i.json"; done
head -c $((9 << 20)) /dev/urandom >"$work1/runs/planted/cell-000.pickle"
head -c $((20 << 20)) /dev/urandom >"$work1/runs/planted/too-big.pickle"
deadline=150
start="$(date +%s)"
status=0
CHECK_WORK="$work1" DEADLINE_S="$deadline" CHECK_HANG_IN=llama_rows CHECK_EXPECTED_S="$hang_expected_s" \
  bash "$root/scripts/gpu/check.sh" "$tmp/out1" >/dev/null 2>&1 || status=$?
took=$(($(date +%s) - start))
log="$tmp/out1/check.log"
[[ -f "$log" ]] || fail "no check.log in OUT"
((status == 0)) || { cat "$log" >&2; fail "check.sh exited $status"; }
((took < deadline)) || fail "check.sh took $took s, past its deadline of $deadline s"
status_of() { awk -F'\t' -v n="$2" '$1 == n { s = $2 } END { print s }' "$1/status.tsv"; }
[[ "$(status_of "$work1" llama_rows)" == not-finished ]] || { cat "$log" >&2; fail "the hung stage is not 'not-finished'"; }
for stage in probe device_tests qwen3_8b peers streambp_maxlen; do
  [[ "$(status_of "$work1" "$stage")" == done ]] || { cat "$log" >&2; fail "$stage did not run to the end after the hang"; }
done
[[ "$(status_of "$work1" build)" == skipped ]] || fail "the build was not skipped with BPBENCH given"
# On the CPU the pickle is the tracking allocator's (profiles/memory_viz.h): the snapshot check opens it and
# finds its trace's peak equal to the cell's.
[[ "$(status_of "$work1" snapshot)" == done ]] || { cat "$work1/logs/snapshot.log" >&2; fail "the snapshot check did not open the CPU's pickle"; }
grep -q "snapshots open in torch.cuda._memory_viz, each trace's peak equal to its cell's peak_bytes" \
  "$work1/logs/snapshot.log" ||
  fail "the snapshot check did not read the pickle's peak: $(cat "$work1/logs/snapshot.log")"
# The device tests ran case by case and skipped themselves (no GPU here).
[[ -s "$work1/device_tests.tsv" ]] || fail "no device_tests.tsv"
! grep -qvP '\tskipped\t' "$work1/device_tests.tsv" || fail "a device test did not skip on the CPU: $(grep -vP '\tskipped\t' "$work1/device_tests.tsv")"
# What comes back: at most 8 files, each at most 16 MiB, 64 MiB together, the pack among them.
files=("$tmp/out1"/*)
((${#files[@]} <= 8)) || fail "${#files[@]} files in OUT: $(ls "$tmp/out1")"
total=0
for f in "${files[@]}"; do
  size="$(stat -c %s "$f")"
  ((size <= 16 << 20)) || fail "$f is $size bytes, over 16 MiB"
  total=$((total + size))
done
((total <= 64 << 20)) || fail "OUT holds $total bytes, over 64 MiB"
pack="$tmp/out1/check-pack.tar.gz"
[[ -f "$pack" ]] || fail "no check-pack.tar.gz"
listing="$(tar -tzf "$pack")"
for f in status.tsv runs/qwen3_8b/results.json runs/qwen3_8b/report/report.md runs/peers/hf/results.json \
  runs/peers/streambp_official/results.json runs/streambp_maxlen/results.json summary.md left_out.txt; do
  grep -qx "$f" <<<"$listing" || fail "the pack lacks $f"
done
grep -q "runs/planted/too-big.pickle" "$work1/left_out.txt" || fail "the file over a part's size is not named as left out"
grep -q "left out (too large to come back): .*too-big.pickle" "$log" || fail "the log does not name what was left out"
large_listing="$(for p in "$tmp/out1"/check-large-*.tar.gz; do tar -tzf "$p"; done)"
grep -qx "runs/planted/cell-000.pickle" <<<"$large_listing" || fail "the memory_viz pickle did not come back before the traces"
left_traces="$(grep -c 'trace-' "$work1/left_out.txt" || true)"
((left_traces >= 1)) || fail "more large files came back than fit (nothing left out of 8 x 9 MiB)"
# The checks' numbers: every stand-in cell measured, the two probes around the estimate's answer, the summary.
[[ "$(json "$work1/runs/qwen3_8b/results.json" 'len(d["cells"])')" == 6 ]] || fail "expected 6 qwen3_8b cells"
probes="$(json "$work1/runs/streambp_maxlen/results.json" '[c["axes"]["seq_len"] for c in d["cells"]]')"
[[ "$probes" =~ ^\[([0-9]+),\ ([0-9]+)\]$ ]] && ((BASH_REMATCH[2] == BASH_REMATCH[1] + 16)) ||
  fail "the max-length probes are not the estimate's answer and a step above: $probes"
fits="${BASH_REMATCH[1]}" over="${BASH_REMATCH[2]}"
grep -q "| peer | T | status |" "$work1/summary.md" || fail "the summary has no peers table"
# Its last line names the probes by their lengths and outcomes (it once printed "T = None").
last="$(tail -n 1 "$work1/summary.md")"
[[ "$last" == "streambp's longest length"*": T = $fits: ok, T = $over: oom" ]] ||
  fail "the summary's last line does not say 'T = $fits: ok, T = $over: oom': $last"
# The last lines say what ran, what did not and the pack.
tail -n 6 "$log" | grep -q "^did not finish or failed: .*llama_rows (not-finished)" || fail "the log's end does not name the hung stage"
tail -n 6 "$log" | grep -q "^pack: check-pack.tar.gz" || fail "the log's last lines do not name the pack"

# 2. continue.sh from the pack on a fresh work folder: done stages skipped, the hung one finished. Every check
#    but the snapshot (checked in 1).
status=0
CHECK_WORK="$tmp/work2" DEADLINE_S=120 CHECKS="qwen3_8b llama_rows peers streambp_maxlen" CHECK_EXPECTED_S="$finish_expected_s" \
  bash "$root/scripts/gpu/continue.sh" "$tmp/out2" "$pack" >/dev/null 2>&1 || status=$?
log2="$tmp/out2/check.log"
((status == 0)) || { cat "$log2" >&2; fail "continue.sh exited $status"; }
for stage in qwen3_8b peers streambp_maxlen; do
  grep -qE "^$stage +skipped +0 s  done in the pack" "$log2" || { cat "$log2" >&2; fail "continue.sh did not skip $stage"; }
done
grep -qE "^device_tests +skipped" "$log2" || fail "continue.sh ran the device tests again"
grep -qE "^probe +done" "$log2" || fail "continue.sh did not probe its own machine"
[[ "$(status_of "$tmp/work2" llama_rows)" == done ]] || { cat "$log2" >&2; fail "continue.sh did not finish llama_rows"; }
[[ "$(json "$tmp/work2/runs/qwen3_8b/results.json" 'json.dumps(d["cells"], sort_keys=True)')" == \
   "$(json "$work1/runs/qwen3_8b/results.json" 'json.dumps(d["cells"], sort_keys=True)')" ]] ||
  fail "the cells of the pack changed"
echo "dry_run: check.sh packed in $took s of $deadline with a hung stage and too much output; continue.sh went on from its pack"
