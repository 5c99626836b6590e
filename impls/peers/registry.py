"""registry.py: the one list of peers. Each is a cells' impl name, exactly as impls/registry.cpp's
peer_names() lists it (tests/peers/test_registry.py holds the two lists equal, through the bpbench binary),
the module that measures it, the options that select it there, why it runs on a GPU only (its cells elsewhere:
"skipped" with that reason), the third-party checkout it needs (.peers/NAME: checkouts.py) and the
side-by-side tables that run it (scripts/cpu_peers.sh: "cpu"; scripts/paper_gpu.sh's peers table: "cuda").

Adding a peer: its module (the Peer interface of interface.py, which a TYPE_CHECKING block at its end holds it
to) plus one line here. The build reads the names of the PEERS lines into impls/registry.cpp's peer_names()
(scripts/cmake/peer_names.cmake: keep one `    PeerEntry("name", ...` line each); the tables and
`python -m peers list|runs` follow from here.

Standard library only (the shell scripts read it through `python -m peers`): the modules are named, not
imported.
"""

from __future__ import annotations

from dataclasses import dataclass

TRITON = "Triton kernels"


@dataclass(frozen=True)
class PeerEntry:
    name: str  # the cells' impl; the build gives impls/registry.cpp's peer_names() the same list
    module: str  # peers.<module> measures it: python -m peers.<module>
    options: tuple[str, ...] = ()  # what selects this impl in that module's command line
    gpu_only: str | None = None  # why it cannot run on the CPU; None: it runs on both
    checkout: str | None = None  # .peers/<checkout> (scripts/peers/<checkout>.txt); None: the main env
    tables: tuple[str, ...] = ("cpu", "cuda")  # the side-by-side runs that include it

    @property
    def out_name(self) -> str:
        """Its folder in a table's peers/ (out/cpu_peers/peers/hf_checkpoint_offload/)."""
        return self.name.replace("-", "_")

    def skip_reason(self) -> str | None:
        """The reason of its skipped cells on the CPU (its module's unavailable() there), or None."""
        return f"{self.gpu_only}: GPU only (--device cuda)" if self.gpu_only else None


PEERS: tuple[PeerEntry, ...] = (
    PeerEntry("hf-checkpoint", "hf_checkpoint"),
    # No checkpointing keeps every activation: at the GPU table's lengths (8k and more of Qwen3-8B) it is out
    # of memory at each, so only the CPU table (small, 2k and 8k) runs it.
    PeerEntry("hf", "hf_checkpoint", ("--no-checkpointing",), tables=("cpu",)),
    PeerEntry("hf-checkpoint-offload", "hf_checkpoint", ("--offload",),
              gpu_only="transformers' offload=True pins host memory for a device's checkpoints"),
    PeerEntry("streambp-official", "streambp_official", checkout="streambp-official"),
    PeerEntry("liger-flce", "liger_flce", gpu_only=TRITON, checkout="kernels"),
    PeerEntry("cce", "cce", gpu_only=TRITON, checkout="kernels"),
    PeerEntry("alst-tiled", "alst_tiled", checkout="deepspeed"),
    # P processes (one GPU each on CUDA) at lengths of their own: its runs name --ranks (docs/distributed.md,
    # "Beside ALST itself").
    PeerEntry("alst-ulysses", "alst_ulysses", checkout="deepspeed", tables=()),
)
TABLES = ("cpu", "cuda")


def names() -> list[str]:
    return [p.name for p in PEERS]


def entry(name: str) -> PeerEntry:
    for p in PEERS:
        if p.name == name:
            return p
    raise KeyError(f"no peer {name!r} (valid: {', '.join(names())})")


def table(device: str) -> list[PeerEntry]:
    """The peers a side-by-side table on `device` ("cpu" or "cuda") runs, in the registry's order."""
    if device not in TABLES:
        raise ValueError(f"no table {device!r} (valid: {', '.join(TABLES)})")
    return [p for p in PEERS if device in p.tables]

