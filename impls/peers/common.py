"""common.py: what every peer module shares: the command line, the measured step, results cells, resume.

A peer is something a user would run instead of bpbench's strategies, measured on the same network (the
bpbench preset itself: `bpbench hf-config MODEL` writes the config.json transformers builds from) and written
as bpbench results cells, so that `bpbench report RUN PEER...` and `bpbench compare` put it in one table. Each
peer module (registry.py lists them) says how to build its model and run one step; this module measures that
step as bpbench measures a cell:
  - on CUDA the model is built on the device itself (causal_lm: from_config under `with
    torch.device(device)`), never on the host and then copied;
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
read through one object, an interface.Meter (CudaMeter on CUDA, cpu_meter.CpuMeter on the CPU); METER_FACTORY
makes it, so that tests/peers/ can measure a fake peer on a fake meter.

A peer is a module (or an object: fused_loss.FusedLossPeer) that satisfies interface.Peer: impl, describe,
versions, unavailable, config, build (`step(tokens)` runs forward + backward and returns the detached loss;
`axes` overrides the cell's axes where the peer chunks), with interface.HasArguments' add_arguments for
options of its own, and interface.MeasuresOwnProcesses' hooks where it measures each length in processes of
its own (alst_ulysses.py: P ranks). registry.py lists every peer.
"""

from __future__ import annotations

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
import types
from collections.abc import Callable
from typing import Any

import torch

from . import cpu_meter, heap_policy
from .interface import Args, Cell, ConfigJson, HasArguments, MeasuresOwnProcesses, Meter, Peer, Step

SCHEMA = "bpbench.results/1"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEPT_STATUSES = ("ok", "oom")


def parser(peer: Peer, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", required=True, help="a bpbench preset (bpbench list models)")
    p.add_argument("--seq-len", type=int, nargs="+", required=True)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float64"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-bytes", type=int, default=None,
                   help="cap memory at this many bytes: CUDA's caching allocator "
                        "(set_per_process_memory_fraction), on the CPU bpbench's tracking allocator's budget")
    p.add_argument("--bpbench", default=os.path.join(REPO, "build", "bpbench"))
    p.add_argument("--cpu-meter", default=None,
                   help="bpbench's CPU meter library (default: libbpbench_peer_meter.so beside --bpbench)")
    p.add_argument("--out", required=True, help="results.json to write")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished lengths of --out (status ok or oom) and run the rest")
    if isinstance(peer, HasArguments):
        peer.add_arguments(p)
    return p


def parse_args(peer: Peer, description: str, argv: list[str]) -> Args:
    p = parser(peer, description)
    a = p.parse_args(argv)
    if any(t < 2 for t in a.seq_len):
        p.error("--seq-len: every length must be >= 2")
    if a.repeat < 1 or a.warmup < 0:
        p.error("--repeat must be >= 1 and --warmup >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible to torch (valid: cuda with a GPU, or cpu)")
    return a


def preset_config_json(bpbench: str, model: str) -> ConfigJson:
    """The config.json of a bpbench preset, from bpbench itself (transformers 5's form)."""
    if not os.path.exists(bpbench):
        sys.exit(f"peer: bpbench binary not found at {bpbench} (build it, or pass --bpbench)")
    run = subprocess.run([bpbench, "hf-config", model], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"peer: {run.stderr.strip()}")
    config_json: ConfigJson = json.loads(run.stdout)
    return config_json


def hub_form(config_json: ConfigJson) -> ConfigJson:
    """The same config in transformers 4.x's form: "rope_theta" and "rope_scaling" at the top level."""
    c = dict(config_json)
    rope = dict(c.pop("rope_parameters", {}))
    if "rope_theta" in rope:
        c["rope_theta"] = rope.pop("rope_theta")
    c["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    return c


def auto_config(config_json: ConfigJson) -> Any:
    from transformers import AutoConfig
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config_json, f)
        return AutoConfig.from_pretrained(d)


def causal_lm(config: Any, dtype: torch.dtype, device: torch.device) -> Any:
    """transformers' model of `config` with SDPA attention (`dtype=` in 5.x, `torch_dtype=` in 4.x), built on
    `device` itself: built on the host and then copied, an 8B model would take its host RAM and the copy's
    time."""
    import transformers
    from transformers import AutoModelForCausalLM
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", **{key: dtype})


