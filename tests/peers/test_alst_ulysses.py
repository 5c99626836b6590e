"""test_alst_ulysses.py: peers.alst_ulysses (DeepSpeed's Ulysses sequence parallelism with ALST's tiled MLP
and tiled loss) over 2 CPU ranks (Gloo), the tiny preset in float32, as users run it:
  - T=17 (DeepSpeed refuses a length not divisible by the ranks; the script pads it to 18, rank 1 holding one
    padding row): the loss equals single-process transformers' (no tiling, no checkpointing) within float32
    round-off, and so does every parameter's gradient summed over the ranks (--save-grads). A length the
    ranks divide is the same run with no padding row, and costs two more worker processes (about 16 s of
    CPU): it is left out;
  - the results file validates (`$BPBENCH validate`), has world_size 2 and one record per rank whose peak is
    bpbench's CPU meter's, the cell's peak the highest rank's, and the collectives counted per rank;
  - --ranks that cannot split the heads is a one-line error before any worker starts (in this process);
  - a budget the step overruns makes the length an "oom" cell, promptly (a rank never hangs on its peer).
One run of the script gives them all: T=17 under a budget of 1 MiB, which it keeps well within, and
T=32768, whose step cannot fit it (a rank's first layer input alone, 16384 rows of the tiny preset's hidden
size in float32, is 1.5 MiB: the test asserts that bound from the preset's config, not from a measurement).
No op is JIT-built: the workers skip DeepSpeed's shared-memory all-reduce
(alst_ulysses_rank.skip_shm_comm_build).
About 25 s on 2 idle cores (each length starts 2 worker processes: ~8 s of imports and start-up a length).

Needs .peers/deepspeed (scripts/setup_peers.sh) and the bpbench binary with its CPU meter library beside it
(ctest's peers_* entries give BPBENCH, else build/bpbench). Where DeepSpeed is missing the test skips, and
fails under CI=true.

Run: PYTHONPATH=impls .venv/bin/python -m unittest discover -s tests/peers -p test_alst_ulysses.py -v
     (ctest: peers_<module>)
"""

import os
import subprocess
import tempfile
import unittest
from typing import Any
from unittest import mock

try:
    import torch
except ImportError as e:
    raise unittest.SkipTest("torch is not importable: the peers need it") from e

from peer_support import BPBENCH, METER, run_peer

from peers import checkouts

LENGTHS = (17,)  # measured and compared with one-process transformers
# The budget of the whole run: generous for LENGTHS (their peaks are about 150 kB a rank), overrun at
# OOM_LENGTH (test_a_budget_the_step_overruns_is_an_oom_cell_without_a_hang asserts why from the config).
BUDGET = 1 << 20
OOM_LENGTH = 32768
COMM_TIMEOUT_S = 60


def run_script(out, lengths, *options):
    """peers.alst_ulysses on the CPU, tiny, float32, 2 ranks; (exit status, results document, stderr,
    seconds)."""
    return run_peer("alst_ulysses", out, "--model", "tiny", "--dtype", "float32", "--device", "cpu",
                    "--warmup", "0", "--repeat", "1", "--ranks", "2", "--seq-len", *map(str, lengths),
                    *options)


