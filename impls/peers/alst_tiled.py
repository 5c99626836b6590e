"""alst_tiled.py: ALST's (Arctic Long Sequence Training) tiled MLP and tiled logits + loss, through
DeepSpeed's own autograd functions (deepspeed.runtime.sequence_parallel.ulysses_sp.TiledMLP and
TiledFusedLogitsLoss, DeepSpeed 0.19.8), on transformers' model with non-reentrant gradient checkpointing,
single process (impl "alst-tiled").

Usage (PYTHONPATH=impls):
  python -m peers.alst_tiled --model qwen3-8b --seq-len 8192 16384 --out out/alst-tiled/results.json
                             [--partition N] [--logits-partition N] [the options of common.py]

--partition is the MLP tile (tokens): every decoder layer's MLP runs on ceil(T / N) tiles of the sequence,
each recomputed in the backward (TiledMLP). Default: the model's hidden size, ALST's rule (ceil(T /
hidden_size) tiles). --logits-partition is the logits + loss tile (tokens): the LM head and cross-entropy run
on ceil(T / N) tiles, the backward of each done at once, so at most one tile's logits exist
(TiledFusedLogitsLoss). Default: 2^28 // V tokens, ALST's rule of about 1 GiB of float32 logits per tile
(ArcticTraining takes ceil(T * V * 4 B / 1 GiB) tiles, which is one tile more at a few lengths). DeepSpeed
splits with torch.chunk: tiles of ceil(T / tiles) tokens, at most N. The cells' partition and logits_partition
axes are these N (common.py makes them T where N >= T: one tile, no tiling).

SFT on one sequence of random tokens, labels = inputs shifted as transformers does (the last position has no
target); the loss is transformers' own (model.loss_function, its float32 upcast included) and equals
hf_checkpoint.py's within round-off (tests/peers/test_alst_tiled.py: the gradients too). The tiled functions
need neither DeepSpeed's engine nor torch.distributed, and run on the CPU too. DeepSpeed is installed apart by
scripts/setup_peers.sh into .peers/deepspeed (scripts/peers/deepspeed.txt says why; BPBENCH_DEEPSPEED
overrides the directory), put first on sys.path here (checkouts.py); where it is missing every length is
"skipped" with that reason.
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.alst_tiled
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import argparse
import sys
import types
from typing import TYPE_CHECKING, Any

from . import heap_policy

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

from . import checkouts

# Only DeepSpeed and what it imports that the main environment lacks.
PEER_DIR = checkouts.put_first_on_path("deepspeed")

import torch
import transformers

from . import common, hf_checkpoint
from .interface import Args, ConfigJson, Step

LOGITS_TILE_BYTES = 2**30  # ALST: about 1 GiB of float32 logits per loss tile


def impl(args: Args) -> str:
    return "alst-tiled"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--partition", type=int, default=None,
                   help="MLP tile in tokens (default: the hidden size, ALST's ceil(T / hidden_size) tiles)")
    p.add_argument("--logits-partition", type=int, default=None,
                   help="logits + loss tile in tokens (default: 2^28 // vocab_size, ALST's ~1 GiB of fp32 "
                        "logits)")


def deepspeed_version() -> str | None:
    from importlib import metadata
    try:
        return metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return None


def describe(args: Args) -> str:
    mlp = f"{args.partition} tokens" if args.partition else "hidden size (ALST)"
    logits = f"{args.logits_partition} tokens" if args.logits_partition else "~1 GiB fp32 logits (ALST)"
    return (f"ALST tiled MLP + tiled logits/loss (DeepSpeed {deepspeed_version()} TiledMLP, "
            f"TiledFusedLogitsLoss) on transformers {transformers.__version__} gradient checkpointing, SDPA; "
            f"MLP tile {mlp}, loss tile {logits}")


def versions() -> dict[str, str | None]:
    return {"transformers": transformers.__version__, "deepspeed": deepspeed_version()}


def check_tiles(args: Args, tool: str) -> None:
    """--partition and --logits-partition, where given, are tiles of 1 token or more (else one line and
    exit 2)."""
    for name in ("partition", "logits_partition"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            sys.exit(f"{tool}: --{name.replace('_', '-')} must be >= 1")


def unavailable(args: Args, tool: str = "alst_tiled") -> str | None:
    check_tiles(args, tool)
    try:
        tiled()
    except ImportError as e:
        return f"cannot import DeepSpeed's ulysses_sp ({e}; run scripts/setup_peers.sh)"
    return None


def config(config_json: ConfigJson) -> Any:
    return common.auto_config(config_json)


def tiled() -> tuple[Any, Any]:
    """DeepSpeed's (TiledMLP, TiledFusedLogitsLoss), imported on first use (about 2 s)."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledFusedLogitsLoss, TiledMLP
    return TiledMLP, TiledFusedLogitsLoss


