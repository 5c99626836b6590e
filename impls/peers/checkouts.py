"""checkouts.py: the third-party code some peers run, installed apart from the main environment into
.peers/NAME by scripts/setup_peers.sh (pinned and hashed: scripts/peers/NAME.txt), and the one place that puts
such a directory on sys.path. Nothing of the repository goes on sys.path: the package is imported as `peers`.

  kernels            Liger-Kernel and cut-cross-entropy (liger_flce.py, cce.py through fused_loss.py)
  deepspeed          DeepSpeed, for ALST's tiled MLP and loss and Ulysses (alst_tiled.py, alst_ulysses.py);
                     $BPBENCH_DEEPSPEED overrides the directory
  streambp-official  the official StreamBP and the transformers 4.51.3 it needs
                     (streambp_official_upstream.py); $BPBENCH_STREAMBP_OFFICIAL overrides the directory

Standard library only.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ("kernels", "deepspeed", "streambp-official")
OVERRIDES = {"deepspeed": "BPBENCH_DEEPSPEED", "streambp-official": "BPBENCH_STREAMBP_OFFICIAL"}


def directory(name: str) -> str:
    """.peers/NAME of the repository, or the directory its environment variable names."""
    if name not in NAMES:
        raise ValueError(f"no checkout {name!r} (valid: {', '.join(NAMES)})")
    path = os.path.join(REPO, ".peers", name)
    if name in OVERRIDES:
        path = os.environ.get(OVERRIDES[name], path)
    return os.path.normpath(path)


def put_first_on_path(name: str) -> str:
    """directory(name) first on sys.path (once), so that its packages shadow the main environment's; its
    path."""
    path = directory(name)
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)
    return path
