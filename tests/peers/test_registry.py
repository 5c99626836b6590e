"""test_registry.py: the one list of peers (impls/peers/registry.py) is the list bpbench knows
(impls/registry.cpp's peer_names(), through the bpbench binary), and what the package and the shell scripts
read of it holds:
  - the C++ peer names (which the build reads from registry.py: scripts/cmake/peer_names.cmake) equal the
    registry's, in the same order: a PEERS line the build's reading misses fails here;
  - every entry's module is a file of the package, and mypy holds each to interface.Peer (each module's own
    TYPE_CHECKING block assigns it, or its PEER, to a Peer: checked here, typed by ctest's python_types);
  - every checkout is one of checkouts.py's, installed from scripts/peers/NAME.txt by scripts/setup_peers.sh;
  - `python -m peers list` and `python -m peers runs TABLE` (what scripts/cpu_peers.sh and
    scripts/paper_gpu.sh read) print the registry.
No torch here: the registry and its command line are standard library only (a few seconds in all).

Needs the bpbench binary for the first check (ctest's peers_* entries give BPBENCH; else build/bpbench).
Run: PYTHONPATH=impls .venv/bin/python -m unittest discover -s tests/peers -p test_registry.py -v
     (ctest: peers_<module>)
"""

import ast
import json
import os
import re
import subprocess
import tempfile
import unittest

from peer_support import BPBENCH, REPO, run_package

from peers import checkouts, registry

PACKAGE = os.path.join(REPO, "impls", "peers")


def bpbench_peer_names() -> list[str]:
    """impls/registry.cpp's peer_names(), as the binary reports them: `bpbench list peers` where it has that
    list; else every impl a results file may hold (recorded_impl_names(), named by the refusal of an unknown
    impl in a scenario) less the strategies (`bpbench list impls`)."""
    listed = subprocess.run([BPBENCH, "list", "peers"], capture_output=True, text=True)
    if listed.returncode == 0:
        return [line.split()[0] for line in listed.stdout.splitlines()[1:] if line.strip()]
    strategies = subprocess.run([BPBENCH, "list", "impls"], capture_output=True, text=True, check=True)
    strategy_names = [line.split()[0] for line in strategies.stdout.splitlines()[1:] if line.strip()]
    with tempfile.TemporaryDirectory() as d:
        scenario = os.path.join(d, "scenario.json")
        with open(scenario, "w") as f:
            json.dump({"name": "peer_names", "device": "cpu",
                       "grid": {"model": "tiny", "impl": "?", "seq_len": 16}}, f)
        refused = subprocess.run([BPBENCH, "run", scenario, "--out", os.path.join(d, "out")],
                                 capture_output=True, text=True)
    match = re.search(r"unknown impl '\?' \(valid: ([^)]*)\)", refused.stderr)
    if refused.returncode == 0 or not match:
        raise AssertionError(f"bpbench did not name the valid impls: {refused.stderr.strip()}")
    recorded = match.group(1).split(", ")
    assert recorded[:len(strategy_names)] == strategy_names, (recorded, strategy_names)
    return recorded[len(strategy_names):]


class Registry(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(BPBENCH), f"the bpbench binary is not built ({BPBENCH})")
    def test_the_peer_names_are_bpbenchs(self) -> None:
        self.assertEqual(registry.names(), bpbench_peer_names(),
                         "impls/peers/registry.py and impls/registry.cpp's peer_names() must list the same "
                         "peers in the same order")

    def test_every_module_is_a_file_of_the_package_and_typed_as_a_peer(self) -> None:
        # Each module's own TYPE_CHECKING block holds it (or its PEER object) to interface.Peer: an annotated
        # assignment whose annotation is Peer, which mypy (ctest's python_types) then checks.
        for module in sorted({p.module for p in registry.PEERS}):
            with self.subTest(module=module):
                path = os.path.join(PACKAGE, module + ".py")
                self.assertTrue(os.path.exists(path), module)
                with open(path) as f:
                    tree = ast.parse(f.read())
                typed = any(isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                            and node.test.id == "TYPE_CHECKING"
                            and any(isinstance(s, ast.AnnAssign) and isinstance(s.annotation, ast.Name)
                                    and s.annotation.id == "Peer" for s in node.body)
                            for node in tree.body)
                self.assertTrue(typed, f"{module}.py has no `if TYPE_CHECKING:` block assigning it to a Peer")

    def test_the_names_and_checkouts_are_well_formed(self) -> None:
        self.assertEqual(len(set(registry.names())), len(registry.PEERS), "a name twice")
        self.assertEqual(len({p.out_name for p in registry.PEERS}), len(registry.PEERS), "a folder twice")
        for p in registry.PEERS:
            with self.subTest(peer=p.name):
                self.assertRegex(p.name, r"^[a-z0-9]+(-[a-z0-9]+)*$")
                self.assertTrue(set(p.tables) <= set(registry.TABLES), p.tables)
                if p.checkout is not None:
                    self.assertIn(p.checkout, checkouts.NAMES)
        for name in checkouts.NAMES:
            self.assertTrue(os.path.exists(os.path.join(REPO, "scripts", "peers", name + ".txt")), name)
        with self.assertRaisesRegex(KeyError, "valid: hf-checkpoint, hf, "):
            registry.entry("nope")

    def test_the_command_line_prints_the_registry(self) -> None:
        done = run_package(["list"])
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.split(), registry.names())
        done = run_package(["list", "--device", "cpu"])
        self.assertEqual(done.stdout.split(), [p.name for p in registry.PEERS if not p.gpu_only])
        runs = {}
        for table in registry.TABLES:
            done = run_package(["runs", table])
            self.assertEqual(done.returncode, 0, done.stderr)
            runs[table] = [line.split() for line in done.stdout.splitlines()]
            self.assertEqual(runs[table], [[p.out_name, p.module, *p.options] for p in registry.table(table)])
        self.assertIn(["hf", "hf_checkpoint", "--no-checkpointing"], runs["cpu"])
        self.assertNotIn("alst_ulysses", [run[0] for table in runs.values() for run in table])
        done = run_package(["runs", "tpu"])
        self.assertEqual(done.returncode, 2)
        self.assertIn("invalid choice: 'tpu'", done.stderr)

if __name__ == "__main__":
    unittest.main()
