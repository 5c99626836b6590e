"""test_peer_common.py: peers.common (impls/peers/common.py), the peers' shared measuring code, on a fake peer
and a fake memory meter, on the CPU (no GPU, no bpbench binary, no model download):
  - any exception of one length is that length's cell, status "error" with "<type>: <message>" as its reason,
    its model freed, and the next lengths still run; the script exits 1 and names the failed lengths on stderr
    (an oom alone exits 0);
  - an oom reports the peak since the start of its own length, never the previous length's higher peak;
  - causal_lm builds the model under the requested device (torch.device context), not on the host then copied;
  - the fake peer and meter satisfy interface.Peer and interface.Meter, and common.run refuses what does not.

Run: PYTHONPATH=impls .venv/bin/python -m unittest discover -s tests/peers -v   (ctest: peers_<module>)
"""

import contextlib
import gc
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest
import weakref
from typing import Any
from unittest import mock

try:
    import torch
except ImportError as e:
    raise unittest.SkipTest("torch is not importable: the peers need it") from e

import peer_support  # noqa: F401  (the package importable, or one line saying how)

from peers import common, heap_policy, interface

PARAM_BYTES = 100  # what every fake model holds
ACTIVATION_BYTES_PER_TOKEN = 1000  # what a fake step holds at its peak, per token


class FakeMeter:
    """interface.Meter, kept by hand: the fake peer allocates and frees bytes on it."""

    def __init__(self):
        self.current = self.peak_bytes = 0
        self.empty_caches = 0
        self.budget = None

    def allocate(self, n):
        self.current += n
        self.peak_bytes = max(self.peak_bytes, self.current)

    def free(self, n):
        self.current -= n

    def reset(self):  # as torch.cuda.reset_peak_memory_stats: the peak restarts from what is allocated now
        self.peak_bytes = self.current

    def allocated(self):
        return self.current

    def peak(self):
        return self.peak_bytes

    def reserved_peak(self):
        return self.peak_bytes

    def set_budget(self, budget_bytes):
        self.budget = budget_bytes

    def empty_cache(self):
        self.empty_caches += 1
        gc.collect()  # whatever measure_length let go of is freed now, cycles included

    def synchronize(self):
        pass


class FakePeer:
    """A peer (common.py's interface) whose successive lengths do what `plans` says, one plan per build:
    "ok", "build-oom" (the model, then 500 bytes more, then out of memory), "build-error", "step-error",
    "step-oom" or "interrupt" (KeyboardInterrupt in the step). Its model holds PARAM_BYTES on the meter until
    it is garbage; a step holds ACTIVATION_BYTES_PER_TOKEN * T at its peak, then frees them."""

    BUILD_OOM_EXTRA = 500
    STEP_ERROR = "shape mismatch\n   in the   fake step"

    def __init__(self, meter, plans):
        self.meter, self.plans, self.models = meter, list(plans), []

    def impl(self, args):
        return "fake"

    def describe(self, args):
        return "a fake peer"

    def versions(self):
        return {"fake": "1"}

    def unavailable(self, args):
        return None

    def config(self, config_json):
        return types.SimpleNamespace(vocab_size=config_json["vocab_size"])

    def build(self, config, args, device, dtype):
        plan = self.plans.pop(0)
        model = torch.nn.Linear(2, 2)
        self.meter.allocate(PARAM_BYTES)
        weakref.finalize(model, self.meter.free, PARAM_BYTES)
        self.models.append(weakref.ref(model))
        if plan == "build-oom":
            self.meter.allocate(self.BUILD_OOM_EXTRA)
            # The failed allocation's neighbours, freed as the error unwinds.
            self.meter.free(self.BUILD_OOM_EXTRA)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        if plan == "build-error":
            raise ValueError("no such layer (fake)")

        def step(tokens):
            if plan == "step-error":
                raise RuntimeError(self.STEP_ERROR)
            if plan == "step-oom":
                raise torch.OutOfMemoryError("CUDA out of memory (fake step)")
            if plan == "interrupt":
                raise KeyboardInterrupt()
            activations = ACTIVATION_BYTES_PER_TOKEN * tokens.size(1)
            self.meter.allocate(activations)
            self.meter.free(activations)
            return torch.tensor(1.5)

        return model, step, {}


def peer_args(**changes):
    a = types.SimpleNamespace(model="fake", dtype="float32", seed=0, warmup=1, repeat=2)
    a.__dict__.update(changes)
    return a


def measure(peer, meter, T):
    return common.measure_length(peer, peer_args(), peer.config({"vocab_size": 32}), T, torch.device("cpu"),
                                 torch.float32, meter)


