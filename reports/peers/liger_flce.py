"""liger_flce.py: Liger-Kernel's fused linear cross-entropy (LigerFusedLinearCrossEntropyLoss, liger-kernel 0.8.5)
on Hugging Face gradient checkpointing, the bpbench preset's network (impl "liger-flce"). GPU only.

Usage: reports/peers/liger_flce.py --model qwen3-8b --seq-len 8192 16384 --out DIR/results.json [common.py's options]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heap_policy  # noqa: E402

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

import fused_loss  # noqa: E402  (puts .peers/kernels on sys.path)


def liger_loss():
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    flce = LigerFusedLinearCrossEntropyLoss()
    return lambda hidden, weight, targets: flce(weight, hidden, targets)


PEER = fused_loss.FusedLossPeer("liger-flce", "liger-kernel", "liger_kernel", "Liger fused linear cross-entropy",
                                liger_loss)

if __name__ == "__main__":
    sys.exit(PEER.main("liger_flce", __doc__, sys.argv[1:]))
