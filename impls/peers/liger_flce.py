"""liger_flce.py: Liger-Kernel's fused linear cross-entropy (LigerFusedLinearCrossEntropyLoss, liger-kernel
0.8.5) on Hugging Face gradient checkpointing, the bpbench preset's network (impl "liger-flce"). GPU only.

Usage (PYTHONPATH=impls):
  python -m peers.liger_flce --model qwen3-8b --seq-len 8192 16384 --out DIR/results.json
                             [common.py's options]
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.liger_flce
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import sys
from typing import TYPE_CHECKING

from . import heap_policy

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

from . import fused_loss  # (puts .peers/kernels on sys.path)


def liger_loss() -> fused_loss.LossOf:
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    flce = LigerFusedLinearCrossEntropyLoss()
    return lambda hidden, weight, targets: flce(weight, hidden, targets)


PEER: fused_loss.FusedLossPeer = fused_loss.FusedLossPeer("liger-flce", "liger-kernel", "liger_kernel",
                                                          "Liger fused linear cross-entropy", liger_loss)

if TYPE_CHECKING:  # mypy holds this peer to the peers' interface (ctest's python_types)
    from .interface import Peer

    _peer: Peer = PEER


if __name__ == "__main__":
    sys.exit(PEER.main("liger_flce", __doc__, sys.argv[1:]))
