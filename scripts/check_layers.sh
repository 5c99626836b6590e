#!/usr/bin/env bash
# The layers only look down (ctest runs this as "layers"). Bottom to top:
#   0 profiles/            recorders: tracking allocator, memory categories, timelines, NVTX, traces
#   1 harness/model/       config and presets, RoPE, ops, the model, the HF loader, safetensors
#   2 harness/objectives/  batches, data files, SFT / DPO / GRPO losses
#   3 impls/interface/     the interface every strategy implements (strategy.h) and the registry's declarations
#   4 impls/machinery/     what the strategies share (communicator, distributed step, layerwise checkpoints,
#                          offload, sequence parallel, the ring): the interface and below, never a strategy
#   5 impls/               the backward strategies and their registry
#   6 harness/estimate/    the memory and FLOPs estimate of a cell, and its inverse (the longest length)
#   7 harness/run/         scenario -> cells, running a cell under a recorder, max-length, results
#   8 reports/             results.json -> report.md and figures, compare
#   9 harness/cli/         the `bpbench` command line
# A file may include its own layer and any layer below it, never one above. A folder inside another layer's
# (impls/machinery/ in impls/) is a layer of its own, listed first: a path takes the first layer it lies in. Every source file under those
# folders must belong to a layer (a new folder gets a rank here first), and no source includes tests/. The
# list must equal CMakeLists.txt's BPBENCH_LAYERS, which compiles the same folders.
# Usage: bash scripts/check_layers.sh [ROOT]   (ROOT defaults to the repository; tests point it elsewhere)
set -uo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
layers=(profiles harness/model harness/objectives impls/interface impls/machinery impls harness/estimate harness/run
  reports harness/cli)

# rank_of PATH: sets `rank` to the rank of the layer PATH lies in, or to nothing (no subshell: the script
# asks once per #include, about a thousand times)
rank_of() {
  local path="$1" i
  rank=""
  for i in "${!layers[@]}"; do
    case "$path" in "${layers[$i]}"/*) rank="$i"; return ;; esac
  done
  case "$path" in tests/*) rank="${#layers[@]}" ;; esac
}
include_re='^[^#]*#[[:space:]]*include[[:space:]]*[<"]([^">]+)[">]'

violations=0
checked=0
# CMakeLists.txt compiles the layers it lists; a layer missing there would not be built, one extra not checked.
if [ -f "$root/CMakeLists.txt" ]; then
  cmake_layers=$(sed -nE 's/^set\(BPBENCH_LAYERS (.*)\)$/\1/p' "$root/CMakeLists.txt")
  if [ "$cmake_layers" != "${layers[*]}" ]; then
    echo "layers: FAIL: CMakeLists.txt's BPBENCH_LAYERS ($cmake_layers) differ from this script's (${layers[*]})"
    violations=$((violations + 1))
  fi
fi
while IFS= read -r file; do
  rel="${file#"$root"/}"
  rank_of "$rel"
  own="$rank"
  if [ -z "$own" ]; then
    echo "layers: FAIL: $rel is in no layer (choices: ${layers[*]})"
    violations=$((violations + 1))
    continue
  fi
  checked=$((checked + 1))
  while IFS= read -r hit; do
    line="${hit%%:*}"
    [[ "${hit#*:}" =~ $include_re ]] || continue
    target="${BASH_REMATCH[1]}"
    rank_of "$target"
    target_rank="$rank"
    [ -z "$target_rank" ] && continue  # a system or third-party header
    if [ "$target_rank" -gt "$own" ]; then
      echo "layers: FAIL: $rel:$line includes $target, a layer above (${layers[$own]} may include only" \
        "${layers[*]:0:$((own + 1))})"
      violations=$((violations + 1))
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$file")
done < <(find "$root"/harness "$root"/impls "$root"/profiles "$root"/reports -type f \
  \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)

if [ "$checked" -eq 0 ] && [ "$violations" -eq 0 ]; then
  echo "layers: FAIL: no sources found under $root"
  exit 1
fi
if [ "$violations" -gt 0 ]; then
  echo "layers: $violations violation(s) in $checked files"
  exit 1
fi
echo "layers: ok: $checked files, every include looks down (${layers[*]})"
