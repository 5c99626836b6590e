"""hf_side_by_side.py: Hugging Face transformers on the model bpbench runs, written as bpbench results.

Usage:
  hf_side_by_side.py --model qwen3-8b --seq-len 8192 16384 --out out/hf/results.json
                     [--dtype bfloat16] [--device cuda] [--no-checkpointing] [--warmup 1] [--repeat 3]
                     [--bpbench build/bpbench] [--seed 0] [--budget-bytes N] [--resume]

The peer of the StreamBP paper's tables: transformers with SDPA attention and gradient checkpointing, SFT on one
sequence of random tokens (labels = inputs, transformers' own shifted loss), random weights. The model is the
bpbench preset itself: `bpbench hf-config MODEL` writes the config.json transformers builds from, so the two
run the same network (layers, widths, GQA, RoPE, tied head).

Measured as bpbench measures a cell, so that `bpbench report` and `bpbench compare` put both in one table:
  - gradients exist before the measured step (as bpbench pre-allocates them), so base_bytes holds parameters
    and gradients; peak_bytes is torch.cuda.max_memory_allocated over the step (reset before it);
    reserved_peak_bytes is max_memory_reserved;
  - the memory step follows the warm-up with the cache emptied first (the budget is checked only when the
    allocator reserves memory, so blocks cached by the warm-up would escape it), and on CUDA it is not timed;
  - time: CUDA-synchronised wall clock of forward + backward, `warmup` steps then the median of `repeat`;
  - an out-of-memory step is a cell with status "oom"; the cache is emptied and the next length runs.
With --resume, the lengths already in --out with status ok or oom (same model, dtype, impl, device and
versions) are kept and not run again; a file of another model, device or version is refused.
On the CPU, PyTorch keeps no allocator statistics: memory is null there (the loss and time are still
recorded), which is what the CPU test of this script checks. The cells' impl is "hf-checkpoint" (or "hf"
without checkpointing): peers that bpbench reads but never runs (impls/strategy.h).
"""

import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.utils import logging as hf_logging

SCHEMA = "bpbench.results/1"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a bpbench preset (bpbench list models)")
    p.add_argument("--seq-len", type=int, nargs="+", required=True)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float64"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--no-checkpointing", action="store_true", help="impl hf: keep every activation")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-bytes", type=int, default=None,
                   help="cap the caching allocator at this many bytes (set_per_process_memory_fraction)")
    p.add_argument("--bpbench", default=os.path.join(os.path.dirname(__file__), "..", "build", "bpbench"))
    p.add_argument("--out", required=True, help="results.json to write")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished lengths of --out (status ok or oom) and run the rest")
    a = p.parse_args(argv)
    if any(t < 2 for t in a.seq_len):
        p.error("--seq-len: every length must be >= 2")
    if a.repeat < 1 or a.warmup < 0:
        p.error("--repeat must be >= 1 and --warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible to torch (valid: cuda with a GPU, or cpu)")
    return a


def preset_config(bpbench, model):
    """transformers' config of a bpbench preset, from bpbench itself."""
    if not os.path.exists(bpbench):
        sys.exit(f"hf_side_by_side: bpbench binary not found at {bpbench} (build it, or pass --bpbench)")
    run = subprocess.run([bpbench, "hf-config", model], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"hf_side_by_side: {run.stderr.strip()}")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(run.stdout)
        return AutoConfig.from_pretrained(d), json.loads(run.stdout)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def one_step(model, tokens):
    loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    return loss.detach()


def measure_length(args, config, T, device, dtype, impl):
    axes = {"model": args.model, "objective": "sft", "dtype": args.dtype, "batch": 1, "seq_len": T, "impl": impl,
            "partition": T, "logits_partition": T, "lora_rank": 0, "lora_alpha": 64.0, "group": 8, "prompt_len": -1,
            "padding": False, "beta": 0.1, "epsilon": 0.2, "offload": "none"}
    cell = {"axes": axes, "threads": torch.get_num_threads(), "status": "ok", "reason": "", "loss": None,
            "wall_s": 0.0, "uses_partition": False, "uses_logits_partition": False, "rope": None, "memory": None,
            "time": None, "grad_error": None}
    started = time.perf_counter()
    model = None
    try:
        torch.manual_seed(args.seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").to(device)
        model.train()
        if not args.no_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for p in model.parameters():  # as bpbench: gradients exist before the step and count in its base
            p.grad = torch.zeros_like(p)
        generator = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, config.vocab_size, (1, T), generator=generator).to(device)
        times, loss = [], None
        cuda = device.type == "cuda"
        for run in range(args.warmup + args.repeat + (1 if cuda else 0)):
            model.zero_grad(set_to_none=False)
            measured_memory = run == args.warmup and cuda
            if measured_memory:  # as bpbench: from an empty cache, so the budget sees every byte; not timed
                synchronize(device)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            synchronize(device)
            t0 = time.perf_counter()
            loss = one_step(model, tokens)
            synchronize(device)
            if run >= args.warmup and not measured_memory:
                times.append(time.perf_counter() - t0)
            if measured_memory:
                cell["memory"] = {"base_bytes": base, "peak_bytes": torch.cuda.max_memory_allocated(device),
                                  "peak_above_base_bytes": torch.cuda.max_memory_allocated(device) - base,
                                  "peak_by_category": {}, "estimate_bytes": None,
                                  "reserved_peak_bytes": torch.cuda.max_memory_reserved(device)}
        cell["loss"] = loss.float().item()
        cell["time"] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                        "count": len(times), "warmup": args.warmup, "runs_s": times}
    except torch.OutOfMemoryError as e:
        cell["status"], cell["reason"] = "oom", " ".join(str(e).split())[:300]
        if device.type == "cuda":
            cell["memory"] = {"base_bytes": 0, "peak_bytes": torch.cuda.max_memory_allocated(device),
                              "peak_above_base_bytes": torch.cuda.max_memory_allocated(device),
                              "peak_by_category": {}, "estimate_bytes": None,
                              "reserved_peak_bytes": torch.cuda.max_memory_reserved(device)}
    finally:
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    cell["wall_s"] = time.perf_counter() - started
    return cell


