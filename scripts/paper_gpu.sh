#!/usr/bin/env bash
# The StreamBP paper's tables on your GPU: every scenarios/h100_*.json, Hugging Face (transformers, SDPA,
# gradient checkpointing) measured beside the Llama-3.1-8B, Gemma 3-1B and Qwen3-8B cells, and one report per
# table. The `peers` table puts bpbench's Qwen3-8B cells beside every peer of the GPU table of
# impls/peers/registry.py (`python -m peers runs cuda`: the official StreamBP, Hugging Face checkpointing with and
# without its offload, Liger FLCE, cut-cross-entropy and ALST's tiled MLP and loss; scripts/setup_peers.sh
# installs them).
#
#   scripts/paper_gpu.sh [OUT_DIR]          (default reports/results/h100)
#   ONLY="llama_memory_time table7_grad_error" scripts/paper_gpu.sh   # a subset, by scenario name less h100_
#
# Each table writes one folder, OUT_DIR/TABLE: bpbench's results.json (and timelines), its peers' results
# under OUT_DIR/TABLE/peers/NAME/, and the report under OUT_DIR/TABLE/report/. This is the plan for a GPU
# machine you hold for hours; the lent machines of this project (15 minutes in all) run scripts/gpu/check.sh.
#
# Needs a built bpbench: BUILD_DIR/bpbench (BUILD_DIR: build-gpu, where scripts/gpu/check.sh builds on a
# GPU machine, else build/, where scripts/build.sh builds; BPBENCH= points elsewhere) and a python with torch
# and transformers (PYTHON=, default python3). The scenarios' budget is an H100 80GB's (80e9 bytes); on another
# GPU edit their budget_bytes (memory less the reserve their descriptions state) and pass the same figure as
# BUDGET_BYTES for the peers. The max-length searches run last: they take hours (every probe a fresh process).
#
# A failed cell, probe or peer never stops the rest: each table goes on to its report and its peers, the next
# table runs, and the script exits 1 at the end with the list of what failed (bpbench exits non-zero when a
# cell has status "error"; a peer when a length has). Out-of-memory cells are results, not failures.
#
# Resumable by default: every scenario runs with `bpbench run --resume` and every peer with --resume, so a
# second call (after a preempted machine, a killed shell, a 10-minute device call) keeps every finished cell,
# every finished probe of a max-length search and every finished peer length, and runs only the rest. A
# results file of another build or GPU is refused rather than mixed in. RESUME=0 measures everything anew;
# RESUME=any keeps the matching cells of another build (bpbench run --resume-any, which records in
# meta.resumed which build measured them): for a later session's new commit, when the change cannot move the
# kept cells' numbers.
#
# DEVICE=cpu is a dry run of the same flow: SCENARIOS names the scenario files' prefix (default
# scenarios/h100_) and the peers run the tiny preset on the CPU, in float32, at 16 and 33 tokens. CI no longer
# runs it (the step scripts it was tested through are gone); CI dry-runs scripts/gpu/check.sh, the lent GPUs' plan.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/reports/results/h100}"
build_dir="${BUILD_DIR:-}"
if [[ -z "$build_dir" ]]; then
  if [[ -x "$root/build-gpu/bpbench" ]]; then build_dir="$root/build-gpu"; else build_dir="$root/build"; fi
fi
bpbench="${BPBENCH:-$build_dir/bpbench}"
python="${PYTHON:-python3}"
export PYTHONPATH="$root/impls${PYTHONPATH:+:$PYTHONPATH}"  # the peers package: python -m peers.MODULE
budget="${BUDGET_BYTES:-80000000000}"
device="${DEVICE:-cuda}"
scenarios="${SCENARIOS:-$root/scenarios/h100_}"
case "${RESUME:-1}" in
  0) resume=(--force) peer_resume=() ;;  # the earlier results.json kept beside (bpbench run --force)
  any) resume=(--resume-any) peer_resume=(--resume) ;;
  *) resume=(--resume) peer_resume=(--resume) ;;
esac
all="llama_memory_time gemma_memory peers table1_time fig5_partition table7_grad_error streambp_trace
     offload_time table3_maxlen_dpo_grpo table3_maxlen_32b_lora table3_maxlen offload_maxlen"
