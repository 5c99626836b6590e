"""cce.py: Apple's cut-cross-entropy (linear_cross_entropy, cut-cross-entropy 25.1.1) on Hugging Face gradient
checkpointing, the bpbench preset's network (impl "cce"). GPU only.

Usage: reports/peers/cce.py --model qwen3-8b --seq-len 8192 16384 --out DIR/results.json [common.py's options]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heap_policy  # noqa: E402

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

import fused_loss  # noqa: E402  (puts .peers/kernels on sys.path)


def cce_loss():
    from cut_cross_entropy import linear_cross_entropy
    return linear_cross_entropy


PEER = fused_loss.FusedLossPeer("cce", "cut-cross-entropy", "cut_cross_entropy", "cut-cross-entropy", cce_loss)

if __name__ == "__main__":
    sys.exit(PEER.main("cce", __doc__, sys.argv[1:]))
