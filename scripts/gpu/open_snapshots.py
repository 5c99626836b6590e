"""open_snapshots.py: every memory_viz pickle under a run folder opened with PyTorch's own viewer code.

    python3 scripts/gpu/open_snapshots.py RUN_DIR

For each *.pickle (what torch.cuda.memory._snapshot() returns, as bpbench writes it on CUDA, and on the CPU
from its tracking allocator: profiles/memory_viz.h): load it, render the viewer's trace plot to PICKLE.html
beside it (torch.cuda._memory_viz.trace_plot, the page pytorch.org/memory_viz shows), and print the
allocation events it holds and the peak its trace implies (the largest running sum of alloc minus
free_completed) beside results.json's peak_bytes of that cell. Exit 1 when there is no pickle or one does not
load: scripts/gpu/check.sh's snapshot stage.
"""
import json
import pickle
import sys
from pathlib import Path


def trace_peak(snapshot):
    """The largest sum of live bytes the device traces imply, and the number of their events."""
    peak = events = 0
    for trace in snapshot.get("device_traces", []):
        live = 0
        for event in trace:
            events += 1
            if event["action"] == "alloc":
                live += event["size"]
            elif event["action"] == "free_completed":
                live -= event["size"]
            peak = max(peak, live)
    return peak, events


def main():
    run_dir = Path(sys.argv[1])
    from torch.cuda import _memory_viz  # PyTorch's viewer code; needs no GPU

    pickles = sorted(run_dir.rglob("*.pickle"))
    if not pickles:
        print(f"open_snapshots: no memory_viz pickle under {run_dir} (bpbench writes one a cell with "
              "measure.timeline)")
        return 1
    results = run_dir / "results.json"
    peaks = {}  # memory.snapshot_file (relative to the run folder) -> that cell's peak_bytes
    if results.exists():
        for cell in json.loads(results.read_text()).get("cells", []):
            memory = cell.get("memory") or {}
            if memory.get("snapshot_file"):
                peaks[memory["snapshot_file"]] = memory.get("peak_bytes")
    for path in pickles:
        with open(path, "rb") as f:
            snapshot = pickle.load(f)
        html = path.with_suffix(".html")
        html.write_text(_memory_viz.trace_plot(snapshot))
        peak, events = trace_peak(snapshot)
        cell_peak = peaks.get(str(path.relative_to(run_dir)))
        segments = len(snapshot.get("segments", []))
        print(f"{path.relative_to(run_dir)}: {events} trace events, {segments} segments, "
              f"trace peak {peak} bytes (results.json peak_bytes {cell_peak}), rendered to {html.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
