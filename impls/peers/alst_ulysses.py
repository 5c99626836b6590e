"""alst_ulysses.py: ALST (Arctic Long Sequence Training) over P ranks: DeepSpeed's Ulysses sequence
parallelism for transformers (deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF, DeepSpeed
0.19.8) with ALST's tiled MLP and tiled logits + loss (alst_tiled.py's), on transformers' model with
non-reentrant gradient checkpointing; SFT on one sequence (impl "alst-ulysses").

Usage (PYTHONPATH=impls):
  python -m peers.alst_ulysses --model qwen3-8b --seq-len 65536 131072 --ranks 8
                               --out out/alst-ulysses/results.json
                               [--partition N] [--logits-partition N] [--threads-per-rank N]
                               [--comm-timeout S] [--length-timeout S] [the options of common.py]

Each length runs in P fresh worker processes that this script starts (this module again, with --worker), one
per rank: Gloo on the CPU, NCCL on CUDA with GPU r for rank r (P GPUs needed); they meet through a file store
in a temporary directory (no port). Every rank measures its own step with common.measure_length on its own
meter (on the CPU bpbench's tracking allocator, cpu_meter.py), and this process writes the cells:
  - memory is the highest rank's (its peak_bytes and base_bytes): what a per-device budget must hold;
  - time is rank 0's (tokens_per_s counts the whole sequence, as bpbench's distributed cells);
  - loss is the global loss (the ranks' shares all-reduced);
  - world_size is P and "ranks" holds each rank's status, peak, base, median step time and collectives (calls,
    logical bytes and, on Gloo, host seconds of all_to_all, all_gather and all_reduce in the last step), as
    bpbench's distributed cells (harness/run/cell_child.cpp), so `bpbench report` shows the per-rank table.
    With --ranks 1 there is no sequence parallelism (DeepSpeed registers nothing) and neither field is
    written.
A rank that fails (an exception, out of memory, a crash) makes the length's cell "oom" (any rank out of
memory) or "error", with that rank's one-line reason; its peers, blocked in a collective with it, are killed
after GRACE_S seconds. Collectives give up after --comm-timeout seconds (default $BPBENCH_DIST_TIMEOUT_S, else
300), and --length-timeout bounds a whole length: no length hangs. --resume keeps only cells of the same
--ranks.

Layout, as bpbench's own (impls/machinery/sequence_parallel.h) and DeepSpeed's UlyssesSPDataLoaderAdapter:
rank r holds positions [r Ts, (r+1) Ts), Ts = ceil(T / P), with their position_ids (UlyssesSPAttentionHF
requires them) and the globally shifted labels (shift_labels). DeepSpeed refuses a length not divisible by P;
here the sequence is padded at its end to P Ts (token 0, target -100, positions past T), exact for causal
attention, as bpbench pads. Each rank's loss is its tokens' summed cross-entropy over the global target count
(all-reduced: the normaliser), so the ranks' losses add up to the mean, and every rank's backward puts its
rows' part into each gradient; the step then sums the gradients over the ranks (all_reduce SUM, one call per
parameter) and the losses. There is no DeepSpeed engine and no ZeRO: every rank holds whole parameters and
gradients (bpbench's ulysses keeps ZeRO-2 gradient shards instead). --partition / --logits-partition are
alst_tiled.py's tiles (ALST's defaults), applied to each rank's Ts rows.

This module is the command line and the launcher (its lengths' workers, their cells merged); a worker's
own body, from the process group to its cell, is alst_ulysses_rank.py's. No op is JIT-built on the CPU: the
workers skip DeepSpeed's shared-memory all-reduce (skip_shm_comm_build; alst_ulysses_rank.py says why).
DeepSpeed's accelerator is set to --device's (DS_ACCELERATOR): detected, it would be CUDA's on a GPU machine
even for --device cpu.
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.alst_ulysses
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

from . import heap_policy

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported (the workers inherit it)

from . import alst_tiled  # (puts .peers/deepspeed first on sys.path)

import torch
import transformers

from . import common, cpu_meter, launch
# build is this peer's (interface.Peer: common.measure_length calls it in each worker); skip_shm_comm_build
# keeps its name here for whoever reaches it through this module.
from .alst_ulysses_rank import build as build, rows_of, skip_shm_comm_build as skip_shm_comm_build, worker
from .interface import Args, Cell, ConfigJson

TOOL = "alst_ulysses"
MODULE = "alst_ulysses"  # the workers: python -m peers.alst_ulysses --worker DIR
GRACE_S = 10.0  # a failed rank's peers, blocked in a collective with it, are killed this long after it exits
POLL_S = 0.1


def impl(args: Args) -> str:
    return "alst-ulysses"


def default_comm_timeout() -> float:
    try:
        return float(os.environ.get("BPBENCH_DIST_TIMEOUT_S", 300))
    except ValueError:
        return 300.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    alst_tiled.add_arguments(p)
    p.add_argument("--ranks", type=int, default=2,
                   help="sequence-parallel ranks P (processes; CUDA: one GPU each)")
    p.add_argument("--threads-per-rank", type=int, default=None,
                   help="torch threads of each rank (default on the CPU: the usable cores // P, at least 1)")
    p.add_argument("--comm-timeout", type=float, default=default_comm_timeout(),
                   help="seconds a collective waits for its peers (default $BPBENCH_DIST_TIMEOUT_S, else "
                        "300)")
    p.add_argument("--length-timeout", type=float, default=None,
                   help="seconds one length may take in all, workers' start included (default: no limit)")
    p.add_argument("--save-grads", default=None, metavar="DIR",
                   help="tests: rank 0 saves the summed gradients of each step to DIR/grads_T<T>.pt (slows "
                        "the step)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # a rank's process: its launch directory


def describe(args: Args) -> str:
    mlp = f"{args.partition} tokens" if args.partition else "hidden size (ALST)"
    logits = f"{args.logits_partition} tokens" if args.logits_partition else "~1 GiB fp32 logits (ALST)"
    backend = "nccl" if args.device == "cuda" else "gloo"
    ranks = f"{args.ranks} rank" + ("s" if args.ranks != 1 else "")
    return (f"ALST over {ranks} ({backend}): DeepSpeed {alst_tiled.deepspeed_version()} Ulysses sequence "
            f"parallelism (UlyssesSPAttentionHF, sdpa core) + TiledMLP + TiledFusedLogitsLoss on "
            f"transformers {transformers.__version__} gradient checkpointing; gradients all-reduced in the "
            f"step, whole on every rank (no ZeRO); MLP tile {mlp}, loss tile {logits} (of each rank's rows); "
            f"T padded to a multiple of the ranks; memory: the highest rank's")


def versions() -> dict[str, str | None]:
    return alst_tiled.versions()


def unavailable(args: Args) -> str | None:
    # Its tiles, and DeepSpeed's ulysses_sp (UlyssesSPAttentionHF's too).
    return alst_tiled.unavailable(args, TOOL)


def config(config_json: ConfigJson) -> Any:
    return common.auto_config(config_json)


def refusal(config_json: ConfigJson, ranks: int, model: str) -> str | None:
    """Why `ranks` cannot split the preset's attention by heads (DeepSpeed's rule, and bpbench's:
    sequence_parallel_refusal), in one line naming the valid counts; None where it can."""
    heads, kv = config_json["num_attention_heads"], config_json.get("num_key_value_heads") or config_json[
        "num_attention_heads"]

    def splits(p: int) -> bool:
        return heads % p == 0 and (kv % p == 0 or p % kv == 0)

    if ranks < 1:
        return f"--ranks must be >= 1, got {ranks}"
    if splits(ranks):
        return None
    valid = ", ".join(str(p) for p in range(1, heads + 1) if splits(p))
    return (f"--ranks {ranks} cannot split {model}'s attention by heads ({heads} query heads, {kv} K/V "
            f"heads: the ranks must divide the query heads, and divide the K/V heads or be a multiple of "
            f"them); valid rank counts: {valid}")


# ------------------------------------------------------------------------------------------------------------
# The launcher (a rank, in its worker process: alst_ulysses_rank.py)

def last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        return common.one_line(lines[-1]) if lines else ""
    except OSError:
        return ""


def exit_reason(code: int, log: str) -> str:
    if code < 0:
        sig = -code
        try:
            why = f"killed by signal {sig} ({signal.Signals(sig).name})"
        except ValueError:
            why = f"killed by signal {sig}"
        why += " before writing its result"
        if sig == signal.SIGKILL:
            why += " (the system's out-of-memory killer sends this)"
        return why
    tail = last_line(log)  # a Python error's last line
    return f"exited with status {code} and no result" + (f": {tail}" if tail else "")


def kill(process: subprocess.Popen[bytes]) -> None:
    """A worker and whatever it started (its own session), at once."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def launch_length(args: Args, argv: list[str], T: int,
                  config_json: ConfigJson) -> tuple[list[tuple[Cell | None, str, int]], float]:
    """The P workers of length T; [(cell or None, reason, exit order)] per rank, and the seconds it took."""
    P = args.ranks
    started = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="bpbench-alst-ulysses-")
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[str] = []
    try:
        common.write_atomically(os.path.join(tmp, "config.json"), config_json)
        command = launch.module_argv(MODULE, [*argv, "--seq-len", str(T), "--worker", tmp])
        if args.threads_per_rank:
            command += ["--threads-per-rank", str(args.threads_per_rank)]
        for r in range(P):
            env = dict(launch.package_env(), RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(P),
                       LOCAL_WORLD_SIZE=str(P))
            if args.device == "cpu" and args.threads_per_rank:
                env["OMP_NUM_THREADS"] = str(args.threads_per_rank)
            logs.append(os.path.join(tmp, f"rank{r}.log"))
            with open(logs[-1], "w") as log:
                procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        exited: dict[int, int] = {}
        reasons: dict[int, str] = {}
        failed_at: float | None = None
        results: list[Cell | None] = [None] * P

        def result(r: int) -> Cell | None:
            path = os.path.join(tmp, f"rank{r}.json")
            try:
                with open(path) as f:
                    cell: Cell = json.load(f)
                    return cell
            except (OSError, ValueError):
                return None

        while len(exited) < P:
            now = time.perf_counter()
            for r, p in enumerate(procs):
                if r in exited or p.poll() is None:
                    continue
                exited[r] = len(exited)
                got = results[r] = result(r)
                if got is None:
                    reasons[r] = exit_reason(p.returncode, logs[r])
                if (got is None or got["status"] != "ok") and failed_at is None:
                    failed_at = now
            if len(exited) == P:
                break
            over = args.length_timeout is not None and now - started > args.length_timeout
            if over or (failed_at is not None and now - failed_at > GRACE_S):
                for r, p in enumerate(procs):
                    if r not in exited:
                        kill(p)
                        exited[r] = len(exited)
                        results[r] = result(r)
                        if results[r] is None:
                            reasons[r] = (f"no result after --length-timeout {args.length_timeout:g} s"
                                          if over else f"killed {GRACE_S:g} s after another rank failed")
                break
            time.sleep(POLL_S)
        return [(results[r], reasons.get(r, ""), exited[r]) for r in range(P)], time.perf_counter() - started
    finally:
        for p in procs:  # Ctrl-C or an error here: no rank outlives the launcher
            if p.poll() is None:
                kill(p)
        shutil.rmtree(tmp, ignore_errors=True)


