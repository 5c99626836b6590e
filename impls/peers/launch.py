"""launch.py: how a peer process starts: `python -m peers.MODULE ...` with the folder holding the package
(impls/) on PYTHONPATH, the package's one way to run. A module run by its file's path instead (`python
impls/peers/hf_checkpoint.py ...`, as tests/peers/*.cpp run them) starts itself again that way first thing:

  if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.NAME
      import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
      launch.rerun_as_module(__file__)

Standard library only: that runs before anything of the package can be imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import NoReturn

PACKAGE = "peers"
IMPLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # what PYTHONPATH holds


def package_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's) with IMPLS first on PYTHONPATH."""
    env = dict(os.environ if environ is None else environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != IMPLS]
    env["PYTHONPATH"] = os.pathsep.join([IMPLS, *rest])
    return env


def module_argv(module: str, args: list[str]) -> list[str]:
    """The command line of peers.MODULE (a name of this package, "hf_checkpoint") under this interpreter."""
    return [sys.executable, "-m", f"{PACKAGE}.{module}", *args]


def rerun_as_module(path: str) -> NoReturn:
    """This process again as `python -m peers.<path's module> <the same arguments>` (its pid, its files)."""
    module = os.path.splitext(os.path.basename(path))[0]
    os.execve(sys.executable, module_argv(module, sys.argv[1:]), package_env())
