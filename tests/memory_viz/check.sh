#!/usr/bin/env bash
# ctest "memory_viz": a CPU cell's memory snapshot (profiles/memory_viz.h) opened with PyTorch's own viewer code
# by scripts/memory_viz_check.py (loads, renders, the trace's peak equal to peak_bytes, the phases in its
# frames), at the smallest shape that has layers and head chunks; then the same pickle cut in half must fail;
# then a cell with measure.cpp_stacks, whose every allocation has its C++ stack (and one without, which must
# fail that check).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bpbench="${BPBENCH:-$root/build/bpbench}"
python="${PYTHON:-$root/.venv/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cat > "$out/scenario.json" <<'JSON'
{"name": "memory_viz", "device": "cpu", "threads": 1,
 "grid": {"model": "tiny", "impl": ["streambp", "checkpoint"], "seq_len": 40, "partition": 16, "logits_partition": 16},
 "measure": {"time": {"warmup": 1, "repeat": 0}, "grad_error": false, "timeline": true}}
JSON
"$bpbench" run "$out/scenario.json" --out "$out/run" --quiet > /dev/null
"$python" "$root/scripts/memory_viz_check.py" "$out/run" --html
ls "$out/run/timelines/"*.trace.html > /dev/null
cp -r "$out/run" "$out/plain"  # for the stacks check below, whole
pickle="$(ls "$out/run/timelines/"*.memory_viz.pickle | head -1)"
head -c "$(( $(stat -c %s "$pickle") / 2 ))" "$pickle" > "$pickle.half" && mv "$pickle.half" "$pickle"
if "$python" "$root/scripts/memory_viz_check.py" "$out/run" > "$out/corrupt.log"; then
  echo "memory_viz: a pickle cut in half passed the check" >&2
  exit 1
fi
grep -q "does not load as a memory snapshot" "$out/corrupt.log" || { cat "$out/corrupt.log" >&2; exit 1; }
echo "memory_viz: a corrupted pickle is refused: $(head -1 "$out/corrupt.log")"

# measure.cpp_stacks: every allocation of the step carries its C++ stack (through Strategy::step) after its
# phases; the same check on a pickle without stacks must fail.
sed -e 's/"impl": \["streambp", "checkpoint"\]/"impl": "streambp"/' \
    -e 's/"timeline": true/"timeline": true, "cpp_stacks": true/' "$out/scenario.json" > "$out/stacks.json"
"$bpbench" run "$out/stacks.json" --out "$out/stacks" --quiet > /dev/null
"$python" "$root/scripts/memory_viz_check.py" "$out/stacks"
"$python" - "$out/plain/results.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))
results["meta"]["scenario"]["measure"]["cpp_stacks"] = True  # claims stacks its pickle does not hold
json.dump(results, open(sys.argv[1], "w"))
PY
if "$python" "$root/scripts/memory_viz_check.py" "$out/plain" > "$out/nostacks.log"; then
  echo "memory_viz: a pickle without C++ stacks passed the stacks check" >&2
  exit 1
fi
grep -q "have no C++ stack through Strategy::step" "$out/nostacks.log" || { cat "$out/nostacks.log" >&2; exit 1; }
echo "memory_viz: a pickle without stacks is refused: $(head -1 "$out/nostacks.log")"
