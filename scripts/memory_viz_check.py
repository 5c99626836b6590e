"""memory_viz_check.py: a results folder's memory snapshots (memory.snapshot_file:
DIR/timelines/NAME.memory_viz.pickle, written by every cell with measure.timeline, CPU or CUDA) opened with
PyTorch's own viewer code, torch.cuda._memory_viz, and checked against what bpbench measured.

Usage: python scripts/memory_viz_check.py RESULTS_DIR [--html]

Per cell with a snapshot: the pickle loads; trace_plot and segment_plot make its pages (they embed the
pickle; the page's JavaScript, pytorch.org's MemoryViz.js, draws it in a browser. With --html they are
written beside it as NAME.trace.html and NAME.segments.html: open them, or drop the pickle on
https://pytorch.org/memory_viz); the snapshot the HTML carries decodes to the same trace; no trace entry
carries a "category" unless one is "unknown" (MemoryViz.js then fails to load it: profiles/memory_viz.h);
the peak the trace
implies (the running sum of "alloc" minus "free_completed") equals the cell's memory.peak_bytes to the byte;
every "layer i backward" and "head chunk j" phase of the cell's timeline names some allocation's frames;
and, where the scenario asked for measure.cpp_stacks, every allocation of the step has a C++ stack after its
phases, through bpbench's Strategy::step (or, on an intra-op worker thread, from that thread's start).
Exit 0 when every check holds, else 1 with one line per failure (2: no snapshot at all).
"""

from __future__ import annotations

import argparse
import base64
import json
import pickle
import re
import sys
from pathlib import Path
from typing import Any

NAMED_PHASES = re.compile(r"^(layer \d+ backward|head chunk \d+)$")
ALIVE_BEFORE = {"filename": "bpbench", "line": 0, "name": "alive before the step"}


def trace_peak(snapshot: dict[str, Any]) -> int:
    live = peak = 0
    for entry in snapshot["device_traces"][0]:
        if entry["action"] == "alloc":
            live += entry["size"]
        elif entry["action"] == "free_completed":
            live -= entry["size"]
        peak = max(peak, live)
    return peak


def snapshot_in_html(html: str) -> dict[str, Any]:
    """The snapshot _memory_viz embedded in its page (a JSON list of {"name", "base64"})."""
    start = html.index('[{"name": "snapshot.pickle"')
    files, _ = json.JSONDecoder().raw_decode(html[start:])
    data: dict[str, Any] = pickle.loads(base64.b64decode(files[0]["base64"]))
    return data


def missing_stacks(traces: list[dict[str, Any]]) -> int:
    """The step's allocations whose frames hold no C++ stack through bpbench's Strategy::step, or, made on an
    intra-op worker thread (OpenMP's scratch buffers), up from that thread's start."""
    step = [e for e in traces if e["action"] == "alloc" and e["frames"][:1] != [ALIVE_BEFORE]]
    code_frames = ([f["name"] for f in e["frames"] if f["filename"] != "bpbench"] for e in step)
    return sum(not any("bpbench::Strategy::step" in name or name == "start_thread" for name in names)
               for names in code_frames)


def check_cell(results_dir: Path, cell: dict[str, Any], write_html: bool, cpp_stacks: bool) -> list[str]:
    memory = cell.get("memory") or {}
    name = memory["snapshot_file"]
    path = results_dir / name
    try:
        with open(path, "rb") as f:
            snapshot = pickle.load(f)
        traces = snapshot["device_traces"][0]
        snapshot["segments"]
    except Exception as e:
        return [f"{name}: does not load as a memory snapshot: {type(e).__name__}: {e}"]
    from torch.cuda import _memory_viz

    problems = []
    trace_html = _memory_viz.trace_plot(snapshot)
    segment_html = _memory_viz.segment_plot(snapshot)
    if len(snapshot_in_html(trace_html)["device_traces"][0]) != len(traces):
        problems.append(f"{name}: the trace_plot page carries another trace than the pickle")
    categories = {e["category"] for e in traces if "category" in e}
    if categories and "unknown" not in categories:
        problems.append(f"{name}: trace entries carry categories without \"unknown\", which "
                        "pytorch.org/memory_viz fails to load (annotate_snapshot's snapshot.categores)")
    if write_html:
        stem = str(path).removesuffix(".memory_viz.pickle")
        Path(stem + ".trace.html").write_text(trace_html)
        Path(stem + ".segments.html").write_text(segment_html)
    peak, measured = trace_peak(snapshot), memory.get("peak_bytes")
    if peak != measured:
        problems.append(f"{name}: the trace's peak is {peak} bytes, the cell's peak_bytes {measured}")
    named = {frame["name"] for entry in traces for frame in entry["frames"]}
    timeline = json.loads((results_dir / memory["timeline_file"]).read_text())["timeline"]
    wanted = {p["name"] for p in timeline["phases"] if NAMED_PHASES.match(p["name"])}
    missing = sorted(wanted - named)
    if missing:
        problems.append(f"{name}: no allocation's frames name the phases {', '.join(missing)}")
    if cpp_stacks and (count := missing_stacks(traces)):
        problems.append(f"{name}: {count} of the step's allocations have no C++ stack through Strategy::step")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--html", action="store_true", help="write NAME.trace.html and NAME.segments.html")
    args = parser.parse_args(argv)
    results = json.loads((args.results_dir / "results.json").read_text())
    cells = results["cells"]
    cpp_stacks = bool(results["meta"].get("scenario", {}).get("measure", {}).get("cpp_stacks"))
    with_snapshots = [c for c in cells if (c.get("memory") or {}).get("snapshot_file")]
    if not with_snapshots:
        print(f"{args.results_dir}: no cell has a memory snapshot (a cell with measure.timeline has one)")
        return 2
    problems = [p for c in with_snapshots for p in check_cell(args.results_dir, c, args.html, cpp_stacks)]
    for p in problems:
        print(p)
    if not problems:
        print(f"{args.results_dir}: {len(with_snapshots)} snapshots open in torch.cuda._memory_viz, "
              "each trace's peak equal to its cell's peak_bytes"
              + (", every allocation with its C++ stack" if cpp_stacks else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
