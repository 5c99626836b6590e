#!/usr/bin/env bash
# bpbench beside the peers on the CPU, one report: scenarios/cpu_peers.json, then every peer of the CPU table of
# impls/peers/registry.py (`python -m peers runs cpu`) at its lengths (small, float32; each peer process under
# bpbench's tracking CPU allocator, so peaks are counted alike), then `bpbench report` of all of them, whose
# "bpbench streambp beside the peers" section gives the ratios. The GPU-only peers (Liger, cut-cross-entropy,
# transformers' offload) write skipped cells with the reason.
#   OUT_DIR   where everything goes (default out/cpu_peers): results.json, peers/NAME/results.json, report/
#   RESUME=1  keep what a stopped run measured (bpbench run --resume, the peers' --resume)
# Exit status: 0, or 1 naming what failed (every other step still runs).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT_DIR:-$root/out/cpu_peers}"
bpbench="${BPBENCH:-$root/build/bpbench}"
python="${PYTHON:-$root/.venv/bin/python}"
export PYTHONPATH="$root/impls${PYTHONPATH:+:$PYTHONPATH}"  # the peers package: python -m peers.MODULE
resume=(--force)  # a run starts anew unless RESUME=1: the earlier results.json is kept beside
[[ "${RESUME:-0}" == 1 ]] && resume=(--resume)
lengths=(2048 8192)  # scenarios/cpu_peers.json's seq_len
repeat=5             # and its measure.time
failed=()

mapfile -t runs < <("$python" -m peers runs cpu) && ((${#runs[@]})) ||
  { echo "cpu_peers.sh: $python -m peers runs cpu failed (PYTHONPATH=$PYTHONPATH)" >&2; exit 2; }

"$bpbench" run "$root/scenarios/cpu_peers.json" --out "$out" "${resume[@]}" || failed+=("bpbench run")
peer() {  # NAME MODULE [OPTIONS...]: python -m peers.MODULE into OUT_DIR/peers/NAME
  local name="$1" module="$2"
  shift 2
  echo "== peer $name" >&2
  "$python" -m "peers.$module" --model small --dtype float32 --device cpu --seq-len "${lengths[@]}" \
    --warmup 1 --repeat "$repeat" --bpbench "$bpbench" --out "$out/peers/$name/results.json" "${resume[@]}" "$@" ||
    failed+=("peer $name")
}
for run in "${runs[@]}"; do
  read -r name module options <<<"$run"  # DIR MODULE [OPTIONS...], from impls/peers/registry.py
  extra=()
  [[ "$name" == streambp_official ]] && extra=(--partition 512 --logits-partition 512)  # streambp's partitions
  # shellcheck disable=SC2086  # the registry's options are words
  peer "$name" "$module" $options "${extra[@]}"
done
"$bpbench" report "$out" "$out"/peers/* --out "$out/report" || failed+=("report")
if ((${#failed[@]})); then
  echo "cpu_peers.sh: failed: ${failed[*]} (the rest ran; see above)" >&2
  exit 1
fi
echo "cpu_peers.sh: report in $out/report/report.md" >&2
