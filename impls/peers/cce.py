"""cce.py: Apple's cut-cross-entropy (linear_cross_entropy, cut-cross-entropy 25.1.1) on Hugging Face gradient
checkpointing, the bpbench preset's network (impl "cce"). GPU only.

Usage (PYTHONPATH=impls):
  python -m peers.cce --model qwen3-8b --seq-len 8192 16384 --out DIR/results.json [common.py's options]
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.cce
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import sys
from typing import TYPE_CHECKING

from . import heap_policy

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

from . import fused_loss  # (puts .peers/kernels on sys.path)


def cce_loss() -> fused_loss.LossOf:
    from cut_cross_entropy import linear_cross_entropy
    loss: fused_loss.LossOf = linear_cross_entropy
    return loss


PEER: fused_loss.FusedLossPeer = fused_loss.FusedLossPeer("cce", "cut-cross-entropy", "cut_cross_entropy",
                                                          "cut-cross-entropy", cce_loss)

if TYPE_CHECKING:  # mypy holds this peer to the peers' interface (ctest's python_types)
    from .interface import Peer

    _peer: Peer = PEER


if __name__ == "__main__":
    sys.exit(PEER.main("cce", __doc__, sys.argv[1:]))
