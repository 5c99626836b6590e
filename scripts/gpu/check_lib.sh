# check_lib.sh: the clock, the stages and the pack of scripts/gpu/check.sh (sourced, not run; check.sh's header
# says what each stage does and which settings there are).
#
# State lives in CHECK_WORK (gpu-check/, git-ignored): status.tsv (a line per stage: name, state, seconds,
# note; the last line of a name counts), logs/NAME.log (each stage's whole output), runs/NAME/ (each check's
# results.json and report), device_tests.tsv. The pack is that folder; continue.sh unpacks it and goes on.

ALL_CHECKS="qwen3_8b llama_rows snapshot peers streambp_maxlen"

# Seconds each stage is expected to take on an H100 machine (16 cores). A stage is not started when less than
# this is left, so that a cheaper one after it still gets its turn. CHECK_EXPECTED_S="name=seconds ..."
# overrides any (the dry run's are tiny). The GPU numbers are predictions until a run replaces them
# (docs/gpu.md: how each was made).
expected() {
  local name="$1" pair
  for pair in ${CHECK_EXPECTED_S:-}; do
    [[ "${pair%%=*}" == "$name" ]] && { echo "${pair#*=}"; return; }
  done
  case "$name" in
    build) echo 150 ;;
    device_tests) echo 60 ;;
    qwen3_8b) echo 90 ;;
    llama_rows) echo 60 ;;
    snapshot) echo 25 ;;
    peers) echo 60 ;;
    streambp_maxlen) echo 240 ;;  # two probes near 150k tokens (the estimate's answer), partition 500
    *) echo 30 ;;
  esac
}

# A check or the device tests may use at most CHECK_CAP_FACTOR (3) times its expected seconds, so that one that
# hangs leaves the rest their turn; the build has no cap (nothing runs without it), the probe 20 s.
cap_of() { echo $(($(expected "$1") * ${CHECK_CAP_FACTOR:-3})); }

now_s() { date +%s; }
# Seconds a stage may still use: up to the deadline less the pack's reserve.
seconds_left() { echo $((CHECK_DEADLINE - PACK_RESERVE_S - $(now_s))); }

check_begin() {
  OUT="$1"
  CHECK_START="$(now_s)"
  export DEADLINE_S="${DEADLINE_S:-540}" PACK_RESERVE_S="${PACK_RESERVE_S:-20}"
  export CHECK_DEADLINE=$((CHECK_START + DEADLINE_S))
  export DEVICE="${DEVICE:-cuda}" PYTHON="${PYTHON:-python3}"
  export BUILD_DIR="${BUILD_DIR:-$check_root/build-gpu}"
  export CHECK_WORK="${CHECK_WORK:-$check_root/gpu-check}"
  export CHECK_SCENARIOS="${CHECK_SCENARIOS:-$check_root/scenarios/gpu_check}"
  export TEST_TIMEOUT_S="${TEST_TIMEOUT_S:-120}"
  export BPBENCH_BIN="${BPBENCH:-$BUILD_DIR/bpbench}"
  export DEVICE_TESTS_BIN="${DEVICE_TESTS:-$BUILD_DIR/tests/bpbench_device_tests}"
  mkdir -p "$OUT" "$CHECK_WORK/logs" "$CHECK_WORK/runs"
  OUT="$(cd "$OUT" && pwd)"
  rm -f "$OUT"/check.log "$OUT"/check-pack.tar.gz "$OUT"/check-large-*.tar.gz
  exec > >(tee -a "$OUT/check.log") 2>&1
  CHECK_TEE_PID=$!
  trap 'exec >&- 2>&-; wait "$CHECK_TEE_PID"' EXIT  # the log is whole on disk before the command returns
  echo "== check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): deadline ${DEADLINE_S} s (pack reserve" \
    "${PACK_RESERVE_S} s), device $DEVICE, work $CHECK_WORK"
  if [[ -n "${CHECK_FROM_PACK:-}" ]]; then
    [[ -f "$CHECK_FROM_PACK" ]] || { echo "check.sh: no pack at $CHECK_FROM_PACK (valid: a check-pack.tar.gz)"; exit 2; }
    tar -xzf "$CHECK_FROM_PACK" -C "$CHECK_WORK"
    echo "continued from $CHECK_FROM_PACK: done there: $(stages_in done)"
  fi
}

