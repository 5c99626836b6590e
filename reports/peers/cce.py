"""cce.py: Apple's cut-cross-entropy (linear_cross_entropy, cut-cross-entropy 25.1.1) on Hugging Face gradient
checkpointing, the bpbench preset's network (impl "cce"). GPU only.

Usage: reports/peers/cce.py --model qwen3-8b --seq-len 8192 16384 --out DIR/results.json [common.py's options]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fused_loss  # noqa: E402  (first: puts .peers/kernels on sys.path)
import hf_checkpoint  # noqa: E402


def impl(args):
    return "cce"


def version():
    from importlib import metadata
    try:
        return metadata.version("cut-cross-entropy")
    except metadata.PackageNotFoundError:
        return None


def describe(args):
    return fused_loss.describe("cut-cross-entropy", version())


def versions():
    return {"transformers": fused_loss.transformers.__version__, "cut-cross-entropy": version()}


def unavailable(args):
    return fused_loss.unavailable(args, "cut_cross_entropy")


config = hf_checkpoint.config


def build(config, args, device, dtype):
    from cut_cross_entropy import linear_cross_entropy
    return fused_loss.build(config, args, device, dtype, lambda h, w, t: linear_cross_entropy(h, w, t))


if __name__ == "__main__":
    sys.exit(fused_loss.run(__name__, "cce", __doc__, sys.argv[1:]))
