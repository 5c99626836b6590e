"""test_peer_scripts.py: the peer scripts as users run them, on the CPU (tiny preset, float32):
  - on bpbench's own CPU meter (cpu_meter.py): memory is measured, and --budget-bytes is its budget, an overrun
    an "oom" cell with the peak it reached;
  - the new peers run through the peer interface: alst-tiled measures, hf-checkpoint-offload writes skipped
    cells with the reason (GPU only), and --resume keeps the finished lengths of both scripts and runs the rest.

Needs the bpbench binary and the meter library beside it (ctest's peers_common gives BPBENCH; else build/).
Run: .venv/bin/python -m unittest tests/peers/test_peer_scripts.py -v   (ctest: peers_common)
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BPBENCH = os.environ.get("BPBENCH", os.path.join(REPO, "build", "bpbench"))
METER = os.path.join(os.path.dirname(BPBENCH), "libbpbench_peer_meter.so")


def run_peer(script, out, lengths, *options):
    """reports/peers/SCRIPT.py on the CPU; (exit status, results document, stderr)."""
    argv = [sys.executable, os.path.join(REPO, "reports", "peers", script + ".py"), "--model", "tiny", "--dtype",
            "float32", "--device", "cpu", "--warmup", "0", "--repeat", "2", "--seq-len", *map(str, lengths),
            "--bpbench", BPBENCH, "--out", out, *options]
    done = subprocess.run(argv, capture_output=True, text=True)
    doc = None
    if os.path.exists(out):
        with open(out) as f:
            doc = json.load(f)
    return done.returncode, doc, done.stderr


@unittest.skipUnless(os.path.exists(BPBENCH) and os.path.exists(METER),
                     f"the bpbench binary and its CPU meter library ({METER}) are not built")
class PeerScripts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def out(self, name):
        return os.path.join(self.tmp.name, name, "results.json")

    def test_the_cpu_meter_measures_and_its_budget_makes_an_oom_cell(self):
        status, doc, stderr = run_peer("hf_checkpoint", self.out("hf"), [64], "--no-checkpointing")
        self.assertEqual(status, 0, stderr)
        memory = doc["cells"][0]["memory"]
        self.assertGreater(memory["peak_bytes"], memory["base_bytes"])
        # A budget between the base and the peak: the step goes over it, and that is a result.
        budget = (memory["base_bytes"] + memory["peak_bytes"]) // 2
        status, doc, stderr = run_peer("hf_checkpoint", self.out("budget"), [64], "--no-checkpointing",
                                       "--budget-bytes", str(budget))
        self.assertEqual(status, 0, stderr)
        cell = doc["cells"][0]
        self.assertEqual(cell["status"], "oom", stderr)
        self.assertIn("bpbench CPU budget exceeded", cell["reason"])
        self.assertLessEqual(cell["memory"]["peak_bytes"], budget)

    def test_alst_tiled_measures_and_resumes(self):
        if not os.path.isdir(os.path.join(REPO, ".peers", "deepspeed")):
            if os.environ.get("CI") == "true":
                self.fail(".peers/deepspeed is missing (scripts/setup_peers.sh)")
            self.skipTest(".peers/deepspeed is missing (scripts/setup_peers.sh)")
        out = self.out("alst")
        status, doc, stderr = run_peer("alst_tiled", out, [16, 33], "--partition", "8")
        self.assertEqual(status, 0, stderr)
        self.assertEqual([c["status"] for c in doc["cells"]], ["ok", "ok"])
        self.assertEqual([c["axes"]["partition"] for c in doc["cells"]], [8, 8])
        self.assertTrue(all(c["memory"]["peak_bytes"] > 0 for c in doc["cells"]))
        status, doc2, stderr = run_peer("alst_tiled", out, [16, 33, 40], "--partition", "8", "--resume")
        self.assertEqual(status, 0, stderr)
        self.assertIn("T=16: kept", stderr)
        self.assertIn("T=33: kept", stderr)
        self.assertEqual(doc2["cells"][:2], doc["cells"])  # kept as they were
        self.assertEqual(doc2["cells"][2]["status"], "ok")

    def test_hf_checkpoint_offload_is_skipped_on_the_cpu_with_the_reason(self):
        out = self.out("offload")
        status, doc, stderr = run_peer("hf_checkpoint", out, [16, 33], "--offload")
        self.assertEqual(status, 0, stderr)
        for cell in doc["cells"]:
            self.assertEqual(cell["axes"]["impl"], "hf-checkpoint-offload")
            self.assertEqual(cell["status"], "skipped")
            self.assertIn("GPU only", cell["reason"])
            self.assertIsNone(cell["memory"])
        status, doc, stderr = run_peer("hf_checkpoint", out, [16, 33], "--offload", "--resume")
        self.assertEqual(status, 0, stderr)
        self.assertEqual([c["status"] for c in doc["cells"]], ["skipped", "skipped"])


if __name__ == "__main__":
    unittest.main()
