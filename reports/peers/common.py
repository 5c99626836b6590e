"""common.py: what every peer script shares: the command line, the measured step, results cells, resume.

A peer is something a user would run instead of bpbench's strategies, measured on the same network (the bpbench
preset itself: `bpbench hf-config MODEL` writes the config.json transformers builds from) and written as bpbench
results cells, so that `bpbench report RUN PEER...` and `bpbench compare` put it in one table. Each peer module
(hf_checkpoint.py, streambp_official.py, liger_flce.py, cce.py) says how to build its model and run one step;
this module measures that step as bpbench measures a cell:
  - gradients exist before the measured step (as bpbench pre-allocates them), so base_bytes holds parameters
    and gradients; peak_bytes is torch.cuda.max_memory_allocated over the step (reset before it);
    reserved_peak_bytes is max_memory_reserved;
  - the memory step follows the warm-up with the cache emptied first (the budget is checked only when the
    allocator reserves memory, so blocks cached by the warm-up would escape it), and on CUDA it is not timed;
  - time: CUDA-synchronised wall clock of forward + backward, `warmup` steps then the median of `repeat`;
  - an out-of-memory step is a cell with status "oom"; the cache is emptied and the next length runs;
  - a peer that cannot run here (Triton kernels without a GPU) writes each length as status "skipped" with the
    reason, never a made-up number.
With --resume, the lengths already in --out with status ok or oom (same model, dtype, impl, device and
versions) are kept and not run again; a file of another model, device or version is refused.
On the CPU, PyTorch keeps no allocator statistics: memory is null there (the loss and time are still
recorded), and not pretended.

A peer module (or an object with the same attributes: fused_loss.FusedLossPeer) defines:
  impl(args) -> str             the cells' impl (a name bpbench reads but never runs: impls/strategy.h)
  describe(args) -> str         meta.peer: what ran, with versions
  versions() -> dict            versions that identify the peer's code (resume refuses another)
  add_arguments(parser)         its own options (optional)
  unavailable(args) -> str      why it cannot run here, or None
  config(config_json)           transformers' config of the preset (its transformers' form)
  build(config, args, device, dtype) -> (model, step, axes)
                                `step(tokens)` runs forward + backward and returns the detached loss; `axes`
                                overrides the cell's axes (partition, logits_partition) where the peer chunks.
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

SCHEMA = "bpbench.results/1"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEPT_STATUSES = ("ok", "oom")


def parser(peer, description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="a bpbench preset (bpbench list models)")
    p.add_argument("--seq-len", type=int, nargs="+", required=True)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float64"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-bytes", type=int, default=None,
                   help="cap the caching allocator at this many bytes (set_per_process_memory_fraction)")
    p.add_argument("--bpbench", default=os.path.join(REPO, "build", "bpbench"))
    p.add_argument("--out", required=True, help="results.json to write")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished lengths of --out (status ok or oom) and run the rest")
    if hasattr(peer, "add_arguments"):
        peer.add_arguments(p)
    return p


def parse_args(peer, description, argv):
    p = parser(peer, description)
    a = p.parse_args(argv)
    if any(t < 2 for t in a.seq_len):
        p.error("--seq-len: every length must be >= 2")
    if a.repeat < 1 or a.warmup < 0:
        p.error("--repeat must be >= 1 and --warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible to torch (valid: cuda with a GPU, or cpu)")
    return a


def preset_config_json(bpbench, model):
    """The config.json of a bpbench preset, from bpbench itself (transformers 5's form)."""
    if not os.path.exists(bpbench):
        sys.exit(f"peer: bpbench binary not found at {bpbench} (build it, or pass --bpbench)")
    run = subprocess.run([bpbench, "hf-config", model], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"peer: {run.stderr.strip()}")
    return json.loads(run.stdout)


def hub_form(config_json):
    """The same config in transformers 4.x's form: "rope_theta" and "rope_scaling" at the top level."""
    c = dict(config_json)
    rope = dict(c.pop("rope_parameters", {}))
    if "rope_theta" in rope:
        c["rope_theta"] = rope.pop("rope_theta")
    c["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    return c


def auto_config(config_json):
    from transformers import AutoConfig
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json, f)
        return AutoConfig.from_pretrained(d)


def causal_lm(config, dtype, device):
    """transformers' model of `config` with SDPA attention (`dtype=` in 5.x, `torch_dtype=` in 4.x)."""
    import transformers
    from transformers import AutoModelForCausalLM
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", **{key: dtype}).to(device)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def base_axes(args, T, impl):
    return {"model": args.model, "objective": "sft", "dtype": args.dtype, "batch": 1, "seq_len": T, "impl": impl,
            "partition": T, "logits_partition": T, "lora_rank": 0, "lora_alpha": 64.0, "group": 8, "prompt_len": -1,
            "padding": False, "beta": 0.1, "epsilon": 0.2, "offload": "none"}


def empty_cell(args, T, impl):
    return {"axes": base_axes(args, T, impl), "threads": torch.get_num_threads(), "status": "ok", "reason": "",
            "loss": None, "wall_s": 0.0, "uses_partition": False, "uses_logits_partition": False, "rope": None,
            "memory": None, "time": None, "grad_error": None}


def cuda_memory(device, base):
    peak = torch.cuda.max_memory_allocated(device)
    return {"base_bytes": base, "peak_bytes": peak, "peak_above_base_bytes": peak - base, "peak_by_category": {},
            "estimate_bytes": None, "reserved_peak_bytes": torch.cuda.max_memory_reserved(device)}


def measure_length(peer, args, config, T, device, dtype):
    cell = empty_cell(args, T, peer.impl(args))
    started = time.perf_counter()
    model = step = None
    try:
        torch.manual_seed(args.seed)
        model, step, axes = peer.build(config, args, device, dtype)
        cell["axes"].update(axes)
        cell["uses_partition"] = cell["axes"]["partition"] != T
        cell["uses_logits_partition"] = cell["axes"]["logits_partition"] != T
        for p in model.parameters():  # as bpbench: gradients exist before the step and count in its base
            p.grad = torch.zeros_like(p)
        generator = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, config.vocab_size, (1, T), generator=generator).to(device)
        times, loss = [], None
        cuda = device.type == "cuda"
        for run in range(args.warmup + args.repeat + (1 if cuda else 0)):
            for p in model.parameters():
                p.grad.zero_()
            measured_memory = run == args.warmup and cuda
            if measured_memory:  # as bpbench: from an empty cache, so the budget sees every byte; not timed
                synchronize(device)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            synchronize(device)
            t0 = time.perf_counter()
            loss = step(tokens)
            synchronize(device)
            if run >= args.warmup and not measured_memory:
                times.append(time.perf_counter() - t0)
            if measured_memory:
                cell["memory"] = cuda_memory(device, base)
        cell["loss"] = loss.float().item()
        cell["time"] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                        "count": len(times), "warmup": args.warmup, "runs_s": times}
    except torch.OutOfMemoryError as e:
        cell["status"], cell["reason"] = "oom", " ".join(str(e).split())[:300]
        if device.type == "cuda":
            cell["memory"] = cuda_memory(device, 0)
            cell["memory"]["peak_above_base_bytes"] = cell["memory"]["peak_bytes"]
    finally:
        del model, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    cell["wall_s"] = time.perf_counter() - started
    return cell


