"""streambp_official.py: the official StreamBP (PyPI streambp==1.0: StreamModel around a transformers causal
LM, transformers 4.51.3) on the model bpbench runs, written as bpbench results (impl "streambp-official").

Usage (PYTHONPATH=impls):
  python -m peers.streambp_official --model qwen3-8b --seq-len 8192 16384
                                    --partition 1024 --logits-partition 1024
                                    --out out/streambp-official/results.json [the options of common.py]

--partition is its checkpoint_chunk_size and --logits-partition its logits_chunk_size: match bpbench's
streambp cells. SFT on one sequence of random tokens, attention_mask all ones (the wrapper requires one),
labels = inputs. Installed apart by scripts/setup_peers.sh (its transformers pin conflicts with the main
environment's); loaded and wrapped by streambp_official_upstream.py.

Its loss and gradients are (N-1)/N times the true ones (N: labels not -100) for one right-padded sequence, and
not a uniform scale with a prompt mask or a batch of 2: streambp_official_exactness.py measures that against
bpbench.
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.streambp_official
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import argparse
import sys
from typing import TYPE_CHECKING, Any

from . import heap_policy

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

from . import streambp_official_upstream as upstream  # first: its transformers 4.51.3 ahead of the main one

import torch

from . import common
from .interface import Args, ConfigJson, Step

TOOL = "streambp_official"


def impl(args: Args) -> str:
    return "streambp-official"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--partition", type=int, default=500, help="checkpoint_chunk_size (its default 500)")
    p.add_argument("--logits-partition", type=int, default=500, help="logits_chunk_size (its default 500)")


def describe(args: Args) -> str:
    return (f"official StreamBP {upstream.streambp_version()} (transformers {upstream.TRANSFORMERS_VERSION}, "
            f"SDPA), checkpoint_chunk_size {args.partition}, logits_chunk_size {args.logits_partition}")


def versions() -> dict[str, str | None]:
    return {"transformers": upstream.TRANSFORMERS_VERSION, "streambp": upstream.streambp_version()}


def unavailable(args: Args) -> str | None:
    if args.partition < 1 or args.logits_partition < 1:
        sys.exit(f"{TOOL}: --partition and --logits-partition must be >= 1")
    return None


def config(config_json: ConfigJson) -> Any:
    return common.auto_config(common.hub_form(config_json))


def build(config: Any, args: Args, device: torch.device,
          dtype: torch.dtype) -> tuple[torch.nn.Module, Step, dict[str, Any]]:
    upstream.forget_previous()  # before this length's model exists: the last one's is freed first
    model = common.causal_lm(config, dtype, device)
    model.train()
    sm = upstream.wrap(model, args.partition, args.logits_partition)

    def step(tokens: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(tokens)
        loss: torch.Tensor = sm(input_ids=tokens, attention_mask=mask, labels=tokens).loss
        return loss.detach()

    return model, step, {"partition": args.partition, "logits_partition": args.logits_partition}


if TYPE_CHECKING:  # mypy holds this module to the peers' interface (ctest's python_types)
    from . import streambp_official as _this
    from .interface import HasArguments, Peer

    _peer: Peer = _this
    _HasArguments: HasArguments = _this


if __name__ == "__main__":
    sys.exit(common.run(sys.modules[__name__], TOOL, common.summary(__doc__), sys.argv[1:]))
