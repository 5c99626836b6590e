"""peer_modules.py: what the peers' tests share: where the repository and reports/peers/ are, and a peer script's
module loaded by path (a script's module, not a package: its neighbours go on sys.path, as the script puts them)."""

import importlib.util
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PEERS = os.path.join(REPO, "reports", "peers")


def load(name):
    """reports/peers/NAME.py as the module peers_NAME."""
    if PEERS not in sys.path:
        sys.path.insert(0, PEERS)
    spec = importlib.util.spec_from_file_location(f"peers_{name}", os.path.join(PEERS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