# The training runs need more than an H100's 80 GB (float32 masters and AdamW state of Qwen3-4B): on an H200,
# ONLY="train_stability train_stability_dpo_grpo", with .data/ carried to the GPU machine (scripts/setup.sh makes
# it where the network is).
[[ -x "$bpbench" ]] || {
  echo "paper_gpu.sh: no bpbench at $bpbench (scripts/build.sh first, or BPBENCH=)" >&2
  exit 2
}
[[ "$device" == cuda || "$device" == cpu ]] || { echo "paper_gpu.sh: DEVICE=$device (valid: cuda, cpu)" >&2; exit 2; }
mapfile -t peer_runs < <("$python" -m peers runs cuda) && ((${#peer_runs[@]})) || {
  echo "paper_gpu.sh: $python -m peers runs cuda failed (PYTHONPATH=$PYTHONPATH)" >&2
  exit 2
}
mkdir -p "$out"

failed=()
attempt() {  # WHAT COMMAND...: runs it; a failure is listed at the end, and the script goes on
  local what="$1"
  shift
  "$@" || { echo "paper_gpu.sh: FAILED: $what (exit $?)" >&2; failed+=("$what"); }
}

# A peer's model and lengths as the table names them; on the CPU dry run, the tiny preset at 16 and 33 tokens.
peer_args() {  # MODEL LENGTHS...
  local model="$1"
  shift
  if [[ "$device" == cpu ]]; then
    echo --model tiny --seq-len 16 33 --device cpu --dtype float32 --warmup 0 --repeat 1
  else
    echo --model "$model" --seq-len "$@" --budget-bytes "$budget"
  fi
}

run_peer() {  # TABLE MODULE NAME MODEL LENGTHS... [-- OPTIONS...]: python -m peers.MODULE into TABLE/peers/NAME
  local table="$1" module="$2" name="$3" model="$4"
  shift 4
  local lengths=() extra=()
  while (($#)) && [[ "$1" != -- ]]; do lengths+=("$1"); shift; done
  (($#)) && shift && extra=("$@")
  # shellcheck disable=SC2046  # peer_args' words are options
  attempt "$table: peer $name" "$python" -m "peers.$module" $(peer_args "$model" "${lengths[@]}") \
    "${extra[@]}" --bpbench "$bpbench" --out "$out/$table/peers/$name/results.json" "${peer_resume[@]}"
}

report() {  # TABLE [PEER NAMES...]: one report of the table's cells beside its peers'
  local table="$1"
  shift
  local inputs=("$out/$table")
  for name in "$@"; do
    [[ -f "$out/$table/peers/$name/results.json" ]] && inputs+=("$out/$table/peers/$name")
  done
  attempt "$table: report" "$bpbench" report "${inputs[@]}" --out "$out/$table/report"
}

for s in ${ONLY:-$all}; do
  scenario="$scenarios$s.json"
  if [[ ! -f "$scenario" ]]; then
    echo "paper_gpu.sh: no scenario $scenario (valid: $all)" >&2
    failed+=("$s: no scenario")
    continue
  fi
  if [[ "$s" == train_stability* ]] && [[ ! -f "$root/.data/python_docs_V8192_T1024.json" ]]; then
    echo "paper_gpu.sh: $s reads .data/python_docs_V8192_T1024.json: make it with scripts/setup.sh where the" \
      "network is, and carry .data/" >&2
    failed+=("$s: no .data")
    continue
  fi
  echo "== $s ($(date -u +%H:%M:%S))" >&2
  attempt "$s: bpbench run" "$bpbench" run "$scenario" --out "$out/$s" "${resume[@]}"
  case "$s" in
    llama_memory_time)
      run_peer "$s" hf_checkpoint hf_llama llama3.1-8b 3072 6144 9216 18432
      report "$s" hf_llama ;;
    gemma_memory)
      run_peer "$s" hf_checkpoint hf_gemma gemma3-1b 3072 6144 9216 18432
      report "$s" hf_gemma ;;
    peers)
      lengths=(8192 16384 32768)  # scenarios/h100_peers.json's
      names=()
      for run in "${peer_runs[@]}"; do
        read -r name module options <<<"$run"  # DIR MODULE [OPTIONS...], from impls/peers/registry.py
        extra=()
        # streambp's partition and logits partition in scenarios/h100_peers.json
        [[ "$name" == streambp_official ]] && extra=(--partition 1024 --logits-partition 1024)
        # shellcheck disable=SC2086  # the registry's options are words
        run_peer "$s" "$module" "$name" qwen3-8b "${lengths[@]}" -- $options "${extra[@]}"
        names+=("$name")
      done
      report "$s" "${names[@]}" ;;
    table3_maxlen)
      # Hugging Face's longest Qwen3-8B step, bracketed: the paper's checkpointing reaches 20k.
      run_peer "$s" hf_checkpoint hf_qwen3_8b qwen3-8b 8192 16384 20480 24576
      report "$s" hf_qwen3_8b ;;
    *)
      report "$s" ;;
  esac
done
echo "paper_gpu.sh: results and reports under $out" >&2
if ((${#failed[@]})); then
  echo "paper_gpu.sh: ${#failed[@]} failed: $(printf '%s; ' "${failed[@]}")" >&2
  exit 1
fi
