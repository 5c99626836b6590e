"""official_streambp.py: loads the official StreamBP (PyPI streambp==1.0, the paper authors' code) and the
transformers 4.x it needs from .peers/streambp-official (scripts/setup_peers.sh), ahead of the main environment.

Import this module before anything imports transformers: it puts that directory first on sys.path. Only
streambp/stream_model.py is loaded (by path): `import streambp` would pull in trl through its trainers.
"""

import importlib.util
import os
import sys

PEER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".peers", "streambp-official")
PEER_DIR = os.path.normpath(os.environ.get("BPBENCH_STREAMBP_OFFICIAL", PEER_DIR))
STREAM_MODEL = os.path.join(PEER_DIR, "streambp", "stream_model.py")

if not os.path.exists(STREAM_MODEL):
    sys.exit(f"official StreamBP: {STREAM_MODEL} is missing (run scripts/setup_peers.sh, or set "
             "BPBENCH_STREAMBP_OFFICIAL to a directory holding streambp==1.0 and transformers==4.51.3)")
if "transformers" in sys.modules:
    sys.exit("official StreamBP: transformers was imported before official_streambp.py (import it first)")
sys.path.insert(0, PEER_DIR)

import transformers  # noqa: E402  (4.51.3, from PEER_DIR)

_spec = importlib.util.spec_from_file_location("streambp_stream_model", STREAM_MODEL)
stream_model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stream_model)
StreamModel = stream_model.StreamModel


def streambp_version():
    from importlib import metadata
    return metadata.version("streambp")


def forget_previous():
    """Drops every model wrapped before: the official code keeps each StreamModel as a key of its module-level
    `stream_buffer` dict, so without this a script measuring several lengths would hold every earlier model's
    parameters on the GPU, and each length's memory would include them."""
    stream_model.stream_buffer.clear()
    stream_model.global_dict.clear()


def wrap(model, partition, logits_partition):
    """The official wrapping, as its README runs it: StreamModel (changes `model` in place), then
    gradient_checkpointing_enable() (without it only the logits are chunked), then train(). Its forward runs the
    backward inside and returns a detached loss; it needs attention_mask."""
    sm = StreamModel(model, gradient_accumulation_steps=1, logits_chunk_size=logits_partition,
                     stream_checkpoint=True, checkpoint_chunk_size=partition)
    sm.gradient_checkpointing_enable()
    sm.train()
    return sm