class MeasureLength(unittest.TestCase):
    def test_an_exception_is_the_lengths_error_cell_and_its_model_is_freed(self):
        meter = FakeMeter()
        peer = FakePeer(meter, ["step-error"])
        cell = measure(peer, meter, 16)
        self.assertEqual(cell["status"], "error")
        self.assertEqual(cell["reason"], "RuntimeError: shape mismatch in the fake step")
        self.assertIsNone(cell["loss"])
        self.assertIsNone(cell["memory"])
        self.assertIsNone(cell["time"])
        self.assertIsNone(peer.models[-1](), "the failed length's model is still referenced")
        self.assertEqual(meter.current, 0)
        self.assertGreater(meter.empty_caches, 0)

    def test_an_error_in_the_build_is_an_error_cell_too(self):
        meter = FakeMeter()
        cell = measure(FakePeer(meter, ["build-error"]), meter, 16)
        self.assertEqual((cell["status"], cell["reason"]), ("error", "ValueError: no such layer (fake)"))

    def test_a_long_reason_is_one_line_of_at_most_300_characters(self):
        meter = FakeMeter()
        peer = FakePeer(meter, ["step-error"])
        peer.STEP_ERROR = "word\t" * 200
        cell = measure(peer, meter, 16)
        self.assertEqual(cell["status"], "error")
        self.assertLessEqual(len(cell["reason"]), 300)
        self.assertTrue(cell["reason"].startswith("RuntimeError: word word"))
        self.assertNotIn("\t", cell["reason"])

    def test_an_oom_stays_an_oom(self):
        meter = FakeMeter()
        cell = measure(FakePeer(meter, ["step-oom"]), meter, 16)
        self.assertEqual(cell["status"], "oom")
        self.assertIn("out of memory", cell["reason"])
        self.assertIsNotNone(cell["memory"])

    def test_keyboard_interrupt_stops_the_run(self):
        meter = FakeMeter()
        with self.assertRaises(KeyboardInterrupt):
            measure(FakePeer(meter, ["interrupt"]), meter, 16)

    def test_an_oom_in_the_build_reports_its_own_lengths_peak(self):
        meter = FakeMeter()
        peer = FakePeer(meter, ["ok", "build-oom"])
        high = measure(peer, meter, 64)
        self.assertEqual(high["status"], "ok")
        self.assertEqual(high["memory"]["peak_bytes"], PARAM_BYTES + 64 * ACTIVATION_BYTES_PER_TOKEN)
        oom = measure(peer, meter, 32)
        self.assertEqual(oom["status"], "oom")
        # Since the start of T=32: its model and the bytes before the failed allocation, not T=64's step.
        self.assertEqual(oom["memory"]["peak_bytes"], PARAM_BYTES + FakePeer.BUILD_OOM_EXTRA)
        self.assertEqual(oom["memory"]["peak_above_base_bytes"], oom["memory"]["peak_bytes"])

    def test_no_meter_keeps_memory_null(self):
        cell = measure(FakePeer(FakeMeter(), ["ok"]), None, 16)
        self.assertEqual(cell["status"], "ok")
        self.assertIsNone(cell["memory"])
        self.assertEqual(cell["time"]["count"], 2)


@unittest.skipUnless(importlib.util.find_spec("transformers"), "common.run needs transformers' logging")
class Run(unittest.TestCase):
    """The whole script (common.run) on the CPU with the fake meter injected and the preset's config given."""

    def run_script(self, plans, lengths, *options, validate=False):
        """(exit status, results document, stderr); with validate, self.validation: `bpbench validate`'s
        (exit status, stderr) of the file, or None without BPBENCH. Only the schema test asks: each
        validation is a process of its own (~0.5 s)."""
        meter = self.meter = FakeMeter()
        peer = FakePeer(meter, plans)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "results.json")
            argv = ["--model", "fake", "--seq-len", *map(str, lengths), "--device", "cpu", "--dtype",
                    "float32", "--warmup", "1", "--repeat", "1", "--out", out, *options]
            stderr = io.StringIO()
            with mock.patch.object(common, "preset_config_json", return_value={"vocab_size": 32}), \
                    mock.patch.object(common, "METER_FACTORY", lambda device, args: meter), \
                    contextlib.redirect_stderr(stderr):
                status = common.run(peer, "fake_peer", "a fake peer", argv)
            with open(out) as f:
                doc = json.load(f)
            # bpbench's own check of the file against reports/results.schema.json (ctest gives BPBENCH).
            self.validation: tuple[int, str] | None = None
            if validate and os.environ.get("BPBENCH"):
                done = subprocess.run([os.environ["BPBENCH"], "validate", out], capture_output=True,
                                      text=True)
                self.validation = (done.returncode, done.stderr)
        return status, doc, stderr.getvalue()

    def test_the_file_matches_the_published_schema(self):
        if not os.environ.get("BPBENCH"):
            self.skipTest("BPBENCH (the bpbench binary) not given; ctest's peers_* entries give it")
        self.run_script(["ok", "build-oom", "step-error"], [64, 32, 16], validate=True)
        assert self.validation is not None
        returncode, stderr = self.validation
        self.assertEqual(returncode, 0, stderr)

    def test_every_length_is_written_and_the_errors_make_exit_status_1(self):
        status, doc, stderr = self.run_script(["ok", "build-oom", "step-error", "ok"], [64, 32, 16, 8])
        cells = {c["axes"]["seq_len"]: c for c in doc["cells"]}
        self.assertEqual([c["status"] for c in doc["cells"]], ["ok", "oom", "error", "ok"])
        self.assertTrue(doc["complete"])
        self.assertTrue(cells[16]["reason"].startswith("RuntimeError: shape mismatch"))
        # The length after the error was measured.
        self.assertEqual(cells[8]["loss"], 1.5)
        self.assertEqual(cells[8]["memory"]["peak_bytes"], PARAM_BYTES + 8 * ACTIVATION_BYTES_PER_TOKEN)
        # The oom after T=64's high peak reports T=32's own.
        self.assertEqual(cells[32]["memory"]["peak_bytes"], PARAM_BYTES + FakePeer.BUILD_OOM_EXTRA)
        self.assertEqual(status, 1)
        last = stderr.strip().splitlines()[-1]
        # Only the error cell is named; the oom at T=32 is a result. (The message ends in a temporary path,
        # which may hold any digits: look at the list of lengths only.)
        self.assertIn("(T=16;", last)
        self.assertIn('"error"', last)

    def test_the_heap_policy_is_recorded_only_where_it_was_set(self):
        # heap_policy.py: a peer module restarts itself with glibc's tunables; the file says so, or says
        # nothing.
        with mock.patch.dict(os.environ, {"GLIBC_TUNABLES": heap_policy.TUNABLES}):
            _, doc, _ = self.run_script(["ok"], [8])
        self.assertEqual(doc["meta"]["heap"], heap_policy.NOTE)
        with mock.patch.dict(os.environ, {"GLIBC_TUNABLES": ""}):
            _, doc, _ = self.run_script(["ok"], [8])
        self.assertNotIn("heap", doc["meta"])

    def test_the_budget_is_the_meters(self):
        self.run_script(["ok"], [8])
        self.assertIsNone(self.meter.budget)
        self.run_script(["ok"], [8], "--budget-bytes", "123456")
        self.assertEqual(self.meter.budget, 123456)

    def test_oom_alone_is_a_result_and_exits_0(self):
        status, doc, stderr = self.run_script(["ok", "build-oom"], [64, 32])
        self.assertEqual([c["status"] for c in doc["cells"]], ["ok", "oom"])
        self.assertEqual(status, 0)
        self.assertNotIn("failed", stderr)


