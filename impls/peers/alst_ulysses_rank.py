"""alst_ulysses_rank.py: one rank of peers.alst_ulysses (alst_ulysses.py), the body of each worker process it
starts: the process group, DeepSpeed's UlyssesSP registered in place of the model's attention, the rank's step
on its rows of the padded sequence, its collectives counted, and its cell written for the launcher to merge.
alst_ulysses.py's docstring says what is measured and how the lengths, ranks and cells fit together.

DeepSpeed's comm backend JIT-compiles its shared-memory all-reduce (deepspeed_shm_comm, about 75 s on 2 cores,
cached in ~/.cache/torch_extensions afterwards) whenever it starts on the CPU accelerator. It serves only
inference_all_reduce (tensor-parallel inference), never the collectives here (torch.distributed's Gloo), and
no environment variable skips it (DS_BUILD_SHM_COMM acts at install time only), so the workers mark the op
incompatible in DeepSpeed's table of ops (skip_shm_comm_build) and nothing is compiled.
"""

import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from . import alst_tiled  # (puts .peers/deepspeed first on sys.path)

import torch

from . import common
from .interface import Args, Cell, Peer, Step


class CommCounter:
    """The collectives of the last step, per kind as bpbench's comm.h counts them: calls, logical bytes
    (all_to_all: the input; all_gather: the output; all_reduce: the tensor) and, on Gloo, seconds of host wall
    time inside the call (peers' waits included). NCCL returns before the device has run the collective: no
    seconds there."""

    KINDS = {"all_to_all_single": "all_to_all", "all_gather": "all_gather", "all_reduce": "all_reduce"}

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, Any]] = {}
        self.last: dict[str, dict[str, Any]] | None = None
        self.timed = True

    def install(self, timed: bool) -> None:
        self.timed = timed
        dist = torch.distributed
        for function, kind in self.KINDS.items():
            original = getattr(dist, function)

            def counted(*a: Any, _original: Callable[..., Any] = original, _function: str = function,
                        _kind: str = kind, **k: Any) -> Any:
                nbytes = self.nbytes(_function, a, k)
                t0 = time.perf_counter()
                out = _original(*a, **k)
                entry = self.counts.setdefault(_kind, {"calls": 0, "bytes": 0})
                entry["calls"] += 1
                entry["bytes"] += nbytes
                if self.timed:
                    entry["seconds"] = entry.get("seconds", 0.0) + time.perf_counter() - t0
                return out

            # DeepSpeed's comm (deepspeed.comm.torch) calls torch.distributed.X: counted there too.
            setattr(dist, function, counted)

    @staticmethod
    def nbytes(function: str, a: tuple[Any, ...], k: dict[str, Any]) -> int:
        def size(t: Any) -> int:
            return t.numel() * t.element_size() if torch.is_tensor(t) else 0

        if function == "all_to_all_single":
            return size(k.get("input", a[1] if len(a) > 1 else None))
        if function == "all_gather":
            return sum(size(t) for t in (k.get("tensor_list", a[0] if a else None) or []))
        return size(k.get("tensor", a[0] if a else None))

    def reset(self) -> None:
        self.counts = {}

    def stop(self) -> None:
        self.last = self.counts
        self.counts = {}


COUNTER = CommCounter()
_REGISTERED: list[int] = []  # the UlyssesSP registration, once per process


def skip_shm_comm_build() -> None:
    """No JIT build of DeepSpeed's shared-memory all-reduce at init (this module's docstring says why):
    build_shm_op (deepspeed/comm/torch.py) builds it only where deepspeed.ops.__compatible_ops__ says it can.
    The table is probed (compiler runs) on its first read: set before that, it is never probed; afterwards
    only this entry changes."""
    import deepspeed.ops
    if "__compatible_ops__" not in vars(deepspeed.ops):
        deepspeed.ops.__compatible_ops__ = {}
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def start_process_group(args: Args, rank: int, store: str) -> None:
    import deepspeed
    if args.device == "cpu":
        skip_shm_comm_build()
    deepspeed.init_distributed(dist_backend="nccl" if args.device == "cuda" else "gloo",
                               auto_mpi_discovery=False, verbose=False,
                               timeout=datetime.timedelta(seconds=args.comm_timeout),
                               init_method=f"file://{store}", rank=rank, world_size=args.ranks)


