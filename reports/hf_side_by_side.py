"""hf_side_by_side.py: Hugging Face transformers with gradient checkpointing on the model bpbench runs, written as
bpbench results: reports/peers/hf_checkpoint.py under its first name (the same options; see that file)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import common  # noqa: E402
import hf_checkpoint  # noqa: E402

if __name__ == "__main__":
    sys.exit(common.run(hf_checkpoint, "hf_side_by_side", hf_checkpoint.__doc__.split("\n\n")[0], sys.argv[1:]))