class CudaMeter:
    """interface.Meter of the CUDA caching allocator of one device: everything measure_length reads of
    memory."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def reset(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def reserved_peak(self) -> int | None:
        return torch.cuda.max_memory_reserved(self.device)

    def set_budget(self, budget_bytes: int) -> None:
        """The caching allocator capped at that share of the device's memory (it raises OutOfMemoryError)."""
        total = torch.cuda.get_device_properties(self.device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget_bytes / total), self.device)

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


def memory_meter(device: torch.device, args: Args) -> Meter:
    """The meter of `device`: the CUDA allocator's statistics, or bpbench's tracking allocator on the CPU."""
    if device.type == "cuda":
        return CudaMeter(device)
    library = args.cpu_meter or cpu_meter.library_path(args.bpbench)
    if not os.path.exists(library):
        sys.exit(f"peer: bpbench's CPU meter {library} not found (build it: cmake --build build --target "
                 "bpbench_peer_meter, or pass --cpu-meter)")
    return cpu_meter.CpuMeter(library)


METER_FACTORY: Callable[[torch.device, Args], Meter] = memory_meter  # tests/peers/ put a fake meter here


def base_axes(args: Args, T: int, impl: str) -> dict[str, Any]:
    return {"model": args.model, "objective": "sft", "dtype": args.dtype, "batch": 1, "seq_len": T,
            "impl": impl, "partition": T, "logits_partition": T, "lora_rank": 0, "lora_alpha": 64.0,
            "group": 8, "prompt_len": -1, "padding": False, "beta": 0.1, "epsilon": 0.2, "offload": "none"}


def empty_cell(args: Args, T: int, impl: str) -> Cell:
    return {"axes": base_axes(args, T, impl), "threads": torch.get_num_threads(), "status": "ok",
            "reason": "", "loss": None, "wall_s": 0.0, "uses_partition": False,
            "uses_logits_partition": False, "rope": None, "memory": None, "time": None, "grad_error": None}


def memory_of(meter: Meter, base: int) -> dict[str, Any]:
    peak = meter.peak()
    memory: dict[str, Any] = {"base_bytes": base, "peak_bytes": peak, "peak_above_base_bytes": peak - base,
                              "peak_by_category": {}, "estimate_bytes": None}
    reserved = meter.reserved_peak()
    if reserved is not None:  # a caching allocator's (CUDA); the CPU has none, as bpbench's CPU cells
        memory["reserved_peak_bytes"] = reserved
    return memory


def time_of(times: list[float], warmup: int, step_tokens: int) -> dict[str, Any]:
    """results.json's time object, as bpbench's time_stats (harness/run/cell_steps.cpp) writes it."""
    median = statistics.median(times)
    spread = len(times) >= 2
    stddev = statistics.stdev(times) if spread else None  # the sample standard deviation (n - 1)
    mean = statistics.fmean(times)
    return {"median_s": median, "min_s": min(times), "max_s": max(times), "count": len(times),
            "warmup": warmup, "runs_s": times, "stddev_s": stddev,
            "cv": stddev / mean if stddev is not None and mean > 0 else None,
            "tokens_per_s": step_tokens / median if median > 0 else None}


def summary(doc: str | None) -> str:
    """A module's docstring's first paragraph: its command line's description."""
    return (doc or "").split("\n\n")[0]


def one_line(text: object, limit: int = 300) -> str:
    return " ".join(str(text).split())[:limit]


