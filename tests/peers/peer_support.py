"""peer_support.py: what the peers' tests share: where the repository, the bpbench binary and its CPU meter
are, and a peer module run as users run it (`python -m peers.MODULE`, impls/ on PYTHONPATH:
impls/peers/launch.py).

The tests import the package as `peers`: run them with impls/ on PYTHONPATH, as ctest's peers_* entries do:
  PYTHONPATH=impls BPBENCH=build/bpbench .venv/bin/python -m unittest discover -s tests/peers -v
"""

import json
import os
import subprocess
import sys
import time
from typing import Any

try:
    from peers import launch
except ModuleNotFoundError as e:  # one line that says how, instead of an import error in every test module
    raise ImportError("the peers package (impls/peers/) is not importable: run the tests with impls/ on "
                      "PYTHONPATH (PYTHONPATH=impls ...; ctest's peers_* entries set it)") from e

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BPBENCH = os.environ.get("BPBENCH") or os.path.join(REPO, "build", "bpbench")
METER = os.path.join(os.path.dirname(BPBENCH), "libbpbench_peer_meter.so")


def run_module(module: str, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m peers.MODULE ARGS` in a process of its own (stdout and stderr captured)."""
    return subprocess.run(launch.module_argv(module, args), env=launch.package_env(), capture_output=True,
                          text=True, timeout=timeout)


def run_package(args: list[str]) -> subprocess.CompletedProcess[str]:
    """`python -m peers ARGS`: the registry's command line (impls/peers/__main__.py)."""
    return subprocess.run([sys.executable, "-m", launch.PACKAGE, *args], env=launch.package_env(),
                          capture_output=True, text=True, timeout=60)


def run_peer(module: str, out: str, *args: str) -> tuple[int, Any, str, float]:
    """A peer module writing `out`: (exit status, the results document or None, stderr, seconds)."""
    t0 = time.perf_counter()
    done = run_module(module, [*args, "--bpbench", BPBENCH, "--out", out])
    doc = None
    if os.path.exists(out):
        with open(out) as f:
            doc = json.load(f)
    return done.returncode, doc, done.stderr, time.perf_counter() - t0
