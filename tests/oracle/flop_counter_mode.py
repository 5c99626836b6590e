"""flop_counter_mode.py: PyTorch's own FLOP counter on transformers' model, the check of bpbench's counted FLOPs.

Usage: flop_counter_mode.py OUT_DIR CASE [CASE ...]
  CASE = name:vocab:hidden:intermediate:layers:heads:kv_heads:head_dim:tied:sequences:seq_len
         (a bpbench preset's dimensions, written by tests/model/test_flops.cpp so the two cannot drift apart)

For each case it builds the Qwen3 network in transformers with eager attention (its attention is two matmuls
that torch.utils.flop_counter.FlopCounterMode counts; PyTorch's fused CPU attention kernel is not counted by
it), runs one forward + backward of the SFT loss under FlopCounterMode, and writes OUT_DIR/flops.json:
  {name: {"sequences", "seq_len", "total", "matmul" (aten.mm + aten.addmm: every linear and the LM head, forward
          and backward), "attention" (aten.bmm outside the rotary embedding: Q K^T and P V over all T x T
          scores, forward and backward), "rotary" (aten.bmm of the RoPE frequency table), "ops": {op: flops}}}
"""

import json
import os
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.utils import logging as hf_logging


def count(case):
    (name, vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, tied, sequences,
     seq_len) = case.split(":")
    vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, sequences, seq_len = map(
        int, (vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, sequences, seq_len))
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, tie_word_embeddings=tied == "1", max_position_embeddings=max(
                             seq_len, 64), attn_implementation="eager")
    model = Qwen3ForCausalLM(config).float()
    ids = torch.randint(0, vocab, (sequences, seq_len))
    with FlopCounterMode(display=False) as counter:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    counts = counter.get_flop_counts()
    flat = lambda ops: {str(op).replace("aten.", "").split(".")[0]: n for op, n in ops.items()}
    everything = flat(counts["Global"])
    rotary = sum(flat(ops).get("bmm", 0) for module, ops in counts.items() if module.endswith("rotary_emb"))
    return name, {
        "sequences": sequences,
        "seq_len": seq_len,
        "total": counter.get_total_flops(),
        "matmul": everything.get("mm", 0) + everything.get("addmm", 0),
        "attention": everything.get("bmm", 0) - rotary,
        "rotary": rotary,
        "ops": everything,
    }


def main():
    hf_logging.set_verbosity_error()
    out_dir, cases = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    result = dict(count(case) for case in cases)
    with open(os.path.join(out_dir, "flops.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
