"""common.py: what every peer script shares: the command line, the measured step, results cells, resume.

A peer is something a user would run instead of bpbench's strategies, measured on the same network (the bpbench
preset itself: `bpbench hf-config MODEL` writes the config.json transformers builds from) and written as bpbench
results cells, so that `bpbench report RUN PEER...` and `bpbench compare` put it in one table. Each peer module
(hf_checkpoint.py, streambp_official.py, liger_flce.py, cce.py) says how to build its model and run one step;
this module measures that step as bpbench measures a cell:
  - on CUDA the model is built on the device itself (causal_lm: from_config under `with torch.device(device)`),
    never on the host and then copied;
  - gradients exist before the measured step (as bpbench pre-allocates them), so base_bytes holds parameters
    and gradients; peak_bytes is torch.cuda.max_memory_allocated over the step (reset before it);
    reserved_peak_bytes is max_memory_reserved;
  - the memory step follows the warm-up with the cache emptied first (the budget is checked only when the
    allocator reserves memory, so blocks cached by the warm-up would escape it); it is not timed;
  - time: CUDA-synchronised wall clock of forward + backward, `warmup` steps then the median of `repeat`,
    their spread (stddev_s, cv) and tokens per second, as bpbench writes them;
  - an out-of-memory step (in the build, the warm-up or the measured step) is a cell with status "oom" and
    the peak since the start of its own length (the peak is reset before the model is built, so it is never
    the previous length's); the model is freed, the cache emptied, and the next length runs;
  - any other exception is a cell with status "error" and "<type>: <message>" as its reason (one line), freed
    likewise, and the next length runs; the script writes every length, then exits 1 naming the lengths that
    failed (oom and skipped are results: exit 0);
  - a peer that cannot run here (Triton kernels without a GPU) writes each length as status "skipped" with the
    reason, never a made-up number.
With --resume, the lengths already in --out with status ok or oom (same model, dtype, impl, device and
versions) are kept and not run again (an "error" length runs again); a file of another model, device or
version is refused.
PyTorch keeps no CPU allocator statistics: on the CPU the peer runs under bpbench's own tracking allocator
(cpu_meter.py loads libbpbench_peer_meter.so, built beside the bpbench binary), so its base and peak are
counted exactly as a bpbench CPU cell's, and --budget-bytes is that allocator's budget. The statistics are
read through one object, a meter (CudaMeter on CUDA, cpu_meter.CpuMeter on the CPU); METER_FACTORY makes it,
so that tests/peers/ can measure a fake peer on a fake meter.

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
A peer that measures a length in processes of its own (alst_ulysses.py: P ranks) adds, all optional:
  prepare(args, argv) -> int or None   first thing after parsing: its checks and settings; an int ends run()
                                       with that exit status (a worker process of the peer)
  check(args, config_json)             the preset against the peer (a refusal exits with one line)
  meta(args, meta)                     what meta says beyond the common fields (its GPUs, threads)
  keeps(args, cell) -> bool            whether a finished cell of --out is this run's to keep on --resume
  measure(args, config_json, T) -> cell  the length's cell, instead of measure_length in this process
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

import cpu_meter
import heap_policy

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
                   help="cap memory at this many bytes: CUDA's caching allocator (set_per_process_memory_fraction), "
                        "on the CPU bpbench's tracking allocator's budget")
    p.add_argument("--bpbench", default=os.path.join(REPO, "build", "bpbench"))
    p.add_argument("--cpu-meter", default=None,
                   help="bpbench's CPU meter library (default: libbpbench_peer_meter.so beside --bpbench)")
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
    """transformers' model of `config` with SDPA attention (`dtype=` in 5.x, `torch_dtype=` in 4.x), built on
    `device` itself: built on the host and then copied, an 8B model would take its host RAM and the copy's time."""
    import transformers
    from transformers import AutoModelForCausalLM
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", **{key: dtype})


class CudaMeter:
    """The CUDA caching allocator's statistics for one device: everything measure_length reads of memory."""

    def __init__(self, device):
        self.device = device

    def reset(self):
        torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self):
        return torch.cuda.memory_allocated(self.device)

    def peak(self):
        return torch.cuda.max_memory_allocated(self.device)

    def reserved_peak(self):
        return torch.cuda.max_memory_reserved(self.device)

    def empty_cache(self):
        torch.cuda.empty_cache()

    def synchronize(self):
        torch.cuda.synchronize(self.device)


