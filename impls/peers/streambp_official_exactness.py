"""streambp_official_exactness.py: the official StreamBP's loss and every gradient in float64, beside plain
BP's, on bpbench's tiny preset, for tests/peers/test_streambp_official.cpp and the report's gradient-error
table.

Usage (PYTHONPATH=impls): python -m peers.streambp_official_exactness OUT_DIR [--bpbench build/bpbench]

Writes OUT_DIR/model/ (the preset through `bpbench hf-config`, random weights saved with save_pretrained, norm
weights away from 1), OUT_DIR/check.safetensors (per case: input_ids, targets in bpbench's shifted form,
labels, loss and grad:<name> of the official StreamBP and of plain BP) and OUT_DIR/results.json: one bpbench
results cell per case (impl streambp-official, dtype float64) with its loss, the time of its one step, and its
gradient error against plain BP per parameter group (Er_abs, Er_rel, max_abs, rel_l2, as bpbench's own cells
carry).

Both sides run transformers 4.51.3 (the official code's) in true float64: transformers' float32 casts are
lifted by the oracle's Float64Casts mode (tests/oracle/oracle_common.py), as the oracle does. Plain BP here is
transformers' own loss; the C++ test holds it equal to bpbench's float64 plain BP to 1e-10, so the errors
below are against bpbench's.

Cases (the chunk sizes, 7 and 5, divide none of the lengths):
  right_pad     one sequence of 37 tokens, the last 5 padding: the official loss and gradients are (N-1)/N
                times the true ones (N = labels not -100): it divides by every label instead of every shifted
                target;
  prompt_mask   one sequence, its first 11 labels -100: each logits chunk drops one target more than it should
                where its chunk's labels are not all -100, so the error is not a uniform scale;
  batch2        two right-padded sequences (37 and 30 tokens): one count over the batch, per chunk, likewise.
"""

if __name__ == "__main__" and not __package__:  # run by its path: again as python -m peers.<this module>
    import launch  # type: ignore[import-not-found]  # (this file's folder is sys.path[0] here)
    launch.rerun_as_module(__file__)

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Any

from . import streambp_official_upstream as upstream  # first: its transformers 4.51.3

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from . import common

# tests/oracle/oracle_common.py, the transformers oracle's float64 mode and batch (a file of the tests, not of
# this package; hf_oracle.py itself imports families this transformers lacks).
_oracle_path = os.path.join(common.REPO, "tests", "oracle", "oracle_common.py")
_spec = importlib.util.spec_from_file_location("oracle_common", _oracle_path)
assert _spec is not None and _spec.loader is not None, _oracle_path
oracle_common: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle_common)

# A mode is not active inside an autograd.Function's backward (the mode stack is empty there), and the
# official code re-runs each layer's forward, chunk by chunk, in CheckpointFunctionForStreamBackward.backward:
# lift the casts there too, or its re-forward computes RMSNorm, RoPE and softmax in float32 (errors ~1e-7).
# Nothing of its algorithm changes: the same backward runs under the same mode as its forward.
_stream_backward = upstream.stream_model.CheckpointFunctionForStreamBackward.backward


def _backward_with_casts_lifted(ctx: Any, *grads: Any) -> Any:
    with oracle_common.Float64Casts():
        return _stream_backward(ctx, *grads)


upstream.stream_model.CheckpointFunctionForStreamBackward.backward = staticmethod(_backward_with_casts_lifted)

T, PARTITION, LOGITS_PARTITION, SEED = 37, 7, 5, 11
CASES = {  # name -> (lengths of the rows, prompt tokens whose labels are -100)
    "right_pad": ([32], 0),
    "prompt_mask": ([37], 11),
    "batch2": ([37, 30], 0),
}


def param_group(name: str) -> str:
    """bpbench's parameter groups (harness/model/model.cpp) from a Hugging Face parameter name."""
    if "embed_tokens" in name:
        return "embed"
    if name.startswith("lm_head"):
        return "lm_head"
    if "norm" in name:
        return "norms"
    if ".self_attn." in name:
        return "attention"
    if ".mlp." in name:
        return "mlp"
    raise ValueError(f"no parameter group for {name}")


