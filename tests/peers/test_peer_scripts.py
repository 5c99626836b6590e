"""test_peer_scripts.py: the peer modules as users run them (python -m peers.MODULE), on the CPU (tiny,
float32):
  - hf-checkpoint on bpbench's own CPU meter (cpu_meter.py): memory is measured, and --budget-bytes is its
    budget, an overrun an "oom" cell with the peak it reached (one run: T=16 and 33 within the budget, and a
    length whose embedding output alone, by the preset's config, is more than the budget);
  - that run's file is a bpbench results file: `bpbench validate` takes it, `bpbench report` renders it, alone
    and beside a bpbench run of the same lengths (one time table);
  - the peers run through the peer interface: alst-tiled measures and --resume keeps its finished lengths and
    runs the rest; hf-checkpoint-offload, liger-flce and cce write skipped cells with registry.py's reasons
    (GPU only), hf-checkpoint-offload again on --resume (in this process: nothing is measured, so no meter is
    installed here, and a skipping run imports no transformers);
  - a module run by its file's path (as tests/peers/*.cpp run them) starts again as `python -m peers.NAME`,
    and every module that runs has that start (launch.py) before its first import of the package.

About 25 s on 2 idle cores (two chains of peer processes at once, ~7 s each; alst-tiled's two runs are the
longer chain). Needs the bpbench binary and the meter library beside it (ctest's peers_* entries give
BPBENCH; else build/).
Run: PYTHONPATH=impls .venv/bin/python -m unittest discover -s tests/peers -p test_peer_scripts.py -v
     (ctest: peers_<module>)
"""

import contextlib
import io
import json
import math
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
# hf-checkpoint's one run: HF_LENGTHS measured within BUDGET (their peaks are about 0.2 MB), HF_OOM_LENGTH
# certain to overrun it (test_the_cpu_meter_measures_and_its_budget_makes_an_oom_cell asserts why from the
# preset's config).
BUDGET = 1 << 20
HF_LENGTHS = [16, 33]
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
        cls.runs["hf"] = run_tiny("hf_checkpoint", cls.out("hf"), [*HF_LENGTHS, HF_OOM_LENGTH],
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
        self.assertEqual([c["axes"]["seq_len"] for c in doc["cells"]], [*HF_LENGTHS, HF_OOM_LENGTH])
        parameters = 14016  # tiny's
        for cell in doc["cells"][:-1]:
            with self.subTest(T=cell["axes"]["seq_len"]):
                self.assertEqual(cell["status"], "ok", cell["reason"])
                self.assertEqual(cell["axes"]["impl"], "hf-checkpoint")
                self.assertTrue(math.isfinite(cell["loss"]))
                self.assertEqual(cell["time"]["count"], 2)
                # Parameters and gradients in the base, the step above it; no caching allocator on the CPU.
                memory = cell["memory"]
                self.assertGreater(memory["base_bytes"], 2 * parameters * 4)
                self.assertGreater(memory["peak_bytes"], memory["base_bytes"])
                self.assertNotIn("reserved_peak_bytes", memory)
        cell = doc["cells"][-1]
        self.assertEqual(cell["status"], "oom", stderr)
        self.assertIn("bpbench CPU budget exceeded", cell["reason"])
        self.assertLessEqual(cell["memory"]["peak_bytes"], BUDGET)
        self.assertTrue(doc["complete"])
        self.assertEqual(doc["meta"]["hf_config"]["num_hidden_layers"], 2)

    def bpbench(self, *args: str) -> str:
        done = subprocess.run([BPBENCH, *args], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return done.stdout

    def test_its_file_is_one_bpbench_validates_and_reports_beside_its_own(self) -> None:
        results = self.out("hf")
        self.bpbench("validate", results)
        report = os.path.join(self.tmp.name, "report")
        self.bpbench("report", results, "--out", report)
        with open(os.path.join(report, "report.md")) as f:
            self.assertIn("hf-checkpoint", f.read())
        # Beside a bpbench run of the same model and lengths: one report, both files named, the peer's row
        # in the same time table as the strategy's.
        scenario = os.path.join(self.tmp.name, "beside.json")
        with open(scenario, "w") as f:
            json.dump({"name": "beside", "threads": 1, "measure": {"grad_error": False},
                       "grid": {"model": "tiny", "impl": "checkpoint", "seq_len": HF_LENGTHS}}, f)
        run = os.path.join(self.tmp.name, "beside")
        self.bpbench("run", scenario, "--out", run, "--quiet")
        both = os.path.join(self.tmp.name, "both")
        self.bpbench("report", os.path.join(run, "results.json"), results, "--out", both)
        with open(os.path.join(both, "report.md")) as f:
            merged = f.read()
        self.assertIn(f"- with: `{results}` (transformers", merged)
        self.assertIn("| checkpoint |", merged)
        self.assertIn("| hf-checkpoint |", merged)

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

    def test_gpu_only_peers_are_skipped_on_the_cpu_with_the_reason(self) -> None:
        from peers import cce, common, hf_checkpoint, liger_flce

        def offload(argv: list[str]) -> int:
            return common.run(hf_checkpoint, hf_checkpoint.TOOL, "hf", ["--offload", *argv])

        # hf-checkpoint-offload again with --resume: its skipped cells are kept.
        runs = [("hf-checkpoint-offload", offload, ([], ["--resume"])),
                ("liger-flce", lambda argv: liger_flce.PEER.main("liger_flce", None, argv), ([],)),
                ("cce", lambda argv: cce.PEER.main("cce", None, argv), ([],))]
        for impl, run, option_sets in runs:
            out = self.out(impl)
            for options in option_sets:
                with self.subTest(impl=impl, options=options):
                    stderr = io.StringIO()
                    with contextlib.redirect_stderr(stderr):
                        status = run(["--model", "tiny", "--dtype", "float32", "--device", "cpu", "--seq-len",
                                      "16", "33", "--bpbench", BPBENCH, "--out", out, *options])
                    self.assertEqual(status, 0, stderr.getvalue())
                    with open(out) as f:
                        doc = json.load(f)
                    self.assertEqual([c["axes"]["seq_len"] for c in doc["cells"]], [16, 33])
                    for cell in doc["cells"]:
                        self.assertEqual(cell["axes"]["impl"], impl)
                        self.assertEqual(cell["status"], "skipped")
                        self.assertEqual(cell["reason"], registry.entry(impl).skip_reason())
                        self.assertIn("GPU only", cell["reason"])
                        self.assertIsNone(cell["memory"])
                        self.assertIsNone(cell["loss"])
                        self.assertIsNone(cell["time"])


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
