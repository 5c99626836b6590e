"""cpu_meter.py: bpbench's own CPU memory meter inside a peer's Python process.

PyTorch keeps no CPU allocator statistics, so a peer on the CPU had no memory numbers. The build makes
libbpbench_peer_meter.so (profiles/peer_meter/): bpbench's tracking allocator (profiles/memory.cpp), the very
code that measures bpbench's own CPU cells. Loaded here after `import torch`, it installs itself over c10's
CPU allocator, so every CPU tensor the peer allocates from then on is counted as bpbench counts its own: live
bytes, peak bytes, and a budget that raises torch.OutOfMemoryError. Like bpbench, it turns oneDNN off (its
bf16 scratch buffers depend on the host's ISA). Install it before the model is built: tensors that exist
before are never counted.
"""

from __future__ import annotations

import ctypes
import os

LIBRARY = "libbpbench_peer_meter.so"


def library_path(bpbench: str) -> str:
    """The meter library the build puts beside the bpbench binary."""
    return os.path.join(os.path.dirname(os.path.abspath(bpbench)), LIBRARY)


class CpuMeter:
    """interface.Meter over the tracking allocator; the CPU has no cache and no streams."""

    def __init__(self, library: str) -> None:
        import torch  # noqa: F401  (libc10 must be loaded first: the library installs itself into it)
        self.lib = ctypes.CDLL(library)
        for name in ("install", "live_bytes", "peak_bytes", "allocation_count"):
            getattr(self.lib, "bpbench_meter_" + name).restype = ctypes.c_int64
        self.lib.bpbench_meter_set_budget.argtypes = [ctypes.c_int64]
        self.lib.bpbench_meter_install()

    def reset(self) -> None:
        self.lib.bpbench_meter_reset_peak()

    def allocated(self) -> int:
        return int(self.lib.bpbench_meter_live_bytes())

    def peak(self) -> int:
        return int(self.lib.bpbench_meter_peak_bytes())

    def reserved_peak(self) -> int | None:
        return None  # no caching allocator on the CPU: bpbench's CPU cells leave it unset too

    def set_budget(self, budget_bytes: int | None) -> None:
        self.lib.bpbench_meter_set_budget(-1 if budget_bytes is None else budget_bytes)

    def empty_cache(self) -> None:
        pass

    def synchronize(self) -> None:
        pass