STATUS_RANK = {"ok": 0, "skipped": 1, "error": 2, "oom": 3}  # the worst rank's status is the cell's


def merge(args: Args, T: int, ranks: list[tuple[Cell | None, str, int]], wall_s: float) -> Cell:
    """The length's cell from its ranks' (harness/run/cell_child.cpp's run_cell_distributed, in Python): rank
    0's record, the worst status (oom before error) with the reason of the rank that failed first, the highest
    rank's memory, and one record per rank."""
    P = args.ranks
    cells: list[tuple[Cell, int]] = []
    for cell, reason, order in ranks:
        if cell is None:
            cell = common.empty_cell(args, T, impl(args))
            cell["status"], cell["reason"] = "error", reason
        cells.append((cell, order))
    merged = dict(cells[0][0])
    worst = max(STATUS_RANK[c["status"]] for c, _ in cells)
    if worst:
        failing = [(order, r, c) for r, (c, order) in enumerate(cells) if STATUS_RANK[c["status"]] == worst]
        _, r, c = min(failing)
        merged["status"], merged["reason"] = c["status"], common.one_line(f"rank {r} of {P}: {c['reason']}")
    peaks = [(c["memory"]["peak_bytes"], c["memory"]) for c, _ in cells if c.get("memory")]
    if peaks:
        memory = dict(max(peaks, key=lambda pm: pm[0])[1])
        memory["peak_above_base_bytes"] = memory["peak_bytes"] - memory["base_bytes"]
        merged["memory"] = memory
    if merged["status"] != "ok":
        merged["loss"] = merged["time"] = None
        if merged["status"] == "error":
            merged["memory"] = None  # a failed length carries no numbers (common.measure_length)
    # The tiles apply to each rank's Ts rows: one of Ts rows or more is no tiling (common's rule, per rank).
    Ts = rows_of(T, P)
    for axis, flag in (("partition", "uses_partition"), ("logits_partition", "uses_logits_partition")):
        if merged["axes"][axis] >= Ts:
            merged["axes"][axis] = T
        merged[flag] = merged["axes"][axis] != T
    merged["wall_s"] = wall_s
    if P > 1:
        merged["world_size"] = P
        merged["ranks"] = [{"rank": r, "status": c["status"],
                            "peak_bytes": c["memory"]["peak_bytes"] if c.get("memory") else None,
                            "base_bytes": c["memory"]["base_bytes"] if c.get("memory") else None,
                            "time_median_s": c["time"]["median_s"] if c.get("time") else None,
                            "comm": c.get("comm")} for r, (c, _) in enumerate(cells)]
        merged["comm"] = cells[0][0].get("comm")
    else:
        merged.pop("comm", None)
    if merged.get("comm") is None:
        merged.pop("comm", None)
    return merged


