#!/usr/bin/env python3
"""plot.py: draws the figures of a bpbench report from the plot_data.json that `bpbench report` writes.

usage: plot.py PLOT_DATA.json OUT_DIR

Writes, for each section present in the data (see docs/compare.md for its format):
  OUT_DIR/peak_vs_seq_len.png   peak BP memory vs sequence length, one line per strategy (paper Figure 3)
  OUT_DIR/partition_sweep.png   BP time (left axis) and peak memory (right axis) vs partition size (Figure 5),
                                beside hardware FLOPs and the attention's dense-mask FLOPs vs partition size
  OUT_DIR/timeline.png          live memory over time stacked by category, with phase marks (Figures 1 and 8)
  OUT_DIR/train_loss.png        each training run's loss per step by strategy, and the difference from plain
                                BP
  OUT_DIR/<file>                `bpbench estimate --plot`: estimated peak vs sequence length per strategy, the
                                budgets, and the longest length within each (section "estimate_vs_seq_len")
and prints the name of each file written. All the selection happens in C++; this script only draws.

Exit status: 0 done; 2 bad arguments or data; 3 matplotlib is not installed for this python.
"""
import json
import math
import os
import sys
from typing import Any

GIB, MIB = 2.0**30, 2.0**20
# Stack order and colours of the memory categories (profiles/recorder.h), longest-lived at the bottom.
CATEGORY_COLOURS = {
    "params": "#4c72b0", "grads": "#55a868", "optimizer": "#937860", "checkpoints": "#c44e52",
    "kv": "#8172b2", "activations": "#ccb974", "logits": "#dd8452", "comm": "#64b5cd", "other": "#8c8c8c",
}


def byte_unit(max_bytes):
    """(divisor, label) so that the largest value reads comfortably: GiB from 1 GiB up, else MiB."""
    return (GIB, "GiB") if max_bytes >= GIB else (MIB, "MiB")


def grid_shape(n):
    cols = min(n, 2)
    return math.ceil(n / cols), cols


def log2_ticks(ax, values):
    """A base-2 log x axis: a tick at every measured value when there are few, else at the powers of two."""
    ax.set_xscale("log", base=2)
    ticks = sorted(set(values))
    if len(ticks) > 8:
        lo, hi = math.floor(math.log2(ticks[0])), math.ceil(math.log2(ticks[-1]))
        ticks = [2**k for k in range(lo, hi + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(v) for v in ticks], rotation=45 if len(ticks) > 6 else 0)
    ax.minorticks_off()


def plot_peak(data, out_dir, plt):
    panels = data["panels"]
    budget = data.get("budget_bytes")
    # One colour per strategy across all panels, so a single legend serves the figure. A label may carry a
    # note after the impl ("streambp (ps=256)"): the legend shows the first such note.
    def impl(label):
        return label.split(" (")[0]
    impls: list[str] = []
    legend: dict[str, str] = {}
    for panel in panels:
        for s in panel["series"]:
            if impl(s["label"]) not in impls:
                impls.append(impl(s["label"]))
            if legend.get(impl(s["label"]), impl(s["label"])) == impl(s["label"]):
                legend[impl(s["label"])] = s["label"]
    colour = {name: "C%d" % (i % 10) for i, name in enumerate(impls)}
    # Strategies with equal peaks overlap exactly: distinct markers, larger ones first, keep each visible.
    style = {name: dict(marker="os^Dv<>ph*"[i % 10], markersize=max(10 - 1.2 * i, 5),
                        linestyle=["-", "--", "-.", ":"][i % 4]) for i, name in enumerate(impls)}
    rows, cols = grid_shape(len(panels))
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows + 0.8), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        peaks = [p for s in panel["series"] for p in s["peak_bytes"] + s.get("estimate_bytes", [])]
        div, unit = byte_unit(max(peaks + ([budget] if budget else []) + [1]))
        top = max(peaks + [budget or 0]) / div
        oom_y = (budget / div) if budget else (top * 1.05 if top > 0 else 1)
        xs = []
        for s in panel["series"]:
            pts = sorted(zip(s["seq_len"], s["peak_bytes"]))
            xs += [x for x, _ in pts] + s["oom_seq_len"]
            if pts:
                ax.plot([x for x, _ in pts], [y / div for _, y in pts], color=colour[impl(s["label"])],
                        **style[impl(s["label"])])
            if s.get("estimate_bytes"):
                est = sorted(zip(s["estimate_seq_len"], s["estimate_bytes"]))
                ax.plot([x for x, _ in est], [y / div for _, y in est], color=colour[impl(s["label"])],
                        linestyle=":", linewidth=1.2, alpha=0.8)
            if s["oom_seq_len"]:
                ax.plot(s["oom_seq_len"], [oom_y] * len(s["oom_seq_len"]), "x",
                        color=colour[impl(s["label"])], markersize=10, markeredgewidth=2)
        if budget:
            ax.axhline(budget / div, color="black", linestyle="--", linewidth=1)
        if xs:
            log2_ticks(ax, xs)
        ax.set_ylim(bottom=0, top=max(top * 1.08, 1e-9))
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel("peak BP memory (%s)" % unit)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colour[name], label=legend[name], **style[name]) for name in impls]
    if any(s.get("estimate_bytes") for p in panels for s in p["series"]):
        handles.append(plt.Line2D([], [], color="grey", linestyle=":", linewidth=1.2,
                                  label="estimate (bpbench estimate), dotted"))
    if budget:
        handles.append(plt.Line2D([], [], color="black", linestyle="--",
                                  label="memory budget (%.2f GiB)" % (budget / GIB)))
    if any(s["oom_seq_len"] for p in panels for s in p["series"]):
        handles.append(plt.Line2D([], [], color="grey", marker="x", linestyle="", markersize=10,
                                  markeredgewidth=2, label="out of memory (drawn at the budget)"))
    ncol = min(len(handles), 3 if cols == 1 else 4)  # one 6.4-inch panel holds three entries a row
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.suptitle("Peak BP memory vs sequence length")
    fig.tight_layout(rect=(0, 0.04 + 0.035 * math.ceil(len(handles) / ncol) / rows, 1, 1))
    return save(fig, out_dir, "peak_vs_seq_len.png", plt, layout=False)


