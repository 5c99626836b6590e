"""fused_loss.py: what liger_flce.py and cce.py share: Hugging Face checkpointing with the LM head and the loss
replaced by a fused linear cross-entropy that never materialises the (T, V) logits. Both kernels are Triton: GPU
only; on the CPU every length is written as status "skipped" with that reason. Their wheels install into
.peers/kernels (scripts/setup_peers.sh), put on sys.path here."""

import os
import sys

KERNELS_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".peers",
                                            "kernels"))
sys.path.insert(0, KERNELS_DIR)

import common  # noqa: E402
import hf_checkpoint  # noqa: E402

import transformers  # noqa: E402


def unavailable(args, module):
    if args.device != "cuda":
        return "Triton kernels: GPU only (--device cuda)"
    try:
        __import__(module)
    except ImportError as e:
        return f"cannot import {module} ({e}; run scripts/setup_peers.sh)"
    return None


def describe(name, version):
    return f"{name} {version} + transformers {transformers.__version__} gradient checkpointing, SDPA"


def build(config, args, device, dtype, loss_of):
    """`loss_of(hidden (T-1 rows, d), weight (V, d), targets (T-1))` -> mean cross-entropy."""
    model = hf_checkpoint.checkpointed_model(config, args, device, dtype)

    def step(tokens):
        hidden = model.model(input_ids=tokens).last_hidden_state  # (1, T, d), the decoder's checkpointed layers
        d = hidden.size(-1)
        loss = loss_of(hidden[:, :-1].reshape(-1, d), model.lm_head.weight, tokens[:, 1:].reshape(-1))
        loss.backward()
        return loss.detach()

    return model, step, {}


def run(module_name, tool, doc, argv):
    return common.run(sys.modules[module_name], tool, doc.split("\n\n")[0], argv)
