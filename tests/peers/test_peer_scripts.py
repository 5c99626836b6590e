"""test_peer_scripts.py: the peer modules as users run them (python -m peers.MODULE), on the CPU (tiny,
float32):
  - on bpbench's own CPU meter (cpu_meter.py): memory is measured, and --budget-bytes is its budget, an
    overrun an "oom" cell with the peak it reached (one run: T=64 within the budget, and a length whose
    embedding output alone, by the preset's config, is more than the budget);
  - the peers run through the peer interface: alst-tiled measures and --resume keeps its finished lengths and
    runs the rest; hf-checkpoint-offload writes skipped cells with registry.py's reason (GPU only), again on
    --resume (in this process: nothing is measured, so no meter is installed here);
  - a module run by its file's path (as tests/peers/*.cpp run them) starts again as `python -m peers.NAME`,
    and every module that runs has that start (launch.py) before its first import of the package.

About 20 s on 2 idle cores (two chains of peer processes at once, ~7 s each; alst-tiled's two runs are the
longer chain). Needs the bpbench binary and the meter library beside it (ctest's peers_* entries give
BPBENCH; else build/).
Run: PYTHONPATH=impls .venv/bin/python -m unittest discover -s tests/peers -p test_peer_scripts.py -v
     (ctest: peers_<module>)
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from peer_support import BPBENCH, METER, REPO, run_peer

from peers import checkouts, registry

PACKAGE = os.path.join(REPO, "impls", "peers")
# hf's one run: T=64 measured within BUDGET (its peak is about 0.45 MB), HF_OOM_LENGTH certain to overrun it
# (test_the_cpu_meter_measures_and_its_budget_makes_an_oom_cell asserts why from the preset's config).
BUDGET = 1 << 20
HF_OOM_LENGTH = 16384


def run_tiny(module: str, out: str, lengths: list[int], *options: str) -> tuple[int, Any, str]:
    """peers.MODULE on the CPU, tiny, float32: (exit status, results document, stderr)."""
    status, doc, stderr, _ = run_peer(module, out, "--model", "tiny", "--dtype", "float32", "--device",
                                      "cpu", "--warmup", "0", "--repeat", "2", "--seq-len",
                                      *map(str, lengths), *options)
    return status, doc, stderr


@unittest.skipUnless(os.path.exists(BPBENCH) and os.path.exists(METER),
                     f"the bpbench binary and its CPU meter library ({METER}) are not built")
class PeerScripts(unittest.TestCase):
    """The peers' processes start in setUpClass, two chains at once (a process mostly imports, on one core):
    hf-checkpoint's budgeted run, beside alst-tiled then its --resume run."""

    tmp: tempfile.TemporaryDirectory[str]
    runs: dict[str, tuple[int, Any, str]]  # name -> (exit status, results document, stderr)

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        cls.runs = {}
        with ThreadPoolExecutor(max_workers=2) as pool:
            chains = [pool.submit(cls.hf_runs), pool.submit(cls.alst_runs)]
            for chain in chains:
                chain.result()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    @classmethod
    def out(cls, name: str) -> str:
        return os.path.join(cls.tmp.name, name, "results.json")

    @classmethod
    def hf_runs(cls) -> None:
        cls.runs["hf"] = run_tiny("hf_checkpoint", cls.out("hf"), [64, HF_OOM_LENGTH], "--no-checkpointing",
                                  "--budget-bytes", str(BUDGET))

    @classmethod
    def alst_runs(cls) -> None:
        if not os.path.isdir(checkouts.directory("deepspeed")):
            return
        out = cls.out("alst")
        cls.runs["alst"] = status, _, _ = run_tiny("alst_tiled", out, [16, 33], "--partition", "8")
        if status == 0:
            cls.runs["alst_resume"] = run_tiny("alst_tiled", out, [16, 33, 40], "--partition", "8",
                                               "--resume")

    def test_the_cpu_meter_measures_and_its_budget_makes_an_oom_cell(self) -> None:
        # Why HF_OOM_LENGTH's step overruns BUDGET, from the preset alone: its embedding output (T rows of
        # hidden_size float32 values) is one tensor the step must hold.
        config = json.loads(subprocess.run([BPBENCH, "hf-config", "tiny"], capture_output=True, text=True,
                                           check=True).stdout)
        self.assertGreater(HF_OOM_LENGTH * config["hidden_size"] * 4, BUDGET,
                           "precondition: HF_OOM_LENGTH's step must be certain to overrun BUDGET")
        status, doc, stderr = self.runs["hf"]
        self.assertEqual(status, 0, stderr)  # oom is a result
        self.assertEqual([c["axes"]["seq_len"] for c in doc["cells"]], [64, HF_OOM_LENGTH])
        measured, cell = doc["cells"]
        self.assertEqual(measured["status"], "ok", measured["reason"])
        self.assertGreater(measured["memory"]["peak_bytes"], measured["memory"]["base_bytes"])
        self.assertEqual(cell["status"], "oom", stderr)
        self.assertIn("bpbench CPU budget exceeded", cell["reason"])
        self.assertLessEqual(cell["memory"]["peak_bytes"], BUDGET)

    def test_alst_tiled_measures_and_resumes(self) -> None:
        if "alst" not in self.runs:
            if os.environ.get("CI") == "true":
                self.fail(".peers/deepspeed is missing (scripts/setup_peers.sh)")
            self.skipTest(".peers/deepspeed is missing (scripts/setup_peers.sh)")
        status, doc, stderr = self.runs["alst"]
        self.assertEqual(status, 0, stderr)
        self.assertEqual([c["status"] for c in doc["cells"]], ["ok", "ok"])
        self.assertEqual([c["axes"]["partition"] for c in doc["cells"]], [8, 8])
        self.assertTrue(all(c["memory"]["peak_bytes"] > 0 for c in doc["cells"]))
        status, doc2, stderr = self.runs["alst_resume"]
        self.assertEqual(status, 0, stderr)
        self.assertIn("T=16: kept", stderr)
        self.assertIn("T=33: kept", stderr)
        self.assertEqual(doc2["cells"][:2], doc["cells"])  # kept as they were
        self.assertEqual(doc2["cells"][2]["status"], "ok")

    def test_hf_checkpoint_offload_is_skipped_on_the_cpu_with_the_reason(self) -> None:
        from peers import common, hf_checkpoint

        out = self.out("offload")
        for options in ([], ["--resume"]):
            argv = ["--model", "tiny", "--dtype", "float32", "--device", "cpu", "--seq-len", "16", "33",
                    "--offload", "--bpbench", BPBENCH, "--out", out, *options]
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr):
                status = common.run(hf_checkpoint, hf_checkpoint.TOOL, "hf", argv)
            self.assertEqual(status, 0, stderr.getvalue())
            with open(out) as f:
                doc = json.load(f)
            for cell in doc["cells"]:
                self.assertEqual(cell["axes"]["impl"], "hf-checkpoint-offload")
                self.assertEqual(cell["status"], "skipped")
                self.assertEqual(cell["reason"], registry.entry("hf-checkpoint-offload").skip_reason())
                self.assertIn("GPU only", cell["reason"])
                self.assertIsNone(cell["memory"])
            self.assertEqual([c["axes"]["seq_len"] for c in doc["cells"]], [16, 33])


class RunByPath(unittest.TestCase):
    def test_a_module_run_by_its_path_runs_as_that_module(self) -> None:
        # The package's command line (standard library only: fast), by its file's path and with no
        # PYTHONPATH: it restarts as `python -m peers.__main__`, which the package's imports need.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run([sys.executable, os.path.join(PACKAGE, "__main__.py"), "list"],
                              capture_output=True, text=True, env=env)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.split(), registry.names())

    def test_every_module_that_runs_starts_as_a_module_first(self) -> None:
        start = ('if __name__ == "__main__" and not __package__:', "launch.rerun_as_module(__file__)")
        for name in sorted(os.listdir(PACKAGE)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(PACKAGE, name)) as f:
                text = f.read()
            if 'if __name__ == "__main__":' not in text and name != "__main__.py":
                continue  # imported only
            with self.subTest(module=name):
                first_import = re.search(r"^from \. import|^from \.\w+ import", text, re.MULTILINE)
                assert first_import is not None
                for line in start:
                    self.assertIn(line, text[:first_import.start()])


if __name__ == "__main__":
    unittest.main()