def memory_meter(device, args):
    """The meter of `device`: the CUDA allocator's statistics, or bpbench's tracking allocator on the CPU."""
    if device.type == "cuda":
        return CudaMeter(device)
    library = args.cpu_meter or cpu_meter.library_path(args.bpbench)
    if not os.path.exists(library):
        sys.exit(f"peer: bpbench's CPU meter {library} not found (build it: cmake --build build --target "
                 "bpbench_peer_meter, or pass --cpu-meter)")
    return cpu_meter.CpuMeter(library)


METER_FACTORY = memory_meter  # (device, args) -> meter; tests/peers/ put a fake meter here


def base_axes(args, T, impl):
    return {"model": args.model, "objective": "sft", "dtype": args.dtype, "batch": 1, "seq_len": T, "impl": impl,
            "partition": T, "logits_partition": T, "lora_rank": 0, "lora_alpha": 64.0, "group": 8, "prompt_len": -1,
            "padding": False, "beta": 0.1, "epsilon": 0.2, "offload": "none"}


def empty_cell(args, T, impl):
    return {"axes": base_axes(args, T, impl), "threads": torch.get_num_threads(), "status": "ok", "reason": "",
            "loss": None, "wall_s": 0.0, "uses_partition": False, "uses_logits_partition": False, "rope": None,
            "memory": None, "time": None, "grad_error": None}


def memory_of(meter, base):
    peak = meter.peak()
    memory = {"base_bytes": base, "peak_bytes": peak, "peak_above_base_bytes": peak - base, "peak_by_category": {},
              "estimate_bytes": None}
    reserved = meter.reserved_peak()
    if reserved is not None:  # a caching allocator's (CUDA); the CPU has none, as bpbench's CPU cells
        memory["reserved_peak_bytes"] = reserved
    return memory


def time_of(times, warmup, step_tokens):
    """results.json's time object, as bpbench's time_stats (harness/run/cell_steps.cpp) writes it."""
    median = statistics.median(times)
    spread = len(times) >= 2
    stddev = statistics.stdev(times) if spread else None  # the sample standard deviation (n - 1)
    mean = statistics.fmean(times)
    return {"median_s": median, "min_s": min(times), "max_s": max(times), "count": len(times), "warmup": warmup,
            "runs_s": times, "stddev_s": stddev, "cv": stddev / mean if spread and mean > 0 else None,
            "tokens_per_s": step_tokens / median if median > 0 else None}


def one_line(text, limit=300):
    return " ".join(str(text).split())[:limit]


def measure_length(peer, args, config, T, device, dtype, meter=None):
    """One length's cell. `meter` reads memory (memory_meter(device)); None: memory stays null, as on the CPU."""
    cell = empty_cell(args, T, peer.impl(args))
    started = time.perf_counter()
    model = step = None
    try:
        # This length's peak from here, before its model is built: an oom in the build or the warm-up then
        # reports this length's memory, never the previous length's higher peak.
        if meter is not None:
            meter.reset()
        torch.manual_seed(args.seed)
        model, step, axes = peer.build(config, args, device, dtype)
        cell["axes"].update(axes)
        for axis in ("partition", "logits_partition"):  # a tile of T tokens or more is no tiling at all
            cell["axes"][axis] = min(cell["axes"][axis], T)
        cell["uses_partition"] = cell["axes"]["partition"] != T
        cell["uses_logits_partition"] = cell["axes"]["logits_partition"] != T
        for p in model.parameters():  # as bpbench: gradients exist before the step and count in its base
            p.grad = torch.zeros_like(p)
        generator = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, config.vocab_size, (1, T), generator=generator).to(device)
        times, loss = [], None
        sync = meter.synchronize if meter is not None else (lambda: None)
        for run in range(args.warmup + args.repeat + (1 if meter is not None else 0)):
            for p in model.parameters():
                p.grad.zero_()
            measured_memory = run == args.warmup and meter is not None
            if measured_memory:  # as bpbench: from an empty cache, so the budget sees every byte; not timed
                sync()
                meter.empty_cache()
                meter.reset()
                base = meter.allocated()
            sync()
            t0 = time.perf_counter()
            loss = step(tokens)
            sync()
            if run >= args.warmup and not measured_memory:
                times.append(time.perf_counter() - t0)
            if measured_memory:
                cell["memory"] = memory_of(meter, base)
        cell["loss"] = loss.float().item()
        cell["time"] = time_of(times, args.warmup, tokens.numel())
    except torch.OutOfMemoryError as e:
        cell["status"], cell["reason"] = "oom", one_line(e)
        if meter is not None:
            cell["memory"] = memory_of(meter, 0)
            cell["memory"]["peak_above_base_bytes"] = cell["memory"]["peak_bytes"]
    except Exception as e:  # any failure is this length's, not the run's (Ctrl-C and sys.exit still stop it)
        cell["status"], cell["reason"] = "error", one_line(f"{type(e).__name__}: {e}")
        cell["loss"] = cell["memory"] = cell["time"] = None  # a failed length carries no numbers
    finally:
        del model, step
        if meter is not None:
            meter.empty_cache()
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
        meta["name"] = cpu_model_name()
    return meta


