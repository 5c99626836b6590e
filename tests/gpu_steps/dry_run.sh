#!/usr/bin/env bash
# dry_run.sh: the GPU step scripts (scripts/gpu/) on the CPU, as CI can run them: tiny-preset stand-ins for
# three tables (scenario files named like scenarios/h100_*.json, device cpu) and the peers on the CPU.
# Checks, each of which fails this test:
#   1. a table step writes its pack and log under OUT; the pack holds bpbench's results (with the device in
#      meta), the peer's results and the report, both results files matching reports/results.schema.json;
#   2. on a fresh run folder (another machine), the same step given that pack keeps every cell and peer length
#      (none measured again) and ends with the same cells;
#   3. a table with a failed cell goes on to its report and exits non-zero naming what failed;
#   4. a step stopped by its time limit mid-search packs what it finished, says NOT FINISHED, and the next
#      call, given that pack, finishes the search;
#   5. files too large to carry come back in parts of at most 15 MiB beside the pack, results.json in it.
# BPBENCH (the binary) and PYTHON (with torch and transformers) come from ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${BPBENCH:?BPBENCH= the bpbench binary}" "${PYTHON:?PYTHON= a python with torch and transformers}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export BPBENCH PYTHON DEVICE=cpu SCENARIOS="$tmp/scenarios/dry_" PACKS="$tmp/no-packs" RUN_DIR="$tmp/run"
mkdir -p "$tmp/scenarios"

