"""liger_flce.py: Liger-Kernel's fused linear cross-entropy (LigerFusedLinearCrossEntropyLoss, liger-kernel 0.8.5)
on Hugging Face gradient checkpointing, the bpbench preset's network (impl "liger-flce"). GPU only.

Usage: reports/peers/liger_flce.py --model qwen3-8b --seq-len 8192 16384 --out DIR/results.json [common.py's options]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fused_loss  # noqa: E402  (first: puts .peers/kernels on sys.path)
import hf_checkpoint  # noqa: E402


def impl(args):
    return "liger-flce"


def version():
    from importlib import metadata
    try:
        return metadata.version("liger-kernel")
    except metadata.PackageNotFoundError:
        return None


def describe(args):
    return fused_loss.describe("Liger fused linear cross-entropy", version())


def versions():
    return {"transformers": fused_loss.transformers.__version__, "liger-kernel": version()}


def unavailable(args):
    return fused_loss.unavailable(args, "liger_kernel")


config = hf_checkpoint.config


def build(config, args, device, dtype):
    from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    flce = LigerFusedLinearCrossEntropyLoss()
    return fused_loss.build(config, args, device, dtype, lambda h, w, t: flce(w, h, t))


if __name__ == "__main__":
    sys.exit(fused_loss.run(__name__, "liger_flce", __doc__, sys.argv[1:]))
