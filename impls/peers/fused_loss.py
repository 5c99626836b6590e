"""fused_loss.py: what liger_flce.py and cce.py share: Hugging Face checkpointing with the LM head and the
loss replaced by a fused linear cross-entropy that never materialises the (T, V) logits. Both kernels are
Triton: GPU only; on the CPU every length is written as status "skipped" with that reason. Their wheels
install into .peers/kernels (scripts/setup_peers.sh), put on sys.path here (checkouts.py).
transformers (and hf_checkpoint, which imports it) load only where a length is measured: a CPU run, every
length skipped, starts in torch's import time instead of twice that."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from importlib import metadata

import torch

from . import checkouts, common, registry
from .interface import Args, ConfigJson, Step

checkouts.put_first_on_path("kernels")

# hidden (T-1 rows, d), weight (V, d), targets (T-1) -> the mean cross-entropy
LossOf = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class FusedLossPeer:
    """interface.Peer for one fused-loss kernel: `impl` the cells' name (registry.py), `distribution` its PyPI
    name (for versions), `module` what it imports, `title` what describe() calls it, and `make_loss()` ->
    LossOf."""

    def __init__(self, impl: str, distribution: str, module: str, title: str,
                 make_loss: Callable[[], LossOf]) -> None:
        self._impl, self.distribution, self.module, self.title = impl, distribution, module, title
        self.make_loss = make_loss

    def impl(self, args: Args) -> str:
        return self._impl

    def version(self) -> str | None:
        try:
            return metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return None

    def describe(self, args: Args) -> str:
        return (f"{self.title} {self.version()} + transformers {metadata.version('transformers')} gradient "
                "checkpointing, SDPA")

    def versions(self) -> dict[str, str | None]:
        return {"transformers": metadata.version("transformers"), self.distribution: self.version()}

    def unavailable(self, args: Args) -> str | None:
        if args.device != "cuda":
            return registry.entry(self._impl).skip_reason()
        try:
            __import__(self.module)
        except ImportError as e:
            return f"cannot import {self.module} ({e}; run scripts/setup_peers.sh)"
        return None

    def config(self, config_json: ConfigJson) -> Any:
        from . import hf_checkpoint
        return hf_checkpoint.config(config_json)

    def build(self, config: Any, args: Args, device: torch.device,
              dtype: torch.dtype) -> tuple[torch.nn.Module, Step, dict[str, Any]]:
        from . import hf_checkpoint
        loss_of = self.make_loss()
        model = hf_checkpoint.checkpointed_model(config, args, device, dtype)

        def step(tokens: torch.Tensor) -> torch.Tensor:
            hidden = model.model(input_ids=tokens).last_hidden_state  # (1, T, d), the checkpointed layers
            d = hidden.size(-1)
            loss = loss_of(hidden[:, :-1].reshape(-1, d), model.lm_head.weight, tokens[:, 1:].reshape(-1))
            loss.backward()
            return loss.detach()

        return model, step, {}

    def main(self, tool: str, doc: str | None, argv: list[str]) -> int:
        return common.run(self, tool, common.summary(doc), argv)

