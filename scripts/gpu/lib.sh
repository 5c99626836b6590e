#!/usr/bin/env bash
# lib.sh: what the GPU step scripts share (sourced, not run). A step is one device-tool command, well inside
# its 10 minutes: it prints what it did and packs what it made into a few files under OUT (its first
# argument), which the device tool brings back. Given last time's pack it continues where that one stopped.
#
#   bash scripts/gpu/NN_NAME.sh OUT [PACK]
#
# OUT gets NAME.log and NAME.tar.gz (NAME: 02_tests, or the table's name for a table step), and for files too
# large to carry back and forth (over PACK_FILE_LIMIT_BYTES: memory_viz pickles, CUPTI traces) NAME-large.tar.gz
# in parts of at most 15 MiB (NAME-large.tar.gz.part-00, ...; `cat` them together), which nothing resumes from.
# PACK: last time's OUT/NAME.tar.gz; default $PACKS/NAME.tar.gz when it exists (PACKS: gpu-packs/ at the
# repository root, git-ignored: copy the NAME.tar.gz a step brought back there, and carry "gpu-packs").
#
# Settings (environment): BUILD_DIR (build-gpu: where 01_build.sh builds and paper_gpu.sh reads bpbench),
# RUN_DIR (reports/results/h100: the tables' folders), STEP_SECONDS (480: a step stops its work after this
# long, packs what is finished, and says to call it again), PYTHON (python3: the machine's torch).
set -euo pipefail

gpu_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export BUILD_DIR="${BUILD_DIR:-$gpu_root/build-gpu}"
export RUN_DIR="${RUN_DIR:-$gpu_root/reports/results/h100}"
export PYTHON="${PYTHON:-python3}"
PACKS="${PACKS:-$gpu_root/gpu-packs}"
STEP_SECONDS="${STEP_SECONDS:-480}"
# Files above this are not carried back and forth in the pack but come back in NAME-large.tar.gz parts.
PACK_FILE_LIMIT_BYTES="${PACK_FILE_LIMIT_BYTES:-4194304}"

# step_begin NAME OUT [PACK]: sets STEP, STEP_OUT, STEP_PACK (last time's pack, or "") and starts the log.
step_begin() {
  STEP="$1"
  STEP_OUT="${2:?usage: bash scripts/gpu/$1.sh OUT [PACK] (OUT: the folder the device tool brings back)}"
  STEP_PACK="${3:-}"
  [[ -n "$STEP_PACK" || ! -f "$PACKS/$STEP.tar.gz" ]] || STEP_PACK="$PACKS/$STEP.tar.gz"
  if [[ -n "$STEP_PACK" && ! -f "$STEP_PACK" ]]; then
    echo "$STEP: no pack at $STEP_PACK (valid: a $STEP.tar.gz this step wrote, or none)" >&2
    exit 2
  fi
  mkdir -p "$STEP_OUT"
  STEP_OUT="$(cd "$STEP_OUT" && pwd)"
  exec > >(tee -a "$STEP_OUT/$STEP.log") 2>&1
  STEP_TEE_PID=$!
  # The log's last lines ("NOT FINISHED") are in the file before the step's exit returns.
  trap 'exec >&- 2>&-; wait "$STEP_TEE_PID"' EXIT
  echo "== $STEP, $(date -u +%Y-%m-%dT%H:%M:%SZ), on $(hostname)"
  gpu_summary
}

# One line naming the GPU and the software, or the CPU on a dry run.
gpu_summary() {
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /'
  else
    echo "gpu: none ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores)"
  fi
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null ||
    echo "torch: $PYTHON does not import torch"
}

# unpack_into DIR: last time's pack (if any) into DIR, which it was packed from.
unpack_into() {
  local dir="$1"
  mkdir -p "$dir"
  [[ -n "$STEP_PACK" ]] || { echo "$STEP: no earlier pack: starting afresh"; return 0; }
  tar -xzf "$STEP_PACK" -C "$dir"
  echo "$STEP: continued from $STEP_PACK ($(tar -tzf "$STEP_PACK" | grep -vc '/$') files into $dir)"
}