def plot_estimate(data, out_dir, plt):
    """`bpbench estimate --plot`: each strategy's estimated peak against T, every budget as a dashed line,
    and each strategy's longest length within each budget marked on its curve."""
    series, budgets = data["series"], data.get("budgets") or []
    peaks = [p for s in series for p in s["peak_bytes"]] + [b["bytes"] for b in budgets]
    div, unit = byte_unit(max(peaks + [1]))
    fig, ax = plt.subplots(figsize=(8.4, 5.4))
    xs = []
    for i, s in enumerate(series):
        colour = "C%d" % (i % 10)
        ax.plot(s["seq_len"], [y / div for y in s["peak_bytes"]], color=colour,
                linestyle=["-", "--", "-.", ":"][i % 4], linewidth=1.8, label=s["label"])
        xs += s["seq_len"]
        for m in s["longest"]:
            ax.plot([m["seq_len"]], [m["peak_bytes"] / div], "o", color=colour, markersize=7,
                    markeredgecolor="black", markeredgewidth=0.6)
    for b in budgets:
        ax.axhline(b["bytes"] / div, color="black", linestyle="--", linewidth=0.8, alpha=0.6)
        ax.annotate("%s %.1f %s" % (b["label"], b["bytes"] / div, unit), (0.005, b["bytes"] / div),
                    xycoords=("axes fraction", "data"), fontsize=7, va="bottom", alpha=0.8)
    if xs:
        log2_ticks(ax, xs)
    # With a budget, the region around it is what matters: curves far past it leave the plot at the top.
    top = max(peaks + [1]) / div
    if budgets:
        top = min(top, 1.6 * max(b["bytes"] for b in budgets) / div)
    ax.set_ylim(bottom=0, top=top * 1.05)
    ax.set_xlim(min(xs), max(xs))
    ax.set_title(data.get("title", "estimate"), fontsize=10)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("estimated peak memory (%s)" % unit)
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if any(s["longest"] for s in series):
        handles.append(plt.Line2D([], [], color="grey", marker="o", linestyle="", markeredgecolor="black",
                                  label="longest length within a budget"))
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    return save(fig, out_dir, data.get("file", "estimate_vs_seq_len.png"), plt)