def tile_count(T: int, tile: int) -> int:
    return -(-T // tile)  # ceil(T / tile)


def tile_mlps(model: Any, tile: int) -> None:
    """Every decoder layer's MLP through TiledMLP, as ALST patches them, but per module and with the MLP's own
    forward as the tiled function (so any transformers MLP works, not only the Llama/Qwen forms ALST
    lists)."""
    TiledMLP, _ = tiled()
    for layer in model.model.layers:
        mlp = layer.mlp
        original = type(mlp).forward

        def forward(self: Any, x: torch.Tensor, original: Any = original) -> torch.Tensor:
            return TiledMLP.apply(original, self, x, tile_count(x.shape[-2], tile), list(self.parameters()))

        mlp.forward = types.MethodType(forward, mlp)


def tiled_loss(model: Any, hidden: torch.Tensor, labels: torch.Tensor, tile: int,
               count: torch.Tensor | None = None) -> torch.Tensor:
    """The mean next-token cross-entropy over `labels` (-100: none), one loss tile at a time; `count` is the
    mean's normaliser (default: the targets in `labels`; alst_ulysses.py gives every rank's, all-reduced, so
    that a rank's loss is its share of the global mean).

    Each tile returns its share of the mean (transformers' sum / num_items_in_batch) and the tiles are summed,
    so the result is the loss itself and nothing scales it afterwards: TiledFusedLogitsLoss computes the LM
    head's weight gradient inside its forward with an incoming gradient of 1 and scales only the hidden
    states' gradient by the gradient it later receives. (Dividing a summed loss afterwards, as
    ArcticTraining's SP trainer does, would leave the LM head's gradient that many times too large.)"""
    _, TiledFusedLogitsLoss = tiled()
    if count is None:
        count = (labels != -100).sum()
    vocab = model.config.vocab_size

    def tile_loss(model: Any, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model.loss_function(logits=model.lm_head(hidden), labels=None, vocab_size=vocab,
                                   shift_labels=labels, num_items_in_batch=count)

    tiles = tile_count(labels.shape[1], tile)
    return TiledFusedLogitsLoss.apply(tile_loss, model, hidden, labels, None, tiles, [model.lm_head.weight],
                                      "sum")


def tiled_model(config: Any, args: Args, device: torch.device,
                dtype: torch.dtype) -> tuple[Any, dict[str, int]]:
    """transformers' checkpointed model with its MLPs tiled, and the tiles ({"partition": MLP rows,
    "logits_partition": logits rows}, ALST's defaults where not given): what alst-tiled and each alst-ulysses
    rank build."""
    if getattr(config, "final_logit_softcapping", None) is not None:
        raise ValueError("final_logit_softcapping is set: the tiled loss (LM head then loss) would leave it "
                         "out")
    tiles = {"partition": args.partition or config.hidden_size,
             "logits_partition": args.logits_partition or max(1, LOGITS_TILE_BYTES // 4 // config.vocab_size)}
    model = hf_checkpoint.checkpointed_model(config, args, device, dtype)
    tile_mlps(model, tiles["partition"])
    return model, tiles


def build(config: Any, args: Args, device: torch.device,
          dtype: torch.dtype) -> tuple[torch.nn.Module, Step, dict[str, Any]]:
    model, tiles = tiled_model(config, args, device, dtype)
    logits_tile = tiles["logits_partition"]

    def step(tokens: torch.Tensor) -> torch.Tensor:
        hidden = model.model(input_ids=tokens).last_hidden_state  # (1, T, d), the checkpointed layers
        # Position t predicts token t+1; the last position has none (transformers pads with -100, then
        # shifts).
        labels = torch.nn.functional.pad(tokens[:, 1:], (0, 1), value=-100)
        loss = tiled_loss(model, hidden, labels, logits_tile)
        loss.backward()
        return loss.detach()

    return model, step, dict(tiles)


if TYPE_CHECKING:  # mypy holds this module to the peers' interface (ctest's python_types)
    from . import alst_tiled as _this
    from .interface import HasArguments, Peer

    _peer: Peer = _this
    _HasArguments: HasArguments = _this


if __name__ == "__main__":
    sys.exit(common.run(sys.modules[__name__], "alst_tiled", common.summary(__doc__), sys.argv[1:]))
