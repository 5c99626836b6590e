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


class FusedLossPeer:
    """A peer module's interface (common.py) for one fused-loss kernel: `impl` the cells' name, `distribution`
    its PyPI name (for versions), `module` what it imports, `title` what describe() calls it, and
    `make_loss()` -> loss_of(hidden (T-1 rows, d), weight (V, d), targets (T-1)), the mean cross-entropy."""

    def __init__(self, impl, distribution, module, title, make_loss):
        self._impl, self.distribution, self.module, self.title = impl, distribution, module, title
        self.make_loss = make_loss

    def impl(self, args):
        return self._impl

    def version(self):
        from importlib import metadata
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return None

    def describe(self, args):
        return f"{self.title} {self.version()} + transformers {transformers.__version__} gradient checkpointing, SDPA"

    def versions(self):
        return {"transformers": transformers.__version__, self.distribution: self.version()}

    def unavailable(self, args):
        if args.device != "cuda":
            return "Triton kernels: GPU only (--device cuda)"
        try:
            __import__(self.module)
        except ImportError as e:
            return f"cannot import {self.module} ({e}; run scripts/setup_peers.sh)"
        return None

    def config(self, config_json):
        return hf_checkpoint.config(config_json)

    def build(self, config, args, device, dtype):
        loss_of = self.make_loss()
        model = hf_checkpoint.checkpointed_model(config, args, device, dtype)

        def step(tokens):
            hidden = model.model(input_ids=tokens).last_hidden_state  # (1, T, d), the checkpointed layers
            d = hidden.size(-1)
            loss = loss_of(hidden[:, :-1].reshape(-1, d), model.lm_head.weight, tokens[:, 1:].reshape(-1))
            loss.backward()
            return loss.detach()

        return model, step, {}

    def main(self, tool, doc, argv):
        return common.run(self, tool, doc.split("\n\n")[0], argv)