def device_meta(device):
    meta = {"type": device.type, "torch": torch.__version__}
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
        run = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
        return run.stdout.strip() if run.returncode == 0 else None
    except OSError:
        return None


def write_atomically(path, doc):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def resumable_cells(args, doc_meta, impl, tool):
    """The finished cells of --out that this run keeps ({seq_len: cell}); exits 2 for a file of another run."""
    if not args.resume or not os.path.exists(args.out):
        return {}
    try:
        with open(args.out) as f:
            old = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{tool}: cannot resume from {args.out}: {e} (valid: a results file this script wrote)")
    was = old.get("meta", {})
    for key in ("scenario_name", "versions"):
        if was.get(key) != doc_meta[key]:
            sys.exit(f"{tool}: cannot resume from {args.out}: its {key} is {was.get(key)!r}, this run's "
                     f"{doc_meta[key]!r} (valid: the same model and versions, or another --out)")
    if was.get("device", {}).get("name") != doc_meta["device"].get("name"):
        sys.exit(f"{tool}: cannot resume from {args.out}: measured on {was.get('device', {}).get('name')!r},"
                 f" this is {doc_meta['device'].get('name')!r} (valid: the same device, or another --out)")
    kept = {}
    for cell in old.get("cells", []):
        axes = cell.get("axes", {})
        if (cell.get("status") in KEPT_STATUSES and axes.get("impl") == impl and axes.get("dtype") == args.dtype
                and axes.get("seq_len") in args.seq_len):
            kept[axes["seq_len"]] = cell
    return kept


def run(peer, tool, description, argv):
    """The whole script: every length of --seq-len measured (or kept, or skipped) into --out."""
    args = parse_args(peer, description, argv)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    config_json = preset_config_json(args.bpbench, args.model)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if args.budget_bytes is not None and device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.budget_bytes / total), device)
    impl = peer.impl(args)
    start = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    versions = {"torch": torch.__version__, **peer.versions()}
    doc = {"schema": SCHEMA, "complete": False, "cells_total": len(args.seq_len),
           "meta": {"bpbench_version": None, "peer": peer.describe(args), "versions": versions,
                    "argv": [sys.argv[0]] + list(argv), "device": device_meta(device),
                    "threads": torch.get_num_threads(), "isolate": False, "git_commit": git_commit(),
                    "start_time": start, "hostname": socket.gethostname(),
                    "scenario_name": f"{tool} {args.model}", "scenario": None, "hf_config": config_json},
           "cells": []}
    kept = resumable_cells(args, doc["meta"], impl, tool)
    why_not = peer.unavailable(args)
    config = None if why_not else peer.config(config_json)
    for T in args.seq_len:
        if T in kept:
            doc["cells"].append(kept[T])
            write_atomically(args.out, doc)
            print(f"{impl} {args.model} T={T}: kept from {args.out} ({kept[T]['status']})", file=sys.stderr)
            continue
        if why_not:
            cell = empty_cell(args, T, impl)
            cell["status"], cell["reason"] = "skipped", why_not
        else:
            cell = measure_length(peer, args, config, T, device, dtype)
        doc["cells"].append(cell)
        write_atomically(args.out, doc)  # nothing measured is lost if a later length kills the process
        peak = cell["memory"]["peak_bytes"] / 2**30 if cell["memory"] else None
        print(f"{impl} {args.model} T={T}: {cell['status']}" + (f" ({cell['reason']})" if why_not else "")
              + (f", peak {peak:.2f} GiB" if peak is not None else "")
              + (f", step {cell['time']['median_s']:.3f} s" if cell["time"] else ""), file=sys.stderr)
    doc["complete"] = True
    doc["meta"]["end_time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_atomically(args.out, doc)
    return 0
