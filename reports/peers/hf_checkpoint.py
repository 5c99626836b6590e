"""hf_checkpoint.py: Hugging Face transformers with SDPA attention and gradient checkpointing (impl
"hf-checkpoint"; "hf" with --no-checkpointing), the StreamBP paper's baseline.

Usage:
  reports/peers/hf_checkpoint.py --model qwen3-8b --seq-len 8192 16384 --out out/hf/results.json
                                 [--dtype bfloat16] [--device cuda] [--no-checkpointing] [--warmup 1] [--repeat 3]
                                 [--bpbench build/bpbench] [--seed 0] [--budget-bytes N] [--resume]

SFT on one sequence of random tokens (labels = inputs, transformers' own shifted loss), random weights, the bpbench
preset's network, built directly on --device (common.causal_lm). Measured as common.py says: each length is a cell
(ok, oom, or "error" with the exception as its reason), every length runs, and the exit status is 1 when some
length failed with "error" (stderr names them). (reports/hf_side_by_side.py is this script under its older name.)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heap_policy  # noqa: E402

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

import common  # noqa: E402

import transformers  # noqa: E402

def add_arguments(p):
    p.add_argument("--no-checkpointing", action="store_true", help="impl hf: keep every activation")


def describe(args):
    return (f"transformers {transformers.__version__}, SDPA, "
            + ("no checkpointing" if args.no_checkpointing else "gradient checkpointing"))


def versions():
    return {"transformers": transformers.__version__}


def impl(args):
    return "hf" if args.no_checkpointing else "hf-checkpoint"


def unavailable(args):
    return None


def config(config_json):
    return common.auto_config(config_json)


def checkpointed_model(config, args, device, dtype):
    """transformers' model, built on `device`, with non-reentrant gradient checkpointing (unless
    --no-checkpointing)."""
    model = common.causal_lm(config, dtype, device)
    model.train()
    if not getattr(args, "no_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def build(config, args, device, dtype):
    model = checkpointed_model(config, args, device, dtype)

    def step(tokens):
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        return loss.detach()

    return model, step, {}


if __name__ == "__main__":
    sys.exit(common.run(sys.modules[__name__], "hf_side_by_side", __doc__.split("\n\n")[0], sys.argv[1:]))
