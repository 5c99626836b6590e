"""snapshot_as_json.py: a memory_viz pickle rendered by PyTorch's own viewer code, then written as JSON.

    python tests/memory_viz/snapshot_as_json.py PICKLE OUT.json

The pickle must load and torch.cuda._memory_viz's trace_plot and segment_plot must render it (the pages the
viewer shows); the snapshot is then written as JSON for tests/profiles/test_memory_viz.cpp to check field by
field. Exit 1, with the error, where either fails.
"""

import json
import pickle
import sys

from torch.cuda import _memory_viz


def main() -> int:
    with open(sys.argv[1], "rb") as f:
        snapshot = pickle.load(f)
    _memory_viz.trace_plot(snapshot)
    _memory_viz.segment_plot(snapshot)
    with open(sys.argv[2], "w") as f:
        json.dump(snapshot, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
