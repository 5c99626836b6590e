#!/usr/bin/env bash
# bpbench beside the peers on the CPU, one report: scenarios/cpu_peers.json, then every peer of reports/peers/ at
# its lengths (small, float32; each peer process under bpbench's tracking CPU allocator, so peaks are counted
# alike), then `bpbench report` of all of them, whose "bpbench streambp beside the peers" section gives the
# ratios. The GPU-only peers (Liger, cut-cross-entropy, transformers' offload) write skipped cells with the reason.
#   OUT_DIR   where everything goes (default out/cpu_peers): results.json, peers/NAME/results.json, report/
#   RESUME=1  keep what a stopped run measured (bpbench run --resume, the peers' --resume)
# Exit status: 0, or 1 naming what failed (every other step still runs).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT_DIR:-$root/out/cpu_peers}"
bpbench="${BPBENCH:-$root/build/bpbench}"
python="${PYTHON:-$root/.venv/bin/python}"
resume=(--force)  # a run starts anew unless RESUME=1: the earlier results.json is kept beside
[[ "${RESUME:-0}" == 1 ]] && resume=(--resume)
lengths=(2048 8192)  # scenarios/cpu_peers.json's seq_len
repeat=5             # and its measure.time
failed=()

"$bpbench" run "$root/scenarios/cpu_peers.json" --out "$out" "${resume[@]}" || failed+=("bpbench run")
peer() {  # NAME SCRIPT [OPTIONS...]: reports/peers/SCRIPT.py into OUT_DIR/peers/NAME
  local name="$1" script="$2"
  shift 2
  echo "== peer $name" >&2
  "$python" "$root/reports/peers/$script.py" --model small --dtype float32 --device cpu --seq-len "${lengths[@]}" \
    --warmup 1 --repeat "$repeat" --bpbench "$bpbench" --out "$out/peers/$name/results.json" "${resume[@]}" "$@" ||
    failed+=("peer $name")
}
peer hf hf_checkpoint --no-checkpointing
peer hf_checkpoint hf_checkpoint
peer hf_checkpoint_offload hf_checkpoint --offload
peer streambp_official streambp_official --partition 512 --logits-partition 512  # streambp's partitions
peer alst_tiled alst_tiled
peer liger_flce liger_flce
peer cce cce
"$bpbench" report "$out" "$out"/peers/* --out "$out/report" || failed+=("report")
if ((${#failed[@]})); then
  echo "cpu_peers.sh: failed: ${failed[*]} (the rest ran; see above)" >&2
  exit 1
fi
echo "cpu_peers.sh: report in $out/report/report.md" >&2
