#!/usr/bin/env bash
# The StreamBP paper's tables on your GPU: every scenarios/h100_*.json, Hugging Face (transformers, SDPA,
# gradient checkpointing) measured beside the Llama-3.1-8B and Qwen3-8B cells, and one report per table. The
# `peers` table puts bpbench's Qwen3-8B cells beside every peer of reports/peers/ (the official StreamBP, Hugging
# Face checkpointing, Liger FLCE and cut-cross-entropy; scripts/setup_peers.sh installs them).
#
#   scripts/paper_gpu.sh [OUT_DIR]          (default reports/results/h100)
#   ONLY="llama_memory_time table7_grad_error" scripts/paper_gpu.sh   # a subset, by scenario name less h100_
#
# Needs a built bpbench (scripts/build.sh, or scripts/gpu_build_and_test.sh on a GPU machine; BPBENCH= to
# point elsewhere) and a python with torch and transformers (PYTHON=, default python3). The scenarios' budget
# is an H100 80GB's (80e9 bytes); on another GPU edit their budget_bytes (memory less the reserve their
# descriptions state) and pass the same figure as BUDGET_BYTES for the peer. The max-length searches run last:
# they take hours (every probe a fresh process).
#
# Resumable by default: every scenario runs with `bpbench run --resume` and every peer with --resume, so a
# second call (after a preempted machine, a killed shell, a 10-minute device call) keeps every finished cell,
# every finished probe of a max-length search and every finished peer length, and runs only the rest. A
# results file of another build or GPU is refused rather than mixed in. RESUME=0 measures everything anew.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/reports/results/h100}"
bpbench="${BPBENCH:-$root/build/bpbench}"
python="${PYTHON:-python3}"
budget="${BUDGET_BYTES:-80000000000}"
resume=()
[[ "${RESUME:-1}" == 0 ]] || resume=(--resume)
all="llama_memory_time gemma_memory peers table1_time fig5_partition table7_grad_error streambp_trace
     offload_time table3_maxlen_dpo_grpo table3_maxlen_32b_lora table3_maxlen offload_maxlen"
# The training runs need more than an H100's 80 GB (float32 masters and AdamW state of Qwen3-4B): on an H200,
# ONLY="train_stability train_stability_dpo_grpo", after .venv/bin/python scripts/text_data.py --seq-len 1024
# on a machine with the network (it reads Debian's python3.11-doc) and .data/ carried to the GPU machine.
[[ -x "$bpbench" ]] || { echo "paper_gpu.sh: no bpbench at $bpbench (scripts/build.sh first, or BPBENCH=)" >&2; exit 2; }
mkdir -p "$out"

peer() {  # NAME MODEL LENGTHS...: the Hugging Face side of a table
  local name="$1" model="$2"
  shift 2
  run_peer hf_checkpoint "$name" --model "$model" --seq-len "$@"
}

run_peer() {  # SCRIPT NAME OPTIONS...: reports/peers/SCRIPT.py into OUT/NAME
  local script="$1" name="$2"
  shift 2
  "$python" "$root/reports/peers/$script.py" "$@" --budget-bytes "$budget" --bpbench "$bpbench" \
    --out "$out/$name/results.json" "${resume[@]}"
}

for s in ${ONLY:-$all}; do
  scenario="$root/scenarios/h100_$s.json"
  [[ -f "$scenario" ]] || { echo "paper_gpu.sh: no scenario $scenario (valid: $all)" >&2; exit 2; }
  if [[ "$s" == train_stability ]] && [[ ! -f "$root/.data/python_docs_V8192_T1024.json" ]]; then
    echo "paper_gpu.sh: train_stability reads .data/python_docs_V8192_T1024.json: make it with" \
      ".venv/bin/python scripts/text_data.py --seq-len 1024 where the network is" >&2
    exit 2
  fi
  "$bpbench" run "$scenario" --out "$out/$s" "${resume[@]}"
  case "$s" in
    llama_memory_time)
      peer hf_llama llama3.1-8b 3072 6144 9216 18432
      "$bpbench" report "$out/$s" "$out/hf_llama" --out "$out/$s/report" ;;
    gemma_memory)
      peer hf_gemma gemma3-1b 3072 6144 9216 18432
      "$bpbench" report "$out/$s" "$out/hf_gemma" --out "$out/$s/report" ;;
    peers)
      lengths=(8192 16384 32768)  # scenarios/h100_peers.json's
      run_peer streambp_official streambp_official --model qwen3-8b --seq-len "${lengths[@]}" \
        --partition 1024 --logits-partition 1024
      run_peer hf_checkpoint hf_peers --model qwen3-8b --seq-len "${lengths[@]}"
      run_peer liger_flce liger_flce --model qwen3-8b --seq-len "${lengths[@]}"
      run_peer cce cce --model qwen3-8b --seq-len "${lengths[@]}"
      "$bpbench" report "$out/$s" "$out/streambp_official" "$out/hf_peers" "$out/liger_flce" "$out/cce" \
        --out "$out/$s/report" ;;
    table3_maxlen)
      # Hugging Face's longest Qwen3-8B step, bracketed: the paper's checkpointing reaches 20k.
      peer hf_qwen3_8b qwen3-8b 8192 16384 20480 24576
      "$bpbench" report "$out/$s" "$out/hf_qwen3_8b" --out "$out/$s/report" ;;
    *)
      "$bpbench" report "$out/$s" --out "$out/$s/report" ;;
  esac
done
echo "paper_gpu.sh: results and reports under $out"