class Interface(unittest.TestCase):
    def test_the_fakes_satisfy_the_protocols(self):
        peer = FakePeer(FakeMeter(), [])
        self.assertIsInstance(peer, interface.Peer)
        self.assertNotIsInstance(peer, interface.HasArguments)
        self.assertNotIsInstance(peer, interface.MeasuresOwnProcesses)
        self.assertIsInstance(FakeMeter(), interface.Meter)

    def test_run_refuses_what_is_not_a_peer(self):
        not_a_peer = types.SimpleNamespace(impl=lambda args: "fake", describe=lambda args: "no build")
        with self.assertRaisesRegex(TypeError, "is not a peer"):
            common.run(not_a_peer, "fake_peer", "a fake peer", ["--model", "fake"])


def fake_transformers(version, seen):
    """A transformers module whose AutoModelForCausalLM.from_config records the device it builds under."""

    def from_config(config, **kwargs):
        seen.update(kwargs)
        seen["default_device"] = torch.empty(()).device  # where a parameter made now would live
        return torch.nn.Linear(2, 2)

    module: Any = types.ModuleType("transformers")
    module.__version__ = version
    module.AutoModelForCausalLM = types.SimpleNamespace(from_config=from_config)
    return module


class CausalLm(unittest.TestCase):
    # meta, not cpu: the default device is cpu, so only another device shows the model was built under it.
    def test_the_model_is_built_under_the_requested_device(self):
        for version, dtype_key in (("5.17.0", "dtype"), ("4.51.3", "torch_dtype")):
            seen: dict[str, Any] = {}
            with mock.patch.dict(sys.modules, {"transformers": fake_transformers(version, seen)}):
                common.causal_lm(object(), torch.bfloat16, torch.device("meta"))
            self.assertEqual(seen["default_device"], torch.device("meta"), version)
            self.assertEqual(seen[dtype_key], torch.bfloat16, version)
            self.assertEqual(seen["attn_implementation"], "sdpa", version)
        self.assertEqual(torch.empty(()).device.type, "cpu", "the device context outlived causal_lm")

    @unittest.skipUnless(importlib.util.find_spec("transformers"), "transformers is not importable")
    def test_the_installed_transformers_builds_under_a_device_context(self):
        import transformers
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
        real = transformers.AutoModelForCausalLM.from_config
        seen = []

        def spy(*args, **kwargs):
            seen.append(torch.empty(()).device)
            return real(*args, **kwargs)

        with mock.patch.object(transformers.AutoModelForCausalLM, "from_config", spy):
            model = common.causal_lm(config, torch.float32, torch.device("meta"))
        self.assertEqual(seen, [torch.device("meta")])
        self.assertEqual({p.device.type for p in model.parameters()}, {"meta"})
        self.assertEqual({p.dtype for p in model.parameters()}, {torch.float32})


if __name__ == "__main__":
    unittest.main()