class AlstUlyssesOnTwoRanks(unittest.TestCase):
    module: Any  # peers.alst_ulysses, imported where DeepSpeed is
    common: Any
    config_json: dict[str, Any]
    config: Any
    tmp: tempfile.TemporaryDirectory[str]
    out: str
    grads: str
    status: int
    doc: Any
    stderr: str
    seconds: float

    @classmethod
    def setUpClass(cls):
        deepspeed = checkouts.directory("deepspeed")
        if not os.path.isdir(deepspeed):
            if os.environ.get("CI") == "true":
                raise AssertionError(f"alst-ulysses under CI: {deepspeed} is missing "
                                     "(scripts/setup_peers.sh)")
            raise unittest.SkipTest(f"alst-ulysses: {deepspeed} is missing (scripts/setup_peers.sh)")
        if not (os.path.exists(BPBENCH) and os.path.exists(METER)):
            raise unittest.SkipTest(f"the bpbench binary and its CPU meter library ({METER}) are not built")
        from peers import alst_ulysses, common
        cls.module = alst_ulysses
        cls.common = common
        cls.config_json = cls.common.preset_config_json(BPBENCH, "tiny")
        cls.config = cls.common.auto_config(cls.config_json)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.tmp.name, "run", "results.json")
        cls.grads = os.path.join(cls.tmp.name, "grads")
        cls.status, cls.doc, cls.stderr, cls.seconds = run_script(
            cls.out, (*LENGTHS, OOM_LENGTH), "--save-grads", cls.grads, "--budget-bytes", str(BUDGET),
            "--comm-timeout", str(COMM_TIMEOUT_S))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def cell(self, T):
        self.assertEqual(self.status, 0, self.stderr)
        return next(c for c in self.doc["cells"] if c["axes"]["seq_len"] == T)

    def reference(self, T):
        """Plain transformers in one process: the tokens and weights common.measure_length gives every rank
        (seed 0), one forward over the whole sequence, its own shifted loss."""
        tokens = torch.randint(0, self.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(0))
        torch.manual_seed(0)
        model = self.common.causal_lm(self.config, torch.float32, torch.device("cpu"))
        model.train()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        return loss.item(), {name: p.grad for name, p in model.named_parameters()}

    def test_loss_and_gradients_equal_one_process_transformers(self):
        for T in LENGTHS:
            with self.subTest(T=T):
                cell = self.cell(T)
                self.assertEqual(cell["status"], "ok", cell["reason"])
                want_loss, want_grads = self.reference(T)
                self.assertAlmostEqual(cell["loss"], want_loss, delta=1e-6 * abs(want_loss))
                grads = torch.load(os.path.join(self.grads, f"grads_T{T}.pt"))
                self.assertEqual(set(grads), set(want_grads))
                for name, grad in grads.items():
                    with self.subTest(parameter=name):
                        # float32 round-off: the ranks and tiles sum the same products in another order
                        torch.testing.assert_close(grad, want_grads[name], rtol=1e-5, atol=1e-7)

    def test_the_cells_are_distributed_cells_and_validate(self):
        run = subprocess.run([BPBENCH, "validate", self.out], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        layers = self.config.num_hidden_layers
        for T in LENGTHS:
            with self.subTest(T=T):
                cell = self.cell(T)
                self.assertEqual(cell["axes"]["impl"], "alst-ulysses")
                self.assertEqual(cell["world_size"], 2)
                ranks = cell["ranks"]
                self.assertEqual([r["rank"] for r in ranks], [0, 1])
                self.assertTrue(all(r["status"] == "ok" and r["peak_bytes"] > r["base_bytes"] > 0
                                    for r in ranks))
                self.assertEqual(cell["memory"]["peak_bytes"], max(r["peak_bytes"] for r in ranks))
                self.assertEqual(cell["time"]["median_s"], ranks[0]["time_median_s"])
                # DeepSpeed's exchanges: q, k, v and the output, each a layer's forward, again in its
                # checkpoint's recomputation, and once more backwards: 12 all-to-alls a layer; the position
                # ids gathered in both forwards.
                for r in ranks:
                    self.assertEqual(r["comm"]["all_to_all"]["calls"], 12 * layers)
                    self.assertEqual(r["comm"]["all_gather"]["calls"], 2 * layers)
        self.assertTrue(self.doc["complete"])

    def test_ranks_that_cannot_split_the_heads_are_refused_in_one_line(self):
        # tiny: 4 query heads, 2 K/V heads
        self.assertIsNone(self.module.refusal(self.config_json, 2, "tiny"))
        self.assertIsNone(self.module.refusal(self.config_json, 4, "tiny"))
        self.assertIn("valid rank counts: 1, 2, 4", self.module.refusal(self.config_json, 3, "tiny"))
        self.assertIn("must be >= 1", self.module.refusal(self.config_json, 0, "tiny"))
        # The whole command line, in this process (its refusal is a SystemExit, as sys.exit prints it): before
        # any worker starts, nothing written.
        out = os.path.join(self.tmp.name, "refused", "results.json")
        argv = ["--model", "tiny", "--dtype", "float32", "--device", "cpu", "--ranks", "3", "--seq-len", "16",
                "--bpbench", BPBENCH, "--out", out]
        with mock.patch.dict(os.environ), self.assertRaises(SystemExit) as refused:
            self.common.run(self.module, self.module.TOOL, "alst_ulysses", argv)
        message = str(refused.exception.code)
        self.assertEqual(len(message.strip().splitlines()), 1, message)
        self.assertIn("alst_ulysses: --ranks 3 cannot split tiny's attention", message)
        self.assertFalse(os.path.exists(out))

    def test_a_budget_the_step_overruns_is_an_oom_cell_without_a_hang(self):
        # Why the step overruns BUDGET, from the preset alone: a rank's embedding output (its ceil(T / 2) rows
        # of hidden_size float32 values, the first layer's input) is one tensor the step must hold.
        rows = -(-OOM_LENGTH // 2)
        self.assertGreater(rows * self.config.hidden_size * 4, BUDGET,
                           "precondition: OOM_LENGTH's step must be certain to overrun BUDGET")
        self.assertEqual(self.status, 0, self.stderr)  # oom is a result
        cell = self.cell(OOM_LENGTH)
        self.assertEqual(cell["status"], "oom", self.stderr)
        self.assertRegex(cell["reason"], r"^rank [01] of 2: .*bpbench CPU budget exceeded")
        self.assertIsNone(cell["loss"])
        self.assertLessEqual(cell["memory"]["peak_bytes"], BUDGET)
        self.assertIn("oom", [r["status"] for r in cell["ranks"]])
        # The length's own seconds, its workers' start included: well before the collectives' timeout.
        self.assertLess(cell["wall_s"], COMM_TIMEOUT_S - 10)


if __name__ == "__main__":
    unittest.main()
