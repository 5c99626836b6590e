"""check_summary.py: the true numbers of a scripts/gpu/check.sh run, as lines in its log and as summary.md.

    python3 scripts/gpu/check_summary.py WORK     # WORK: check.sh's CHECK_WORK (gpu-check/)

For every cell of runs/*/results.json: status, peak (allocated), reserved, the estimate beside it (and their
ratio), median step time and MFU. Then the peers beside bpbench at the same length (transformers without
checkpointing against bpbench's plain, with checkpointing against checkpoint: the peak ratio, which the
issue wants within 1%), and the max-length probes (the estimate's answer and the step above it). Only what the
files hold is printed: a missing number is "-", never made up.
"""
import json
import sys
from pathlib import Path

GIB = 1 << 30


def gib(b):
    return "-" if b is None else f"{b / GIB:.2f}"


def cells_of(path):
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        print(f"summary: cannot read {path}: {e}")
        return None, []
    return doc, doc.get("cells", [])


def row(run, cell):
    axes = cell.get("axes", {})
    mem = cell.get("memory") or {}
    time = cell.get("time") or {}
    compute = cell.get("compute") or {}
    peak, estimate = mem.get("peak_bytes"), mem.get("estimate_bytes")
    ratio = f"{peak / estimate:.3f}" if peak and estimate else "-"
    median = time.get("median_s")
    mfu = compute.get("mfu")
    median_s = "-" if median is None else f"{median:.3f}"
    mfu_percent = "-" if mfu is None else f"{100 * mfu:.1f}%"
    return (f"| {run} | {axes.get('model', '-')} | {axes.get('impl', '-')} | {axes.get('seq_len', '-')} | "
            f"{cell.get('status', '-')} | {gib(peak)} | {gib(mem.get('reserved_peak_bytes'))} | "
            f"{gib(estimate)} | {ratio} | {median_s} | {mfu_percent} |")


def peak_at(cells, impl, seq_len):
    for c in cells:
        axes = c.get("axes", {})
        if axes.get("impl") == impl and axes.get("seq_len") == seq_len and c.get("status") == "ok":
            return (c.get("memory") or {}).get("peak_bytes")
    return None


def main():
    work = Path(sys.argv[1])
    lines = ["| check | model | impl | T | status | peak GiB | reserved GiB | estimate GiB | "
             "peak / estimate | step s | MFU |", "|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|"]
    runs = {}
    for results in sorted((work / "runs").glob("*/results.json")):
        doc, cells = cells_of(results)
        if doc is None:
            continue
        runs[results.parent.name] = cells
        device = (doc.get("meta") or {}).get("device", {})
        print(f"summary: {results.parent.name}: {len(cells)} cells of {doc.get('cells_total')}, "
              f"complete {doc.get('complete')}, device {device.get('gpus') or device.get('cpu')}")
        lines += [row(results.parent.name, c) for c in cells]
    peer_lines = []
    bpbench_cells = runs.get("qwen3_8b", [])
    for peer, ours in (("hf", "plain"), ("hf_checkpoint", "checkpoint"), ("streambp_official", "streambp")):
        doc, cells = cells_of(work / "runs" / "peers" / peer / "results.json")
        for c in cells:
            seq_len = c.get("axes", {}).get("seq_len")
            theirs = (c.get("memory") or {}).get("peak_bytes")
            mine = peak_at(bpbench_cells, ours, seq_len)
            ratio = f"{mine / theirs:.4f}" if mine and theirs else "-"
            peer_lines.append(f"| {peer} | {seq_len} | {c.get('status')} | {gib(theirs)} | {ours} | "
                              f"{gib(mine)} | {ratio} |")
    if peer_lines:
        lines += ["", "| peer | T | status | peer peak GiB | bpbench impl | bpbench peak GiB | "
                  "bpbench / peer |", "|---|--:|---|--:|---|--:|--:|"] + peer_lines
    probes = runs.get("streambp_maxlen", [])
    if probes:
        lines += ["", "streambp's longest length, probes at the estimate's answer and a step above: " +
                  ", ".join(f"T = {c.get('axes', {}).get('seq_len')}: {c.get('status')}" for c in probes)]
    text = "\n".join(lines) + "\n"
    (work / "summary.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