def measure_length(peer: Peer | types.ModuleType, args: Args, config: Any, T: int, device: torch.device,
                   dtype: torch.dtype, meter: Meter | None = None) -> Cell:
    """One length's cell. `meter` reads memory (memory_meter(device)); None: memory stays null, as on the
    CPU."""
    cell = empty_cell(args, T, peer.impl(args))
    started = time.perf_counter()
    model: torch.nn.Module | None = None
    step: Step | None = None
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
        times: list[float] = []
        loss: torch.Tensor | None = None
        sync = meter.synchronize if meter is not None else (lambda: None)
        for run in range(args.warmup + args.repeat + (1 if meter is not None else 0)):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            measured = meter if run == args.warmup else None  # the memory step (with a meter); not timed
            if measured is not None:  # as bpbench: from an empty cache, so the budget sees every byte
                sync()
                measured.empty_cache()
                measured.reset()
                base = measured.allocated()
            sync()
            t0 = time.perf_counter()
            loss = step(tokens)
            sync()
            if run >= args.warmup and measured is None:
                times.append(time.perf_counter() - t0)
            if measured is not None:
                cell["memory"] = memory_of(measured, base)
        assert loss is not None  # --repeat >= 1: a step ran
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


def device_meta(device: torch.device) -> dict[str, Any]:
    meta: dict[str, Any] = {"type": device.type, "torch": torch.__version__}
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


def cpu_model_name() -> str:
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


def git_commit() -> str | None:
    try:
        run = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
        return run.stdout.strip() if run.returncode == 0 else None
    except OSError:
        return None


def write_atomically(path: str, doc: object) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def resumable_cells(args: Args, doc_meta: dict[str, Any], impl: str, tool: str) -> dict[int, Cell]:
    """The finished cells of --out that this run keeps ({seq_len: cell}); exits 2 for a file of another
    run."""
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
                     f"{was.get('device', {}).get(key)!r}, this one's is {doc_meta['device'].get(key)!r} "
                     "(valid: the same device, or another --out)")
    kept: dict[int, Cell] = {}
    for cell in old.get("cells", []):
        axes = cell.get("axes", {})
        if (cell.get("status") in KEPT_STATUSES and axes.get("impl") == impl
                and axes.get("dtype") == args.dtype and axes.get("seq_len") in args.seq_len):
            kept[axes["seq_len"]] = cell
    return kept


def run(peer: Peer | types.ModuleType, tool: str, description: str, argv: list[str]) -> int:
    """The whole script: every length of --seq-len measured (or kept, or skipped) into --out. `peer`: an
    interface.Peer, a peer module's own (sys.modules[__name__]) included: held to it here, and by mypy through
    registry.py."""
    if not isinstance(peer, Peer):
        raise TypeError(f"{tool}: {peer!r} is not a peer: interface.Peer's functions are missing")
    own = peer if isinstance(peer, MeasuresOwnProcesses) else None  # lengths measured in its own processes
    args = parse_args(peer, description, argv)
    if own is not None:
        status = own.prepare(args, argv)
        if status is not None:
            return status
    why_not = peer.unavailable(args)
    if not why_not:  # a run whose every length is skipped never imports transformers (seconds of start-up)
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
    config_json = preset_config_json(args.bpbench, args.model)
    if own is not None:
        own.check(args, config_json)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    impl = peer.impl(args)
    start = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    versions = {"torch": torch.__version__, **peer.versions()}
    doc: dict[str, Any] = {
        "schema": SCHEMA, "complete": False, "cells_total": len(args.seq_len),
        "meta": {"bpbench_version": None, "peer": peer.describe(args), "versions": versions,
                 "argv": [sys.argv[0]] + list(argv), "device": device_meta(device),
                 "threads": torch.get_num_threads(), "isolate": False, "git_commit": git_commit(),
                 "start_time": start, "hostname": socket.gethostname(),
                 "scenario_name": f"{tool} {args.model}", "scenario": None, "hf_config": config_json},
        "cells": []}
    if heap_policy.is_set():
        doc["meta"]["heap"] = heap_policy.NOTE
    if own is not None:
        own.meta(args, doc["meta"])
    kept = resumable_cells(args, doc["meta"], impl, tool)
    if own is not None:
        kept = {T: cell for T, cell in kept.items() if own.keeps(args, cell)}
    here = not why_not and own is None  # measured in this process: its config and meter
    config = peer.config(config_json) if here else None
    meter = METER_FACTORY(device, args) if here else None
    if meter is not None and args.budget_bytes is not None:
        meter.set_budget(args.budget_bytes)  # CUDA's allocator capped, or the tracking allocator's budget
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
        elif own is not None:
            cell = own.measure(args, config_json, T)
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