# record NAME STATE SECONDS NOTE: STATE is done, failed, not-finished, not-started or skipped.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$CHECK_WORK/status.tsv"
  printf '%-16s %-13s %5s s  %s\n' "$1" "$2" "$3" "$4"
}
# Every stage with its last state, "name state" a line, in the order the stages first ran.
last_states() {
  awk -F'\t' '!($1 in s) { order[++n] = $1 } { s[$1] = $2 } END { for (i = 1; i <= n; i++) print order[i], s[order[i]] }' \
    "$CHECK_WORK/status.tsv" 2>/dev/null
}
state_of() { last_states | awk -v n="$1" '$1 == n { print $2 }'; }
stages_in() { last_states | awk -v w=" $* " 'index(w, " " $2 " ") { printf "%s ", $1 }'; }  # STATE...

# run_stage NAME EXPECTED_S [CAP_S]: the stage under the time left, and at most CAP_S (check.sh --stage NAME in
# its own process group, so that timeout stops everything it started), its output into logs/NAME.log and the
# end of it here.
run_stage() {
  local name="$1" need="$2" cap="${3:-}" left rc=0 t0 took
  # A check the pack holds as done is not run again; the probe and the build are this machine's, always run.
  if [[ " $ALL_CHECKS " == *" $name "* && "$(state_of "$name")" == done ]]; then
    record "$name" skipped 0 "done in the pack"
    return 0
  fi
  left="$(seconds_left)"
  if ((left < need)); then
    record "$name" not-started 0 "needs about $need s, $left s left"
    return 0
  fi
  [[ -z "$cap" ]] || ((left <= cap)) || left="$cap"
  echo "-- $name (up to $left s; expected $need s) $(date -u +%H:%M:%S)"
  t0="$(now_s)"
  timeout --kill-after=5 "$left" bash "$check_root/scripts/gpu/check.sh" --stage "$name" \
    >>"$CHECK_WORK/logs/$name.log" 2>&1 </dev/null || rc=$?
  took=$(($(now_s) - t0))
  case "$name" in
    probe | build) cat "$CHECK_WORK/logs/$name.log" ;;  # whole: a configure failure must be readable here
    *) tail -n 25 "$CHECK_WORK/logs/$name.log" ;;
  esac
  case "$rc" in
    0) record "$name" done "$took" "" ;;
    124 | 137) record "$name" not-finished "$took" "stopped after its $left s" ;;
    *) record "$name" failed "$took" "exit $rc (logs/$name.log)" ;;
  esac
}

# The planted hang of the dry run: the named stage sleeps first, as a kernel that never returns would.
maybe_hang() { [[ "${CHECK_HANG_IN:-}" != "$1" ]] || sleep 100000; }

# ---- stages -----------------------------------------------------------------------------------------------

stage_probe() {
  maybe_hang probe
  bash "$check_root/scripts/gpu/probe.sh"
}

