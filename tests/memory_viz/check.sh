#!/usr/bin/env bash
# ctest "memory_viz": CPU cells' memory snapshots (profiles/memory_viz.h) opened with PyTorch's own viewer code
# by scripts/memory_viz_check.py (loads, renders, the trace's peak equal to peak_bytes, the phases in its
# frames, every allocation's C++ stack with measure.cpp_stacks), at the smallest shape that has layers and head
# chunks; then the same check must refuse a pickle cut in half and one whose C++ frames were taken out.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bpbench="${BPBENCH:-$root/build/bpbench}"
python="${PYTHON:-$root/.venv/bin/python}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cat > "$out/scenario.json" <<'JSON'
{"name": "memory_viz", "device": "cpu", "threads": 1,
 "grid": {"model": "tiny", "impl": ["streambp", "checkpoint"], "seq_len": 40, "partition": 16, "logits_partition": 16},
 "measure": {"time": {"warmup": 1, "repeat": 0}, "grad_error": false, "timeline": true, "cpp_stacks": true}}
JSON
"$bpbench" run "$out/scenario.json" --out "$out/run" --quiet > /dev/null
"$python" "$root/scripts/memory_viz_check.py" "$out/run" --html
ls "$out/run/timelines/"*.trace.html > /dev/null

# Damaged copies: cell 0's pickle cut in half, cell 1's with its C++ frames taken out (its phases kept).
timelines="$out/run/timelines"
head -c "$(( $(stat -c %s "$timelines/cell-000.memory_viz.pickle") / 2 ))" "$timelines/cell-000.memory_viz.pickle" \
  > "$out/half" && mv "$out/half" "$timelines/cell-000.memory_viz.pickle"
"$python" - "$timelines/cell-001.memory_viz.pickle" <<'PY'
import pickle, sys
snapshot = pickle.load(open(sys.argv[1], "rb"))
for entry in snapshot["device_traces"][0]:
    entry["frames"] = [f for f in entry["frames"] if f["filename"] == "bpbench"]
pickle.dump(snapshot, open(sys.argv[1], "wb"))
PY
if "$python" "$root/scripts/memory_viz_check.py" "$out/run" > "$out/damaged.log"; then
  echo "memory_viz: a pickle cut in half and one without its C++ stacks passed the check" >&2
  exit 1
fi
for refusal in "cell-000.memory_viz.pickle: does not load as a memory snapshot" \
               "cell-001.memory_viz.pickle: .* of the step's allocations have no C++ stack"; do
  grep -q "$refusal" "$out/damaged.log" || { cat "$out/damaged.log" >&2; exit 1; }
done
echo "memory_viz: damaged pickles are refused:"
sed 's/^/  /' "$out/damaged.log"