def rows_of(T: int, ranks: int) -> int:
    return -(-T // ranks)  # Ts = ceil(T / P)


def ulysses() -> Any:
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
    return UlyssesSPAttentionHF


def register_ulysses(model: Any, padded: int, ranks: int) -> None:
    """DeepSpeed's UlyssesSP in place of the model's sdpa attention (every later sdpa call in this process),
    for sequences of `padded` tokens over `ranks` ranks."""
    if ranks > 1 and not _REGISTERED:
        ulysses().register_with_transformers(model_name_or_path=model, core_attn_implementation="sdpa",
                                             sequence_parallel_size=ranks, micro_batch_size=1,
                                             seq_length=padded, seq_length_is_variable=False)
        _REGISTERED.append(padded)
    if _REGISTERED and _REGISTERED[0] != padded:
        raise RuntimeError(f"UlyssesSP was registered for {_REGISTERED[0]} tokens, not {padded}: one length "
                           "a process")


def build(config: Any, args: Args, device: torch.device,
          dtype: torch.dtype) -> tuple[torch.nn.Module, Step, dict[str, Any]]:
    """A rank's model and step (common.measure_length's peer.build); torch.distributed is up."""
    dist = torch.distributed
    P, r = dist.get_world_size(), dist.get_rank()
    T = args.seq_len[0]  # a worker runs one length
    Ts = rows_of(T, P)
    model, tiles = alst_tiled.tiled_model(config, args, device, dtype)
    logits_tile = tiles["logits_partition"]
    register_ulysses(model, P * Ts, P)
    params = list(model.parameters())
    names = [name for name, _ in model.named_parameters()]

    def step(tokens: torch.Tensor) -> torch.Tensor:
        COUNTER.reset()
        first, pad = r * Ts, P * Ts - tokens.shape[1]
        # The rank's rows of the padded sequence: token 0 past T; targets shifted globally (position t
        # predicts t+1; the last real position and the padding have none); the global positions.
        ids = torch.nn.functional.pad(tokens, (0, pad), value=0)[:, first:first + Ts]
        labels = torch.nn.functional.pad(tokens[:, 1:], (0, pad + 1), value=-100)[:, first:first + Ts]
        positions = torch.arange(first, first + Ts, device=tokens.device).unsqueeze(0)
        count = (labels != -100).sum()
        dist.all_reduce(count)  # the normaliser: every rank's targets
        hidden = model.model(input_ids=ids, position_ids=positions).last_hidden_state  # (1, Ts, d)
        loss = alst_tiled.tiled_loss(model, hidden, labels, logits_tile, count)
        loss.backward()
        for p in params:  # each rank's rows' part of every gradient, summed
            if p.grad is not None:
                dist.all_reduce(p.grad)
        total = loss.detach().to(torch.float64)
        dist.all_reduce(total)  # the shares add up to the loss
        COUNTER.stop()
        if args.save_grads and r == 0:
            torch.save({n: p.grad for n, p in zip(names, params)},
                       os.path.join(args.save_grads, f"grads_T{T}.pt"))
        return total

    return model, step, dict(tiles)


def worker(peer: Peer, tool: str, args: Args) -> int:
    """One rank of one length (args.seq_len[0]) of `peer` (alst_ulysses, whose build is this module's): its
    cell into <launch dir>/rank<r>.json, then exit 0; exit 1 only where even that failed. Exits at once after
    a failed length: its peers may be blocked in a collective."""
    rank = int(os.environ["RANK"])
    T = args.seq_len[0]
    cell: Cell
    try:
        if args.device == "cuda":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        if args.threads_per_rank:
            torch.set_num_threads(args.threads_per_rank)
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        with open(os.path.join(args.worker, "config.json")) as f:
            cfg = peer.config(json.load(f))
        meter = common.METER_FACTORY(device, args)  # the CPU meter before anything is allocated
        if args.budget_bytes is not None:
            meter.set_budget(args.budget_bytes)
        start_process_group(args, rank, os.path.join(args.worker, "store"))
        COUNTER.install(timed=device.type == "cpu")
        cell = common.measure_length(peer, args, cfg, T, device, getattr(torch, args.dtype), meter)
        cell["comm"] = COUNTER.last if cell["status"] == "ok" else None  # the measured step's, whole
    except Exception as e:  # before the step (meter, process group): this rank's error
        cell = common.empty_cell(args, T, peer.impl(args))
        cell["status"], cell["reason"] = "error", common.one_line(f"{type(e).__name__}: {e}")
    try:
        common.write_atomically(os.path.join(args.worker, f"rank{rank}.json"), cell)
        code = 0
    except OSError as e:
        print(f"{tool} rank {rank}: cannot write its result: {e}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if cell["status"] == "ok":
        torch.distributed.destroy_process_group()
    os._exit(code)  # no interpreter teardown: nothing waits on a peer that is gone