def plot_partition(data, out_dir, plt):
    panels = data["panels"]
    fig, axes = plt.subplots(len(panels), 2, figsize=(14, 4.8 * len(panels)), squeeze=False)
    for (ax, flops_ax), panel in zip(axes, panels):
        plot_partition_flops(flops_ax, panel)
        twin = ax.twinx()
        peaks = [p for s in panel["series"] for p in s["peak_bytes"] if p is not None]
        div, unit = byte_unit(max(peaks + [1]))
        xs, handles = [], []
        for i, s in enumerate(panel["series"]):
            colour = "C%d" % (i % 10)
            xs += s["partition"]
            timed = [(x, t) for x, t in zip(s["partition"], s["time_s"]) if t is not None]
            if timed:
                handles += ax.plot(*zip(*timed), "o-", color=colour, label=s["label"] + " time")
            sized = [(x, p / div) for x, p in zip(s["partition"], s["peak_bytes"]) if p is not None]
            if sized:
                handles += twin.plot(*zip(*sized), "s--", color=colour, label=s["label"] + " peak")
        log2_ticks(ax, xs)
        ax.set_ylim(bottom=0)
        twin.set_ylim(bottom=0)
        ax.set_xlabel(panel.get("xlabel", "partition size (tokens)"))
        ax.set_ylabel("BP time (s), solid")
        twin.set_ylabel("peak BP memory (%s), dashed" % unit)
        ax.set_title(panel["title"], fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper center",
                  bbox_to_anchor=(0.5, -0.17), ncol=min(len(handles), 4), frameon=False)
    fig.suptitle("BP time, peak memory and FLOPs vs partition size")
    return save(fig, out_dir, "partition_sweep.png", plt)


def plot_partition_flops(ax, panel):
    """Right of each sweep: hardware FLOPs (solid) and dense-mask attention FLOPs (dotted) per partition."""
    xs = []
    for i, s in enumerate(panel["series"]):
        colour = "C%d" % (i % 10)
        xs += s["partition"]
        for key, style, what in (("hardware_flops", "o-", "hardware"), ("dense_attention_flops", "^:",
                                                                          "dense attention")):
            points = [(x, f / 1e9) for x, f in zip(s["partition"], s.get(key, [])) if f is not None]
            if points:
                ax.plot(*zip(*points), style, color=colour, label="%s %s" % (s["label"], what))
    log2_ticks(ax, xs)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(panel.get("xlabel", "partition size (tokens)"))
    ax.set_ylabel("GFLOP per step")
    ax.set_title("FLOPs: hardware (solid), attention as a dense-mask kernel runs it (dotted)", fontsize=10)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def plot_timeline(data, out_dir, plt):
    t = data["t_ms"]
    cats = [c for c in data["categories"] if any(data["by_category"][c])]  # drop categories never used
    live = data.get("live") or [sum(v) for v in zip(*(data["by_category"][c] for c in cats))]
    seconds = bool(t) and t[-1] > 5000
    scale, tunit = (1e-3, "s") if seconds else (1.0, "ms")
    x = [v * scale for v in t]
    div, unit = byte_unit(max(live + [1]))
    fig, ax = plt.subplots(figsize=(12, 5.5))
    ax.stackplot(x, *[[b / div for b in data["by_category"][c]] for c in cats], labels=cats, step="post",
                 colors=[CATEGORY_COLOURS.get(c, "C%d" % i) for i, c in enumerate(cats)], alpha=0.9)
    peak_i = max(range(len(live)), key=lambda i: live[i]) if live else None
    if peak_i is not None:
        ax.axhline(live[peak_i] / div, color="black", linestyle=":", linewidth=1)
        ax.annotate("peak %.2f %s" % (live[peak_i] / div, unit), (x[peak_i], live[peak_i] / div),
                    textcoords="offset points", xytext=(4, 4), fontsize=9)
    # Phases: outermost as alternating bands, labelled where wide enough; nested ones as ticks at the bottom.
    span = (x[-1] - x[0]) if len(x) > 1 else 1.0
    top = (live[peak_i] / div if peak_i is not None else 1) * 1.15
    outer = [p for p in data.get("phases", []) if p["depth"] == 0]
    for i, p in enumerate(outer):
        b, e = p["begin_ms"] * scale, p["end_ms"] * scale
        if i % 2 == 0:
            ax.axvspan(b, e, color="grey", alpha=0.08, linewidth=0)
        ax.axvline(b, color="grey", linewidth=0.5, alpha=0.6)
        if span > 0 and (e - b) / span >= 0.035:
            ax.text((b + e) / 2, top * 0.985, p["name"], ha="center", va="top", fontsize=8,
                    rotation=90 if (e - b) / span < 0.12 else 0)
    inner = [p for p in data.get("phases", []) if p["depth"] == 1]
    for p in inner:
        ax.plot([p["begin_ms"] * scale] * 2, [0, top * 0.02], color="black", linewidth=0.5)
    ax.set_ylim(0, top)
    if len(x) > 1:
        ax.set_xlim(x[0], x[-1])
    ax.set_xlabel("time since the step started (%s)" % tunit
                  + ("; ticks at the bottom: nested phases (chunks)" if inner else ""))
    ax.set_ylabel("live memory (%s)" % unit)
    ax.set_title(data.get("title", "Memory timeline"), fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
              title="category")
    return save(fig, out_dir, "timeline.png", plt)