def gpus(P: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(P):
        props = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": props.name, "total_memory_bytes": props.total_memory,
                    "capability": f"{props.major}.{props.minor}"})
    return out


# ------------------------------------------------------------------------------------------------------------
# common.run's hooks for a peer that measures each length on P worker processes

def prepare(args: Args, argv: list[str]) -> int | None:
    """DeepSpeed's accelerator (the workers inherit it: detected, a GPU machine's would be CUDA's even for
    --device cpu, and its comm backend would bind a GPU to the Gloo group); a worker runs its rank and ends
    here; else the launcher's checks."""
    os.environ["DS_ACCELERATOR"] = "cuda" if args.device == "cuda" else "cpu"
    if args.worker:
        return worker(sys.modules[__name__], TOOL, args)
    if args.ranks < 1:
        sys.exit(f"{TOOL}: --ranks must be >= 1, got {args.ranks}")
    if args.comm_timeout <= 0 or (args.length_timeout is not None and args.length_timeout <= 0):
        sys.exit(f"{TOOL}: --comm-timeout and --length-timeout must be > 0 seconds")
    if args.threads_per_rank is not None and args.threads_per_rank < 1:
        sys.exit(f"{TOOL}: --threads-per-rank must be >= 1")
    if args.device == "cpu":
        library = args.cpu_meter or cpu_meter.library_path(args.bpbench)
        if not os.path.exists(library):  # as common.memory_meter says it, before any worker starts
            sys.exit(f"{TOOL}: bpbench's CPU meter {library} not found (build it: cmake --build build "
                     "--target bpbench_peer_meter, or pass --cpu-meter)")
        if args.threads_per_rank is None:
            args.threads_per_rank = max(1, len(os.sched_getaffinity(0)) // args.ranks)
    if args.save_grads:
        os.makedirs(args.save_grads, exist_ok=True)
    args.worker_argv = [a for a in argv if a != "--resume"]
    return None


def check(args: Args, config_json: ConfigJson) -> None:
    why = refusal(config_json, args.ranks, args.model)
    if why:
        sys.exit(f"{TOOL}: {why}")
    if args.device == "cuda" and args.ranks > torch.cuda.device_count():
        sys.exit(f"{TOOL}: --ranks {args.ranks} needs {args.ranks} GPUs (one a rank, NCCL); "
                 f"{torch.cuda.device_count()} visible")


def meta(args: Args, meta: dict[str, Any]) -> None:
    if args.device == "cuda":
        meta["device"]["gpus"] = gpus(args.ranks)  # rank r ran on gpus[r]
    meta["threads"] = args.threads_per_rank or torch.get_num_threads()
    meta["isolate"] = True  # every length in processes of its own


def keeps(args: Args, cell: Cell) -> bool:
    return cell.get("world_size", 1) == args.ranks  # another --ranks is another measurement


def measure(args: Args, config_json: ConfigJson, T: int) -> Cell:
    ranks, wall_s = launch_length(args, args.worker_argv, T, config_json)
    return merge(args, T, ranks, wall_s)


if TYPE_CHECKING:  # mypy holds this module to the peers' interface (ctest's python_types)
    from . import alst_ulysses as _this
    from .interface import HasArguments, MeasuresOwnProcesses, Peer

    _peer: Peer = _this
    _HasArguments: HasArguments = _this
    _MeasuresOwnProcesses: MeasuresOwnProcesses = _this


if __name__ == "__main__":
    sys.exit(common.run(sys.modules[__name__], TOOL, common.summary(__doc__), sys.argv[1:]))
