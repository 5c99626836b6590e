"""streambp_official.py: the official StreamBP (PyPI streambp==1.0: StreamModel around a transformers causal LM,
transformers 4.51.3) on the model bpbench runs, written as bpbench results (impl "streambp-official").

Usage:
  reports/peers/streambp_official.py --model qwen3-8b --seq-len 8192 16384 --partition 1024 --logits-partition 1024
                                     --out out/streambp-official/results.json [the options of common.py]

--partition is its checkpoint_chunk_size and --logits-partition its logits_chunk_size: match bpbench's streambp
cells. SFT on one sequence of random tokens, attention_mask all ones (the wrapper requires one), labels = inputs.
Installed apart by scripts/setup_peers.sh (its transformers pin conflicts with the main environment's).

Its loss and gradients are (N-1)/N times the true ones (N: labels not -100) for one right-padded sequence, and not
a uniform scale with a prompt mask or a batch of 2: streambp_official_check.py measures that against bpbench.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heap_policy  # noqa: E402

if __name__ == "__main__":
    heap_policy.keep_freed_heap_memory()  # before torch is imported

import official_streambp  # noqa: E402  (first: its transformers 4.51.3 ahead of the main environment's)
import common  # noqa: E402

import torch  # noqa: E402


def impl(args):
    return "streambp-official"


def add_arguments(p):
    p.add_argument("--partition", type=int, default=500, help="checkpoint_chunk_size (its default 500)")
    p.add_argument("--logits-partition", type=int, default=500, help="logits_chunk_size (its default 500)")


def describe(args):
    return (f"official StreamBP {official_streambp.streambp_version()} (transformers "
            f"{official_streambp.transformers.__version__}, SDPA), checkpoint_chunk_size {args.partition}, "
            f"logits_chunk_size {args.logits_partition}")


def versions():
    return {"transformers": official_streambp.transformers.__version__,
            "streambp": official_streambp.streambp_version()}


def unavailable(args):
    if args.partition < 1 or args.logits_partition < 1:
        sys.exit("streambp_official: --partition and --logits-partition must be >= 1")
    return None


def config(config_json):
    return common.auto_config(common.hub_form(config_json))


def build(config, args, device, dtype):
    official_streambp.forget_previous()  # before this length's model exists: the last one's is freed first
    model = common.causal_lm(config, dtype, device)
    model.train()
    sm = official_streambp.wrap(model, args.partition, args.logits_partition)

    def step(tokens):
        mask = torch.ones_like(tokens)
        return sm(input_ids=tokens, attention_mask=mask, labels=tokens).loss.detach()

    return model, step, {"partition": args.partition, "logits_partition": args.logits_partition}


if __name__ == "__main__":
    sys.exit(common.run(sys.modules[__name__], "streambp_official", __doc__.split("\n\n")[0], sys.argv[1:]))