def error_stats(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    """bpbench's ErrorStats (harness/run/grad_error.h) over the concatenation of (reference, got) pairs."""
    r = torch.cat([a.reshape(-1) for a, _ in pairs])
    g = torch.cat([b.reshape(-1) for _, b in pairs])
    diff = (r - g).abs()
    ref_norm = r.norm().item()
    return {"er_abs": diff.mean().item(), "er_rel": (diff / (r + 1e-10).abs()).mean().item(),
            "max_abs": diff.max().item(),
            "rel_l2": (diff.norm() / r.norm()).item() if ref_norm > 0 else diff.norm().item(),
            "count": r.numel()}


def grad_error(reference_loss: float, loss: float, ref_grads: dict[str, torch.Tensor],
               got_grads: dict[str, torch.Tensor]) -> dict[str, Any]:
    groups: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for name, ref in ref_grads.items():
        groups.setdefault(param_group(name), []).append((ref, got_grads[name]))
    out: dict[str, Any] = {g: error_stats(pairs) for g, pairs in groups.items()}
    out["all"] = error_stats([(ref, got_grads[n]) for n, ref in ref_grads.items()])
    return {"reference": "float64", "reference_loss": reference_loss,
            "loss_abs_error": abs(loss - reference_loss), "groups": out}


def run_case(config: Any, state: dict[str, torch.Tensor], batch: tuple[torch.Tensor, ...],
             official: bool) -> tuple[float, dict[str, torch.Tensor], float]:
    """Loss and gradients (by the unwrapped parameter names) of one float64 step, transformers' casts
    lifted."""
    ids, mask, labels, _ = batch
    torch.set_default_dtype(torch.float64)
    try:
        with oracle_common.Float64Casts():
            # RoPE's frequency table is made at construction: build the model under the mode too.
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float64,
                                                     attn_implementation="sdpa")
            model.load_state_dict(state)
            params = dict(model.named_parameters())  # before the wrapper renames the modules
            for p in params.values():
                p.grad = torch.zeros_like(p)
            started = time.perf_counter()
            if official:
                model.train()
                sm = upstream.wrap(model, PARTITION, LOGITS_PARTITION)
                loss = sm(input_ids=ids, attention_mask=mask, labels=labels).loss
            else:
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                loss.backward()
            seconds = time.perf_counter() - started
    finally:
        torch.set_default_dtype(torch.float32)
    return loss.item(), {n: p.grad.detach().clone() for n, p in params.items()}, seconds


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=common.summary(__doc__))
    p.add_argument("out_dir")
    p.add_argument("--bpbench", default=os.path.join(common.REPO, "build", "bpbench"))
    args = p.parse_args(argv)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    config_json = common.preset_config_json(args.bpbench, "tiny")
    config = common.auto_config(common.hub_form(config_json))
    model_dir = os.path.join(args.out_dir, "model")
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    with torch.no_grad():  # norm weights at 1 would hide a wrong norm-gradient path
        for name, prm in model.named_parameters():
            if "norm" in name:
                prm.add_(0.1 * torch.randn_like(prm))
    model.save_pretrained(model_dir)
    state = {k: v.double() for k, v in model.state_dict().items()}  # the saved float32 weights, exactly

    tensors: dict[str, torch.Tensor] = {}
    cells: list[dict[str, Any]] = []
    generator = torch.Generator().manual_seed(SEED)
    for case, (lengths, prompt) in CASES.items():
        batch = oracle_common.make_batch(config, T, lengths, prompt, generator)
        ref_loss, ref_grads, _ = run_case(config, state, batch, official=False)
        loss, grads, seconds = run_case(config, state, batch, official=True)
        ids, _, labels, targets = batch
        tensors.update({f"{case}:input_ids": ids, f"{case}:targets": targets, f"{case}:labels": labels,
                        f"{case}:loss_plain": torch.tensor(ref_loss, dtype=torch.float64),
                        f"{case}:loss_official": torch.tensor(loss, dtype=torch.float64)})
        for name in ref_grads:
            tensors[f"{case}:grad_plain:{name}"] = ref_grads[name]
            tensors[f"{case}:grad_official:{name}"] = grads[name]
        cell = common.empty_cell(argparse.Namespace(model="tiny", dtype="float64"), T, "streambp-official")
        cell["axes"].update({"batch": len(lengths), "partition": PARTITION,
                             "logits_partition": LOGITS_PARTITION, "prompt_len": prompt if prompt else -1,
                             "padding": min(lengths) < T})
        cell.update({"loss": loss, "uses_partition": True, "uses_logits_partition": True, "wall_s": seconds,
                     "time": {"median_s": seconds, "min_s": seconds, "max_s": seconds, "count": 1,
                              "warmup": 0, "runs_s": [seconds]},
                     "grad_error": grad_error(ref_loss, loss, ref_grads, grads), "case": case})
        cells.append(cell)
        valid = int((labels != -100).sum())
        print(f"{case}: official loss {loss:.12f}, plain {ref_loss:.12f}, ratio {loss / ref_loss:.12f}, "
              f"(N-1)/N {(valid - 1) / valid:.12f}, "
              f"gradient rel_l2 {cell['grad_error']['groups']['all']['rel_l2']:.3e}",
              file=sys.stderr)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(args.out_dir, "check.safetensors"))
    doc = {"schema": common.SCHEMA, "complete": True, "cells_total": len(cells),
           "meta": {"bpbench_version": None,
                    "peer": f"official StreamBP {upstream.streambp_version()} (transformers "
                            f"{upstream.TRANSFORMERS_VERSION}), float64 check against plain BP",
                    "versions": {"torch": torch.__version__, "transformers": upstream.TRANSFORMERS_VERSION,
                                 "streambp": upstream.streambp_version()},
                    "argv": [sys.argv[0]] + list(argv), "device": common.device_meta(torch.device("cpu")),
                    "threads": torch.get_num_threads(), "isolate": False, "git_commit": common.git_commit(),
                    "scenario_name": "streambp_official_exactness tiny", "scenario": None,
                    "hf_config": config_json},
           "cells": cells}
    common.write_atomically(os.path.join(args.out_dir, "results.json"), doc)
    with open(os.path.join(args.out_dir, "cases.json"), "w") as f:
        json.dump(sorted(CASES), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
