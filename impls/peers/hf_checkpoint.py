"""hf_checkpoint.py: Hugging Face transformers with SDPA attention and gradient checkpointing (impl
"hf-checkpoint"; "hf" with --no-checkpointing; "hf-checkpoint-offload" with --offload), the StreamBP paper's
baseline.

Usage (PYTHONPATH=impls):
  python -m peers.hf_checkpoint --model qwen3-8b --seq-len 8192 16384 --out out/hf/results.json
                                [--dtype bfloat16] [--device cuda] [--no-checkpointing | --offload]
                                [--warmup 1] [--repeat 3]
                                [--bpbench build/bpbench] [--seed 0] [--budget-bytes N] [--resume]

SFT on one sequence of random tokens (labels = inputs, transformers' own shifted loss), random weights, the
bpbench preset's network, built directly on --device (common.causal_lm). Measured as common.py says: each
length is a cell (ok, oom, or "error" with the exception as its reason), every length runs, and the exit
status is 1 when some length failed with "error" (stderr names them). Its results name it "hf_side_by_side"
(meta.scenario_name), the first name of this script, so that --resume keeps the files measured under that
name.

--offload is transformers' own checkpoint offload (`gradient_checkpointing_enable(offload=True)`, 5.x): each
layer's checkpointed input is saved through torch.autograd.graph.save_on_cpu(pin_memory=True), a copy to
pinned host memory in the forward and back in the backward, both on the compute stream (not overlapped, unlike
bpbench's offload: impls/machinery/offload.h). It is a GPU peer: on the CPU there is no device to offload
from, and save_on_cpu's pinned buffers need a CUDA driver (with a CUDA-enabled torch and no GPU it raises
"Found no NVIDIA driver"), so there every length is "skipped" with that reason.
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.hf_checkpoint
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import argparse
import sys
from typing import TYPE_CHECKING, Any

from . import heap_policy

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

import torch
import transformers

from . import common, registry
from .interface import Args, ConfigJson, Step

TOOL = "hf_side_by_side"


def add_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--no-checkpointing", action="store_true", help="impl hf: keep every activation")
    mode.add_argument("--offload", action="store_true",
                      help="impl hf-checkpoint-offload: checkpoints in pinned host memory (transformers' "
                           "offload=True)")


def describe(args: Args) -> str:
    how = {"hf": "no checkpointing", "hf-checkpoint": "gradient checkpointing",
           "hf-checkpoint-offload": "gradient checkpointing, checkpoints offloaded to pinned host memory "
                                    "(save_on_cpu)"}
    return f"transformers {transformers.__version__}, SDPA, {how[impl(args)]}"


def versions() -> dict[str, str | None]:
    return {"transformers": transformers.__version__}


def impl(args: Args) -> str:
    if args.no_checkpointing:
        return "hf"
    return "hf-checkpoint-offload" if getattr(args, "offload", False) else "hf-checkpoint"


def unavailable(args: Args) -> str | None:
    if args.device != "cuda":
        return registry.entry(impl(args)).skip_reason()  # --offload: GPU only
    return None


def config(config_json: ConfigJson) -> Any:
    return common.auto_config(config_json)


def checkpointed_model(config: Any, args: Args, device: torch.device, dtype: torch.dtype) -> Any:
    """transformers' model, built on `device`, with non-reentrant gradient checkpointing (unless
    --no-checkpointing)."""
    model = common.causal_lm(config, dtype, device)
    model.train()
    if not getattr(args, "no_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False},
                                            offload=getattr(args, "offload", False))
    return model


def build(config: Any, args: Args, device: torch.device,
          dtype: torch.dtype) -> tuple[torch.nn.Module, Step, dict[str, Any]]:
    model = checkpointed_model(config, args, device, dtype)

    def step(tokens: torch.Tensor) -> torch.Tensor:
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        return loss.detach()

    return model, step, {"offload": "checkpoints"} if getattr(args, "offload", False) else {}


if TYPE_CHECKING:  # mypy holds this module to the peers' interface (ctest's python_types)
    from . import hf_checkpoint as _this
    from .interface import HasArguments, Peer

    _peer: Peer = _this
    _HasArguments: HasArguments = _this


if __name__ == "__main__":
    sys.exit(common.run(sys.modules[__name__], TOOL, common.summary(__doc__), sys.argv[1:]))
