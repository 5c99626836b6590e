"""interface.py: what common.run asks of a peer, and of the memory meter it measures a step on, as Protocols.

A peer is a module (hf_checkpoint.py) or an object (fused_loss.FusedLossPeer) with Peer's functions;
common.run checks it at run time (isinstance against these runtime-checkable Protocols: the names exist) and
mypy checks the signatures of every peer statically (a TYPE_CHECKING block at the end of each peer's module
assigns it to a Peer: `python_types` in ctest). The optional hooks are Protocols of their own: a peer has all
of one or none of it.

  Peer                   impl, describe, versions, unavailable, config, build: enough to be measured
  HasArguments           add_arguments: its own options
  MeasuresOwnProcesses   prepare, check, meta, keeps, measure: a peer that measures each length in processes
                         of its own (alst_ulysses.py: P ranks) instead of common.measure_length in this
                         process
  Meter                  the memory statistics measure_length reads (common.CudaMeter, cpu_meter.CpuMeter)

No third-party import at run time: torch appears in annotations only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

Args = argparse.Namespace
# A preset's config.json, as `bpbench hf-config MODEL` prints it (transformers 5's form).
ConfigJson = dict[str, Any]
Cell = dict[str, Any]  # one results cell (reports/results.schema.json)
# tokens (1, T) -> the detached loss, after forward + backward.
Step = Callable[["torch.Tensor"], "torch.Tensor"]


@runtime_checkable
class Peer(Protocol):
    def impl(self, args: Args) -> str:
        """The cells' impl: one of impls/registry.cpp's peer_names() (registry.py lists the same)."""
        ...

    def describe(self, args: Args) -> str:
        """meta.peer: what ran, with versions."""
        ...

    def versions(self) -> dict[str, str | None]:
        """The versions that identify the peer's code (--resume refuses a file of others)."""
        ...

    def unavailable(self, args: Args) -> str | None:
        """Why it cannot run here (then every length is a "skipped" cell with this reason), or None."""
        ...

    def config(self, config_json: ConfigJson) -> Any:
        """transformers' config of the preset, in the form of the transformers the peer runs."""
        ...

    def build(self, config: Any, args: Args, device: torch.device,
              dtype: torch.dtype) -> tuple[torch.nn.Module, Step, dict[str, Any]]:
        """The model on `device`, the step that runs forward + backward on it, and the axes the peer sets
        (partition, logits_partition, offload) where it chunks or offloads."""
        ...


@runtime_checkable
class HasArguments(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The peer's own options, beside common.parser's."""
        ...


@runtime_checkable
class MeasuresOwnProcesses(Protocol):
    def prepare(self, args: Args, argv: list[str]) -> int | None:
        """First thing after parsing: checks and settings; an int ends common.run with that exit status (a
        worker process of the peer)."""
        ...

    def check(self, args: Args, config_json: ConfigJson) -> None:
        """The preset against the peer; a refusal exits with one line."""
        ...

    def meta(self, args: Args, meta: dict[str, Any]) -> None:
        """What meta says beyond common's fields (its GPUs, threads)."""
        ...

    def keeps(self, args: Args, cell: Cell) -> bool:
        """Whether a finished cell of --out is this run's to keep on --resume."""
        ...

    def measure(self, args: Args, config_json: ConfigJson, T: int) -> Cell:
        """The length's cell, measured in the peer's own processes."""
        ...


@runtime_checkable
class Meter(Protocol):
    """One device's allocator statistics: bytes the step's tensors hold, as bpbench counts its own cells'."""

    def reset(self) -> None:
        """The peak restarts from what is allocated now."""
        ...

    def allocated(self) -> int: ...

    def peak(self) -> int: ...

    def reserved_peak(self) -> int | None:
        """A caching allocator's reserved peak; None where there is none (the CPU)."""
        ...

    def set_budget(self, budget_bytes: int) -> None:
        """Cap the bytes allocated: an allocation beyond raises torch.OutOfMemoryError."""
        ...

    def empty_cache(self) -> None: ...

    def synchronize(self) -> None: ...