stage_build() {
  maybe_hang build
  # The Debian -dev packages a GPU machine lacks (GoogleTest, nlohmann-json, the gloo headers) come as .debs in
  # the carried .deps/debs (scripts/gpu_fetch_debs.sh), unpacked into .deps/prefix.
  local prefix="$check_root/.deps/prefix" t0 debs=()
  shopt -s nullglob
  debs=("$check_root"/.deps/debs/*.deb)
  mkdir -p "$prefix"
  for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$prefix"; done
  echo "build: ${#debs[@]} .debs unpacked into $prefix"
  t0="$(now_s)"
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -S "$check_root" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DBPBENCH_PYTHON="$(command -v "$PYTHON")" -DBPBENCH_BUILD_BENCHMARKS=OFF \
      -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake" || return 1
  fi
  echo "build: configured in $(($(now_s) - t0)) s"
  cmake --build "$BUILD_DIR" --target bpbench bpbench_device_tests -j "$(nproc)" || return 1
  echo "build: bpbench and the device tests in $(($(now_s) - t0)) s on $(nproc) cores"
  "$BUILD_DIR/bpbench" --version
}

# Each case of tests/device/ alone, with its own timeout; device_tests.tsv: name, outcome, seconds.
stage_device_tests() {
  maybe_hang device_tests
  local tsv="$CHECK_WORK/device_tests.tsv" names name rc t0 outcome left log
  names="$(bash "$check_root/tests/device/run_cases.sh" --list "$DEVICE_TESTS_BIN" | grep -E "${DEVICE_TESTS_ONLY:-.}")" ||
    return 1
  : >"$tsv"
  for name in $names; do
    left="$(seconds_left)"
    ((left > 5)) || { printf '%s\tnot-run\t0\n' "$name" >>"$tsv"; continue; }
    t0="$(now_s)"
    rc=0
    log="$CHECK_WORK/logs/device-${name//\//_}.log"  # parameterised names hold slashes
    timeout --kill-after=5 "$((left < TEST_TIMEOUT_S ? left : TEST_TIMEOUT_S))" "$DEVICE_TESTS_BIN" \
      --gtest_filter="$name" >"$log" 2>&1 || rc=$?
    if ((rc == 124 || rc == 137)); then
      outcome=timeout
    elif grep -q '^\[  SKIPPED \]' "$log"; then
      outcome=skipped
    elif ((rc == 0)); then
      outcome=passed
    else
      outcome=failed
    fi
    printf '%s\t%s\t%s\n' "$name" "$outcome" "$(($(now_s) - t0))" | tee -a "$tsv"
    [[ "$outcome" != passed ]] || rm -f "$log"  # failures and skips keep theirs
  done
  echo "device tests: $(cut -f2 "$tsv" | sort | uniq -c | awk '{ printf "%s %s, ", $1, $2 }')"
  ! grep -qP '\t(failed|timeout|not-run)\t' "$tsv"
}

# A scenario of CHECK_SCENARIOS into runs/NAME, resumed from what the pack holds, then its report.
run_check_scenario() {  # NAME SCENARIO_FILE
  local name="$1" scenario="$2" out="$CHECK_WORK/runs/$1" rc=0
  "$BPBENCH_BIN" run "$scenario" --out "$out" --resume || rc=$?
  "$BPBENCH_BIN" report "$out/results.json" --out "$out/report" >/dev/null || echo "$name: the report failed"
  return "$rc"
}

stage_qwen3_8b() { maybe_hang qwen3_8b; run_check_scenario qwen3_8b "$CHECK_SCENARIOS/qwen3_8b.json"; }
stage_llama_rows() { maybe_hang llama_rows; run_check_scenario llama_rows "$CHECK_SCENARIOS/llama_rows.json"; }

# The snapshot's pickle opened by PyTorch's own viewer code and rendered to HTML beside it; its trace's peak
# against the cell's peak_bytes, its frames against the cell's phases (scripts/memory_viz_check.py).
stage_snapshot() {
  maybe_hang snapshot
  run_check_scenario snapshot "$CHECK_SCENARIOS/snapshot.json" || return 1
  "$PYTHON" "$check_root/scripts/memory_viz_check.py" "$CHECK_WORK/runs/snapshot" --html
}

# The peers at one length beside bpbench's cells of qwen3_8b: transformers' checkpointing and the official
# StreamBP (installed from the carried .deps/wheels; a peer that cannot be installed is a failure, named).
stage_peers() {
  maybe_hang peers
  local out="$CHECK_WORK/runs/peers" failed=0 common
  export PYTHONPATH="$check_root/impls${PYTHONPATH:+:$PYTHONPATH}"  # the peers package: python -m peers.MODULE
  PYTHON="$(command -v "$PYTHON")" bash "$check_root/scripts/setup_peers.sh" || echo "peers: setup_peers.sh failed"
  common=(--model "${PEER_MODEL:-qwen3-8b}" --seq-len "${PEER_SEQ_LEN:-8192}" --dtype "${PEER_DTYPE:-bfloat16}"
    --device "$DEVICE" --warmup 1 --repeat 2 --bpbench "$BPBENCH_BIN" --resume)
  local peer
  for peer in ${CHECK_PEERS:-hf_checkpoint hf streambp_official}; do
    case "$peer" in
      hf_checkpoint) "$PYTHON" -m peers.hf_checkpoint "${common[@]}" --out "$out/$peer/results.json" || failed=1 ;;
      hf) "$PYTHON" -m peers.hf_checkpoint "${common[@]}" --no-checkpointing --out "$out/$peer/results.json" ||
        failed=1 ;;
      streambp_official) "$PYTHON" -m peers.streambp_official "${common[@]}" --partition 1024 \
        --logits-partition 1024 --out "$out/$peer/results.json" || failed=1 ;;
      *) echo "peers: unknown peer '$peer' in CHECK_PEERS (valid: hf_checkpoint, hf, streambp_official)"; failed=1 ;;
    esac
  done
  local inputs=("$CHECK_WORK/runs/qwen3_8b/results.json")
  for f in "$out"/*/results.json; do [[ -f "$f" ]] && inputs+=("$f"); done
  [[ -f "${inputs[0]}" ]] || inputs=("${inputs[@]:1}")
  ((${#inputs[@]} == 0)) || "$BPBENCH_BIN" report "${inputs[@]}" --out "$out/report" >/dev/null ||
    echo "peers: the report failed"
  return "$failed"
}

# streambp's longest Qwen3-8B length here: the estimate's answer within the scenario's budget, then two probes,
# at that length and a step above it (the first should fit, the second should not).
stage_streambp_maxlen() {
  maybe_hang streambp_maxlen
  local scenario="$CHECK_WORK/runs/streambp_maxlen.json"
  "$PYTHON" "$check_root/scripts/gpu/maxlen_probes.py" "$CHECK_SCENARIOS/streambp_maxlen.json" "$BPBENCH_BIN" \
    "$scenario" || return 1
  run_check_scenario streambp_maxlen "$scenario"
}

# ---- pack -------------------------------------------------------------------------------------------------

# OUT/check-pack.tar.gz: every file of CHECK_WORK up to 2 MiB and every results.json whatever its size (what
# continue.sh resumes from); the larger files (memory_viz pickles first, then traces and timelines) into at
# most 6 more archives, OUT/check-large-N.tar.gz, of at most 15 MiB each, 60 MiB with the rest; what does not
# fit is named in the log and in the pack's left_out.txt. The device tool returns 8 files of at most 16 MiB.
check_pack() {
  local small_limit=$((2 << 20)) part_limit=$((15 << 20)) total_limit=$((60 << 20)) max_parts=6
  timeout 15 "$PYTHON" "$check_root/scripts/gpu/check_summary.py" "$CHECK_WORK" ||
    echo "check.sh: the summary failed (its numbers are in runs/*/results.json)"
  local large listing
  large="$(cd "$CHECK_WORK" && find . -type f -size +"$((small_limit / 1024))"k ! -name results.json ! -name left_out.txt \
    -printf '%s %P\n' | awk '{ p = ($2 ~ /\.pickle$/) ? 0 : ($2 ~ /trace/) ? 2 : 1; print p, $1, $2 }' |
    sort -k1,1n -k2,2n | cut -d' ' -f2-)"
  : >"$CHECK_WORK/left_out.txt"
  local parts=0 used=0 part_bytes=0 part_files=() size path
  flush_part() {
    ((${#part_files[@]})) || return 0
    parts=$((parts + 1))
    (cd "$CHECK_WORK" && tar -czf "$OUT/check-large-$parts.tar.gz" "${part_files[@]}")
    used=$((used + $(stat -c %s "$OUT/check-large-$parts.tar.gz")))
    part_files=()
    part_bytes=0
  }
  while read -r size path; do
    [[ -n "$path" ]] || continue
    if ((part_bytes + size > part_limit)); then flush_part; fi
    if ((size > part_limit || parts >= max_parts || used + part_bytes + size > total_limit - 4 * small_limit)); then
      echo "$path $size" >>"$CHECK_WORK/left_out.txt"
      continue
    fi
    part_files+=("$path")
    part_bytes=$((part_bytes + size))
  done <<<"$large"
  ((parts < max_parts)) && flush_part
  listing="$(cd "$CHECK_WORK" && find . -type f \( -size -"$((small_limit / 1024 + 1))"k -o -name results.json \) -printf '%P\n' | LC_ALL=C sort)"
  (cd "$CHECK_WORK" && tar -czf "$OUT/check-pack.tar.gz" -T - <<<"$listing")
  echo "== check.sh: $(($(now_s) - CHECK_START)) s of $DEADLINE_S"
  echo "ran: $(stages_in done)"
  echo "did not finish or failed: $(last_states | awk '$2 == "failed" || $2 == "not-finished" { printf "%s (%s) ", $1, $2 }')"
  echo "not started: $(stages_in not-started)"
  if [[ -s "$CHECK_WORK/left_out.txt" ]]; then
    echo "left out (too large to come back): $(tr '\n' ' ' <"$CHECK_WORK/left_out.txt")"
  fi
  echo "pack: check-pack.tar.gz ($(du -k "$OUT/check-pack.tar.gz" | cut -f1) KiB) and $parts large part(s);" \
    "next: bash scripts/gpu/continue.sh OUT gpu-packs/check-pack.tar.gz"
}
