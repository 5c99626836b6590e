"""test_alst_tiled.py: peers.alst_tiled (ALST's tiled MLP and tiled logits + loss through DeepSpeed's
TiledMLP and TiledFusedLogitsLoss) on the CPU, the tiny preset in float32: its loss and every parameter's
gradient equal plain transformers' (no tiling, no checkpointing) within float32 round-off, with uneven tiles
(the last MLP tile shorter, the last loss tile holding only the position that has no target) and with ALST's
default tiling.

Needs .peers/deepspeed (scripts/setup_peers.sh) and the bpbench binary (the tiny preset's config.json; the
ctest peers_* entries give BPBENCH, else build/bpbench). Where DeepSpeed is missing the test skips, and fails
under CI=true.

Run: PYTHONPATH=impls .venv/bin/python -m unittest discover -s tests/peers -p test_alst_tiled.py -v
     (ctest: peers_<module>)
"""

import os
import types
import unittest
from typing import Any

try:
    import torch
except ImportError as e:
    raise unittest.SkipTest("torch is not importable: the peers need it") from e

from peer_support import BPBENCH

from peers import alst_tiled as alst
from peers import common


def args_of(**options):
    return types.SimpleNamespace(**{"partition": None, "logits_partition": None, **options})


class AlstTiledMatchesTransformers(unittest.TestCase):
    config: Any  # transformers' config of the tiny preset

    @classmethod
    def setUpClass(cls):
        why_not = alst.unavailable(args_of())
        if why_not:
            if os.environ.get("CI") == "true":
                raise AssertionError(f"alst-tiled under CI: {why_not}")
            raise unittest.SkipTest(f"alst-tiled: {why_not}")
        if not os.path.exists(BPBENCH):
            raise unittest.SkipTest("the bpbench binary (the tiny preset's config) is missing: build it or "
                                    "set BPBENCH")
        cls.config = alst.config(common.preset_config_json(BPBENCH, "tiny"))

    def reference(self, tokens):
        """Plain transformers: one forward over the whole sequence, its own shifted loss."""
        torch.manual_seed(0)
        model = common.causal_lm(self.config, torch.float32, torch.device("cpu"))
        model.train()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        return loss.detach(), {name: p.grad for name, p in model.named_parameters()}

    def check(self, T, options, mlp_tiles, loss_tiles):
        tokens = torch.randint(0, self.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
        want_loss, want_grads = self.reference(tokens)

        torch.manual_seed(0)  # the same weights as the reference (common.measure_length seeds likewise)
        built, step, axes = alst.build(self.config, args_of(**options), torch.device("cpu"), torch.float32)
        model: Any = built  # transformers' model: lm_head, model.layers
        # The tiles that ran: the LM head sees each loss tile once; the first layer's MLP sees each MLP tile
        # in its no-grad forward, again in the checkpoint's recomputation, and again in TiledMLP's backward.
        head_rows, mlp_rows = [], []
        model.lm_head.register_forward_hook(lambda m, i, o: head_rows.append(i[0].shape[-2]))
        down_proj = model.model.layers[0].mlp.down_proj
        down_proj.register_forward_hook(lambda m, i, o: mlp_rows.append(i[0].shape[-2]))
        loss = step(tokens)

        self.assertEqual(head_rows, loss_tiles)
        self.assertEqual(mlp_rows, mlp_tiles * 3)
        self.assertEqual(axes["partition"], options.get("partition") or self.config.hidden_size)
        torch.testing.assert_close(loss, want_loss, rtol=1e-6, atol=0)
        for name, p in model.named_parameters():
            with self.subTest(parameter=name):
                # float32 round-off: the tiles sum the same products in another order
                torch.testing.assert_close(p.grad, want_grads[name], rtol=1e-5, atol=1e-7)

    def test_uneven_tiles(self):
        # T=17: MLP tiles of 5 (5, 5, 5, 2); loss tiles of 4 (4, 4, 4, 4, 1: the last is the position without
        # a target alone, which adds nothing)
        self.check(17, {"partition": 5, "logits_partition": 4}, [5, 5, 5, 2], [4, 4, 4, 4, 1])

    def test_alst_default_tiling(self):
        # ALST's rule: ceil(T / hidden_size) MLP tiles (tiny: hidden 24, so T=50 gives 3 of 17, 17, 16); the
        # loss in one tile (2^28 // 97 tokens of logits is far more than 50)
        self.check(50, {}, [17, 17, 16], [50])


if __name__ == "__main__":
    unittest.main()
