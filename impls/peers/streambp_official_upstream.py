"""streambp_official_upstream.py: the official StreamBP's own code (PyPI streambp==1.0, the paper authors')
and the transformers 4.x it needs, loaded from .peers/streambp-official (scripts/setup_peers.sh; checkouts.py)
ahead of the main environment, and wrapped as its README runs it. streambp_official.py measures it;
streambp_official_exactness.py checks its gradients.

Import this module before anything imports transformers: it puts that directory first on sys.path. Only
streambp/stream_model.py is loaded (by path): `import streambp` would pull in trl through its trainers.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

from . import checkouts

PEER_DIR = checkouts.directory("streambp-official")
STREAM_MODEL = os.path.join(PEER_DIR, "streambp", "stream_model.py")

if not os.path.exists(STREAM_MODEL):
    sys.exit(f"official StreamBP: {STREAM_MODEL} is missing (run scripts/setup_peers.sh, or set "
             "BPBENCH_STREAMBP_OFFICIAL to a directory holding streambp==1.0 and transformers==4.51.3)")
if "transformers" in sys.modules:
    sys.exit("official StreamBP: transformers was imported before streambp_official_upstream.py (import it "
             "first)")
checkouts.put_first_on_path("streambp-official")

import transformers  # (4.51.3, from PEER_DIR)

_spec = importlib.util.spec_from_file_location("streambp_stream_model", STREAM_MODEL)
assert _spec is not None and _spec.loader is not None, STREAM_MODEL
stream_model: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stream_model)
StreamModel = stream_model.StreamModel
TRANSFORMERS_VERSION: str = transformers.__version__


def streambp_version() -> str:
    from importlib import metadata
    return metadata.version("streambp")


def forget_previous() -> None:
    """Drops every model wrapped before: the official code keeps each StreamModel as a key of its module-level
    `stream_buffer` dict, so without this a script measuring several lengths would hold every earlier model's
    parameters on the GPU, and each length's memory would include them."""
    stream_model.stream_buffer.clear()
    stream_model.global_dict.clear()


def wrap(model: Any, partition: int, logits_partition: int) -> Any:
    """The official wrapping, as its README runs it: StreamModel (changes `model` in place), then
    gradient_checkpointing_enable() (without it only the logits are chunked), then train(). Its forward runs
    the backward inside and returns a detached loss; it needs attention_mask."""
    sm = StreamModel(model, gradient_accumulation_steps=1, logits_chunk_size=logits_partition,
                     stream_checkpoint=True, checkpoint_chunk_size=partition)
    sm.gradient_checkpointing_enable()
    sm.train()
    return sm