# pack_dir DIR: DIR's files into STEP_OUT/STEP.tar.gz (what the next call resumes from: carried back, so
# small), but for those over PACK_FILE_LIMIT_BYTES, which go into STEP_OUT/STEP-large.tar.gz in parts of at most
# 15 MiB (the device tool returns 8 files of at most 16 MiB a call: the log and the pack leave room for 6 parts).
# Whatever does not fit in 6 parts stays on the machine, named in the log and in DIR/left_out.txt.
pack_dir() {
  local dir="$1" large part_bytes=$((15 << 20)) max_parts=6
  # results.json files always go in the pack, whatever their size: the next call resumes from them.
  large="$(cd "$dir" && find . -type f -size +"$((PACK_FILE_LIMIT_BYTES / 1024))"k ! -name results.json \
    -printf '%P\n' | LC_ALL=C sort)"
  rm -f "$dir/left_out.txt" "$STEP_OUT/$STEP"-large.tar.gz.part-*
  if [[ -n "$large" ]]; then
    (cd "$dir" && tar -czf - -T - <<<"$large") | split -b "$part_bytes" -d -a 2 - "$STEP_OUT/$STEP-large.tar.gz.part-"
    local parts=("$STEP_OUT/$STEP"-large.tar.gz.part-*)
    if ((${#parts[@]} > max_parts)); then
      echo "$STEP: the large files need more than $max_parts parts of 15 MiB, so none came back; they stay in $dir:"
      (cd "$dir" && xargs -d '\n' du -b <<<"$large") | tee "$dir/left_out.txt" | sed 's/^/  /'
      rm -f "${parts[@]}"
    else
      echo "$STEP: large files (over $PACK_FILE_LIMIT_BYTES bytes) in ${#parts[@]} part(s) of $STEP-large.tar.gz:" \
        "$(tr '\n' ' ' <<<"$large")"
    fi
  fi
  (cd "$dir" && find . -type f \( -size -"$((PACK_FILE_LIMIT_BYTES / 1024 + 1))"k -o -name results.json \) \
    -printf '%P\n' | LC_ALL=C sort | tar -czf "$STEP_OUT/$STEP.tar.gz" -T -)
  echo "$STEP: packed $STEP_OUT/$STEP.tar.gz ($(du -k "$STEP_OUT/$STEP.tar.gz" | cut -f1) KiB) from $dir"
  if (($(stat -c %s "$STEP_OUT/$STEP.tar.gz") > part_bytes)); then
    echo "$STEP: warning: the pack is over 15 MiB: the device tool may not bring it back (lower PACK_FILE_LIMIT_BYTES)"
  fi
}

# with_time_limit COMMAND...: runs it, stopped after STEP_SECONDS (SIGTERM to its whole process group, so
# child probes and peers stop too). Returns its status; 124 when stopped.
with_time_limit() {
  timeout --kill-after=20 "$STEP_SECONDS" "$@"
}

# table_step TABLE OUT [PACK]: one table of scripts/paper_gpu.sh, resumed from its pack, packed again.
table_step() {
  local table="$1"
  shift
  step_begin "$table" "$@"
  unpack_into "$RUN_DIR/$table"
  local status=0
  ONLY="$table" with_time_limit bash "$gpu_root/scripts/paper_gpu.sh" "$RUN_DIR" || status=$?
  echo  # a progress line cut by the time limit has no newline
  pack_dir "$RUN_DIR/$table"
  case "$status" in
    0) echo "$STEP: done" ;;
    124 | 137) echo "$STEP: NOT FINISHED: stopped after $STEP_SECONDS s; call it again with $STEP.tar.gz in gpu-packs/ (it resumes)" ;;
    *) echo "$STEP: finished with failures (exit $status): see the FAILED lines above" ;;
  esac
  return "$status"
}