def device_meta(device):
    meta = {"type": device.type, "torch": torch.__version__, "transformers": transformers.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta.update({"name": props.name, "total_memory_bytes": props.total_memory, "cuda": torch.version.cuda,
                     "capability": f"{props.major}.{props.minor}"})
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True)
            meta["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 else None
        except (OSError, IndexError):
            meta["driver"] = None
    else:
        meta["name"] = platform.processor() or platform.machine()
    return meta


def git_commit():
    try:
        run = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD"],
                             capture_output=True, text=True)
        return run.stdout.strip() if run.returncode == 0 else None
    except OSError:
        return None


def write_atomically(path, doc):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


KEPT_STATUSES = ("ok", "oom")


def resumable_cells(args, doc_meta, impl):
    """The finished cells of --out that this run keeps ({seq_len: cell}); exits 2 for a file of another run."""
    if not args.resume or not os.path.exists(args.out):
        return {}
    try:
        with open(args.out) as f:
            old = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"hf_side_by_side: cannot resume from {args.out}: {e} (valid: a results file this script wrote)")
    was = old.get("meta", {})
    for key in ("scenario_name", "versions"):
        if was.get(key) != doc_meta[key]:
            sys.exit(f"hf_side_by_side: cannot resume from {args.out}: its {key} is {was.get(key)!r}, this run's "
                     f"{doc_meta[key]!r} (valid: the same model and versions, or another --out)")
    if was.get("device", {}).get("name") != doc_meta["device"].get("name"):
        sys.exit(f"hf_side_by_side: cannot resume from {args.out}: measured on {was.get('device', {}).get('name')!r},"
                 f" this is {doc_meta['device'].get('name')!r} (valid: the same device, or another --out)")
    kept = {}
    for cell in old.get("cells", []):
        axes = cell.get("axes", {})
        if (cell.get("status") in KEPT_STATUSES and axes.get("impl") == impl and axes.get("dtype") == args.dtype
                and axes.get("seq_len") in args.seq_len):
            kept[axes["seq_len"]] = cell
    return kept


def main(argv):
    args = parse_args(argv)
    hf_logging.set_verbosity_error()
    config, config_json = preset_config(args.bpbench, args.model)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.budget_bytes is not None and device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.budget_bytes / total), device)
    impl = "hf" if args.no_checkpointing else "hf-checkpoint"
    start = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc = {"schema": SCHEMA, "complete": False, "cells_total": len(args.seq_len),
           "meta": {"bpbench_version": None, "peer": f"transformers {transformers.__version__}, SDPA, "
                    + ("no checkpointing" if args.no_checkpointing else "gradient checkpointing"),
                    "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                    "argv": [sys.argv[0]] + list(argv), "device": device_meta(device),
                    "threads": torch.get_num_threads(), "isolate": False, "git_commit": git_commit(),
                    "start_time": start, "hostname": socket.gethostname(),
                    "scenario_name": f"hf_side_by_side {args.model}", "scenario": None,
                    "hf_config": config_json},
           "cells": []}
    kept = resumable_cells(args, doc["meta"], impl)
    for T in args.seq_len:
        if T in kept:
            doc["cells"].append(kept[T])
            write_atomically(args.out, doc)
            print(f"{impl} {args.model} T={T}: kept from {args.out} ({kept[T]['status']})", file=sys.stderr)
            continue
        cell = measure_length(args, config, T, device, dtype, impl)
        doc["cells"].append(cell)
        write_atomically(args.out, doc)  # nothing measured is lost if a later length kills the process
        peak = cell["memory"]["peak_bytes"] / 2**30 if cell["memory"] else None
        print(f"{impl} {args.model} T={T}: {cell['status']}"
              + (f", peak {peak:.2f} GiB" if peak is not None else "")
              + (f", step {cell['time']['median_s']:.3f} s" if cell["time"] else ""), file=sys.stderr)
    doc["complete"] = True
    doc["meta"]["end_time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_atomically(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