def cpu_model_name():
    """The processor as bpbench's own results name it (/proc/cpuinfo's "model name"), so that a history keeps
    a peer's runs and bpbench's on one machine together."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
    # The same GPU model and memory size (a PCIe and an SXM card of one name differ in memory), as bpbench's
    # own --resume: no table mixes two GPUs.
    for key in ("name", "total_memory_bytes"):
        if was.get("device", {}).get(key) != doc_meta["device"].get(key):
            sys.exit(f"{tool}: cannot resume from {args.out}: measured on a device whose {key} is "
                     f"{was.get('device', {}).get(key)!r}, this one's is {doc_meta['device'].get(key)!r} (valid: "
                     "the same device, or another --out)")
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
    if hasattr(peer, "prepare"):
        status = peer.prepare(args, argv)
        if status is not None:
            return status
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    config_json = preset_config_json(args.bpbench, args.model)
    if hasattr(peer, "check"):
        peer.check(args, config_json)
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
    if heap_policy.is_set():
        doc["meta"]["heap"] = heap_policy.NOTE
    if hasattr(peer, "meta"):
        peer.meta(args, doc["meta"])
    kept = resumable_cells(args, doc["meta"], impl, tool)
    if hasattr(peer, "keeps"):
        kept = {T: cell for T, cell in kept.items() if peer.keeps(args, cell)}
    why_not = peer.unavailable(args)
    measure = getattr(peer, "measure", None)  # lengths measured in the peer's own processes: no meter here
    config = None if why_not or measure else peer.config(config_json)
    meter = None if why_not or measure else METER_FACTORY(device, args)
    if meter is not None and device.type == "cpu" and args.budget_bytes is not None:
        meter.set_budget(args.budget_bytes)  # the tracking allocator's budget, as bpbench's CPU cells have
    failed = []
    for T in args.seq_len:
        if T in kept:
            doc["cells"].append(kept[T])
            write_atomically(args.out, doc)
            print(f"{impl} {args.model} T={T}: kept from {args.out} ({kept[T]['status']})", file=sys.stderr)
            continue
        if why_not:
            cell = empty_cell(args, T, impl)
            cell["status"], cell["reason"] = "skipped", why_not
        elif measure:
            cell = measure(args, config_json, T)
        else:
            cell = measure_length(peer, args, config, T, device, dtype, meter)
        if cell["status"] == "error":
            failed.append(T)
        doc["cells"].append(cell)
        write_atomically(args.out, doc)  # nothing measured is lost if a later length kills the process
        peak = cell["memory"]["peak_bytes"] / 2**30 if cell["memory"] else None
        told = cell["status"] in ("skipped", "error")
        per_rank = ", ".join(f"{r['peak_bytes'] / 2**30:.2f}" if r.get("peak_bytes") is not None else "-"
                             for r in cell.get("ranks") or [])
        print(f"{impl} {args.model} T={T}: {cell['status']}" + (f" ({cell['reason']})" if told else "")
              + (f", peak {peak:.2f} GiB" if peak is not None else "")
              + (f" (highest rank; per rank GiB: {per_rank})" if per_rank else "")
              + (f", step {cell['time']['median_s']:.3f} s" if cell["time"] else ""), file=sys.stderr)
    doc["complete"] = True
    doc["meta"]["end_time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_atomically(args.out, doc)
    if failed:  # every length was tried and written; the caller (scripts/paper_gpu.sh) learns which failed
        print(f"{tool}: {len(failed)} of {len(args.seq_len)} lengths failed with status \"error\" (T="
              + ", ".join(str(T) for T in failed) + f"; see {args.out})", file=sys.stderr)
        return 1
    return 0