fail() { echo "dry_run: FAIL: $*" >&2; exit 1; }
json() {  # FILE EXPRESSION: a Python expression over the parsed file `d`
  "$PYTHON" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

cat >"$tmp/scenarios/dry_llama_memory_time.json" <<'JSON'
{"name": "dry_llama_memory_time", "device": "cpu", "seed": 0, "threads": 1,
 "grid": {"model": "tiny", "impl": ["checkpoint", "streambp"], "seq_len": [16, 33], "partition": 8,
          "logits_partition": 8},
 "measure": {"memory": true, "time": {"warmup": 0, "repeat": 1}, "grad_error": false}}
JSON
# A DPO cell whose prompt leaves no response token fails at run time (status "error"); the other cell is fine.
cat >"$tmp/scenarios/dry_table1_time.json" <<'JSON'
{"name": "dry_table1_time", "device": "cpu", "seed": 0, "threads": 1,
 "grid": {"model": "tiny", "impl": "streambp", "objective": ["sft", "dpo"], "seq_len": 16, "prompt_len": 40,
          "partition": 8, "logits_partition": 8},
 "measure": {"memory": true, "time": false, "grad_error": false}}
JSON
cat >"$tmp/scenarios/dry_table3_maxlen.json" <<'JSON'
{"name": "dry_table3_maxlen", "device": "cpu", "seed": 0, "threads": 1,
 "grid": {"model": "tiny", "impl": ["checkpoint", "streambp"], "partition": 16, "logits_partition": 16},
 "measure": {"memory": true, "max_seq_len": {"budget_bytes": 4000000, "granularity": 16, "upper": 8192}}}
JSON

# 1. One table step: pack, log, results with the device named, the peer, the report.
status=0
bash "$root/scripts/gpu/10_llama_memory_time.sh" "$tmp/out1" >/dev/null 2>&1 || status=$?
((status == 0)) || { cat "$tmp/out1/llama_memory_time.log" >&2; fail "10_llama_memory_time exited $status"; }
pack="$tmp/out1/llama_memory_time.tar.gz"
[[ -f "$pack" && -f "$tmp/out1/llama_memory_time.log" ]] || fail "no pack or log in OUT: $(ls "$tmp/out1")"
listing="$(tar -tzf "$pack")"
for f in results.json peers/hf_llama/results.json report/report.md; do
  grep -qx "$f" <<<"$listing" || fail "the pack lacks $f: $listing"
done
mkdir -p "$tmp/first" && tar -xzf "$pack" -C "$tmp/first"
[[ "$(json "$tmp/first/results.json" 'len(d["cells"])')" == 4 ]] || fail "expected 4 cells"
[[ -n "$(json "$tmp/first/results.json" 'd["meta"]["device"]["cpu"]')" ]] || fail "no device in meta"
[[ "$(json "$tmp/first/results.json" '"gpus" in d["meta"]["device"]')" == False ]] || fail "a CPU run named GPUs"
[[ -n "$(json "$tmp/first/peers/hf_llama/results.json" 'd["meta"]["device"]["name"]')" ]] ||
  fail "no device in the peer's meta"
grep -q "gpu: none" "$tmp/out1/llama_memory_time.log" || fail "the log does not say which device ran"
# Both writers' files match the published schema (reports/results.schema.json): bpbench's and the peer's.
"$BPBENCH" validate "$tmp/first/results.json" "$tmp/first/peers/hf_llama/results.json" >/dev/null ||
  fail "a results file does not match reports/results.schema.json"

# 2. A fresh run folder given the pack: everything kept, nothing measured again, the same cells.
export RUN_DIR="$tmp/run2"
bash "$root/scripts/gpu/10_llama_memory_time.sh" "$tmp/out2" "$pack" >/dev/null 2>&1 ||
  { cat "$tmp/out2/llama_memory_time.log" >&2; fail "the resumed step failed"; }
log2="$tmp/out2/llama_memory_time.log"
grep -q "continued from $pack" "$log2" || fail "the step did not say it continued from the pack"
grep -q "4 of 4 cells kept" "$log2" || fail "the resumed run measured cells again: $(grep -m3 cells "$log2")"
[[ "$(grep -c 'kept from' "$log2")" == 2 ]] || fail "the peer measured lengths again"
[[ "$(json "$RUN_DIR/llama_memory_time/results.json" 'json.dumps(d["cells"], sort_keys=True)')" == \
   "$(json "$tmp/first/results.json" 'json.dumps(d["cells"], sort_keys=True)')" ]] || fail "the kept cells differ"

# 3. A failed cell: the report is still made, and the step exits non-zero naming the failure.
status=0
bash "$root/scripts/gpu/13_table1_time.sh" "$tmp/out3" >/dev/null 2>&1 || status=$?
log3="$tmp/out3/table1_time.log"
((status != 0)) || fail "a table with a failed cell exited 0"
grep -q 'FAILED: table1_time: bpbench run' "$log3" || fail "the failure is not named: $(tail -5 "$log3")"
grep -q 'paper_gpu.sh: 1 failed' "$log3" || fail "no list of what failed at the end"
grep -qx report/report.md <<<"$(tar -tzf "$tmp/out3/table1_time.tar.gz")" || fail "no report after the failed cell"
mkdir -p "$tmp/third" && tar -xzf "$tmp/out3/table1_time.tar.gz" -C "$tmp/third"
[[ "$(json "$tmp/third/results.json" '",".join(c["status"] for c in d["cells"])')" == ok,error ]] ||
  fail "expected one ok and one error cell"

# 4. Stopped mid-search by the time limit, then finished from the pack.
status=0
STEP_SECONDS=4 bash "$root/scripts/gpu/20_table3_maxlen.sh" "$tmp/out4" >/dev/null 2>&1 || status=$?
((status == 124)) || { cat "$tmp/out4/table3_maxlen.log" >&2; fail "a 4 s search was not stopped (exit $status)"; }
grep -q 'NOT FINISHED' "$tmp/out4/table3_maxlen.log" || fail "the stopped step did not say so"
[[ -f "$tmp/out4/table3_maxlen.tar.gz" ]] || fail "the stopped step packed nothing"
export RUN_DIR="$tmp/run4"
bash "$root/scripts/gpu/20_table3_maxlen.sh" "$tmp/out5" "$tmp/out4/table3_maxlen.tar.gz" >/dev/null 2>&1 ||
  { cat "$tmp/out5/table3_maxlen.log" >&2; fail "the continued search failed"; }
[[ "$(json "$RUN_DIR/table3_maxlen/results.json" 'd["complete"]')" == True ]] || fail "the search did not finish"
[[ "$(json "$RUN_DIR/table3_maxlen/results.json" 'all(c["max_seq_len"] > 0 for c in d["cells"])')" == True ]] ||
  fail "a search found no length"
# 5. Files too large to carry back and forth come back beside the pack in parts of at most 15 MiB, which put
#    together give the files; results.json stays in the pack whatever its size.
mkdir -p "$tmp/big/timelines"
head -c $((20 << 20)) /dev/urandom >"$tmp/big/timelines/cell-000.pickle"
head -c 3000 /dev/urandom | base64 >"$tmp/big/results.json"
echo small >"$tmp/big/note.txt"
(
  # shellcheck source=/dev/null
  source "$root/scripts/gpu/lib.sh"
  # shellcheck disable=SC2034  # lib.sh's settings, read by pack_dir
  STEP=big STEP_OUT="$tmp/out6" PACK_FILE_LIMIT_BYTES=1024
  mkdir -p "$STEP_OUT"
  pack_dir "$tmp/big" >/dev/null
)
parts=("$tmp/out6"/big-large.tar.gz.part-*)
((${#parts[@]} == 2)) || fail "expected 2 parts for 20 MiB of incompressible data, got ${#parts[@]}"
for p in "${parts[@]}"; do (($(stat -c %s "$p") <= 15 << 20)) || fail "$p is over 15 MiB"; done
mkdir -p "$tmp/joined" && cat "${parts[@]}" | tar -xzf - -C "$tmp/joined"
cmp -s "$tmp/joined/timelines/cell-000.pickle" "$tmp/big/timelines/cell-000.pickle" || fail "the parts lost bytes"
[[ "$(tar -tzf "$tmp/out6/big.tar.gz" | sort | tr '\n' ' ')" == "note.txt results.json " ]] ||
  fail "the pack holds $(tar -tzf "$tmp/out6/big.tar.gz" | tr '\n' ' ')"

echo "dry_run: the step scripts packed, resumed, went on after a failed cell and finished a stopped search"