def save(fig, out_dir, name, plt, layout=True):
    if layout:
        fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)
    return path


def plot_train(data, out_dir, plt):
    """Per training run: every strategy's training loss per step (held-out losses as markers), and beside it
    each strategy's difference from plain BP's (the first series), training and held-out."""
    panels = data["panels"]
    fig, axes = plt.subplots(len(panels), 2, figsize=(12, 4.2 * len(panels)), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, panel in zip(axes, panels):
        loss_ax, diff_ax = row
        series = panel["series"]
        base = series[0]
        base_steps = dict(base["steps"])  # step -> loss
        base_eval = dict(base["eval"])
        for k, s in enumerate(series):
            colour = colours[k % len(colours)]
            width = 2.6 if k == 0 else 1.2
            if s["steps"]:
                loss_ax.plot([p[0] for p in s["steps"]], [p[1] for p in s["steps"]], color=colour,
                             linewidth=width, alpha=0.9, label=s["label"])
            if s["eval"]:
                loss_ax.plot([p[0] for p in s["eval"]], [p[1] for p in s["eval"]], "o", color=colour,
                             markersize=4)
            if k == 0:
                continue
            diff = [(st, loss - base_steps[st]) for st, loss in s["steps"] if st in base_steps]
            if diff:
                diff_ax.plot([p[0] for p in diff], [p[1] for p in diff], color=colour, linewidth=1,
                             label=f"{s['label']} - {base['label']}")
            held = [(st, loss - base_eval[st]) for st, loss in s["eval"] if st in base_eval]
            if held:
                diff_ax.plot([p[0] for p in held], [p[1] for p in held], "o", color=colour, markersize=4)
        loss_ax.set_title(f"{panel['title']}: loss (line: training batch, dots: held-out)", fontsize=9)
        loss_ax.set_xlabel("step")
        loss_ax.set_ylabel("loss")
        loss_ax.legend(fontsize=8)
        diff_ax.axhline(0, color="black", linewidth=0.6)
        diff_ax.set_title(f"difference from {base['label']} (line: training, dots: held-out)", fontsize=9)
        diff_ax.set_xlabel("step")
        diff_ax.set_ylabel("loss difference")
        if len(series) > 1:
            diff_ax.legend(fontsize=8)
    fig.suptitle("Training loss of every strategy against plain BP")
    fig.tight_layout()
    path = os.path.join(out_dir, "train_loss.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)


def plot_history(data, out_dir, plt):
    """history_<metric>.png: a metric over the runs of a history, one panel per machine and device, a line per
    cell that repeats (bpbench history report)."""
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for panel in data["panels"]:
        by_metric.setdefault(panel["metric"], []).append(panel)
    for metric, panels in by_metric.items():
        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.6 * len(panels)), squeeze=False)
        for ax, panel in zip(axes[:, 0], panels):
            for s in panel["series"]:
                y = s["y"]
                if metric == "peak_bytes":
                    scale, unit = byte_unit(max(max(p["y"]) for p in panel["series"]))
                    y = [v / scale for v in y]
                ax.plot(s["x"], y, marker="o", label=s["label"])
            ax.set_title(panel["title"], fontsize=9)
            ax.set_xlabel("run (in the order appended)")
            ax.set_ylabel(unit if metric == "peak_bytes" else metric)
            ax.set_xticks(range(1, panel["runs"] + 1))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, out_dir, "history_%s.png" % metric, plt)


def main(argv):
    if len(argv) != 3:
        print("usage: plot.py PLOT_DATA.json OUT_DIR", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed for %s (Debian: apt-get install python3-matplotlib)"
              % sys.executable)
        return 3
    try:
        with open(argv[1]) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print("cannot read %s: %s" % (argv[1], e))
        return 2
    if (data.get("peak_vs_seq_len") or {}).get("panels"):
        plot_peak(data["peak_vs_seq_len"], argv[2], plt)
    if (data.get("estimate_vs_seq_len") or {}).get("series"):
        plot_estimate(data["estimate_vs_seq_len"], argv[2], plt)
    if (data.get("partition_sweep") or {}).get("panels"):
        plot_partition(data["partition_sweep"], argv[2], plt)
    if data.get("timeline") and data["timeline"].get("t_ms"):
        plot_timeline(data["timeline"], argv[2], plt)
    if (data.get("train_loss") or {}).get("panels"):
        plot_train(data["train_loss"], argv[2], plt)
    if (data.get("history") or {}).get("panels"):
        plot_history(data["history"], argv[2], plt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
