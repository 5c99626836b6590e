"""oracle_names.py: transformers' gradients (and weights) under bpbench's parameter names, for hf_oracle.py:
Phi-3's fused projections split by rows, the stacked experts one by one, gpt-oss's interleaved experts and
router, and Qwen3.5's gated q_proj, conv and Qwen3-Next's fused projections.
"""

import torch
from transformers import (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, Glm4MoeForCausalLM, Glm4MoeLiteForCausalLM,
                          GptOssForCausalLM, MixtralForCausalLM, Phi3ForCausalLM, Qwen3_5ForCausalLM,
                          Qwen3_5MoeForCausalLM, Qwen3MoeForCausalLM, Qwen3NextForCausalLM)


# Phi-3's fused checkpoint tensors -> bpbench's parameters, by rows: (fused suffix, [(suffix, rows of config)]).
PHI3_FUSED = [("self_attn.qkv_proj.weight", [("self_attn.q_proj.weight", lambda c: c.num_attention_heads),
                                             ("self_attn.k_proj.weight", lambda c: c.num_key_value_heads),
                                             ("self_attn.v_proj.weight", lambda c: c.num_key_value_heads)]),
              ("mlp.gate_up_proj.weight", [("mlp.gate_proj.weight", None), ("mlp.up_proj.weight", None)])]


def expert_names(grads):
    """transformers 5's stacked experts (mlp.experts.gate_up_proj (E, 2 Ie, d), gate rows first, and
    mlp.experts.down_proj (E, d, Ie)) as bpbench's mlp.experts.<e>.{gate,up,down}_proj.weight."""
    out = {}
    for name, g in grads.items():
        prefix, _, last = name.rpartition("mlp.experts.")
        if not prefix:
            out[name] = g
        elif last == "gate_up_proj":
            for e, (gate, up) in enumerate(expert.chunk(2, dim=0) for expert in g.unbind(0)):
                out[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = gate.contiguous()
                out[f"{prefix}mlp.experts.{e}.up_proj.weight"] = up.contiguous()
        elif last == "down_proj":
            for e, down in enumerate(g.unbind(0)):
                out[f"{prefix}mlp.experts.{e}.down_proj.weight"] = down.contiguous()
        else:
            raise ValueError(f"an expert parameter bpbench does not name: {name}")
    return out


def gpt_oss_names(grads):
    """gpt-oss's stacked experts (mlp.experts.gate_up_proj (E, d, 2 Ie), gate at even columns and up at odd,
    x @ W; down_proj (E, Ie, d); their biases) and its router (mlp.router) as bpbench's per-expert
    mlp.experts.<e>.{gate,up,down}_proj.{weight,bias} (W^T) and mlp.gate."""
    out = {}
    for name, g in grads.items():
        prefix, _, last = name.rpartition("mlp.experts.")
        if name.endswith("mlp.router.weight") or name.endswith("mlp.router.bias"):
            out[name.replace("mlp.router.", "mlp.gate.")] = g
        elif not prefix:
            out[name] = g
        else:
            for e, expert in enumerate(g.unbind(0)):
                at = f"{prefix}mlp.experts.{e}."
                if last == "gate_up_proj":
                    out[at + "gate_proj.weight"] = expert[:, 0::2].t().contiguous()
                    out[at + "up_proj.weight"] = expert[:, 1::2].t().contiguous()
                elif last == "gate_up_proj_bias":
                    out[at + "gate_proj.bias"] = expert[0::2].contiguous()
                    out[at + "up_proj.bias"] = expert[1::2].contiguous()
                elif last == "down_proj":
                    out[at + "down_proj.weight"] = expert.t().contiguous()
                elif last == "down_proj_bias":
                    out[at + "down_proj.bias"] = expert.contiguous()
                else:
                    raise ValueError(f"an expert parameter bpbench does not name: {name}")
    return out


def qwen3_5_names(config, grads):
    """Qwen3.5's and Qwen3-Next's gradients as bpbench names its parameters: q_proj's rows (Hq, [query hd,
    gate hd]) as q_proj and output_gate; conv1d (C, 1, K) as (C, K); Qwen3-Next's in_proj_qkvz rows (Hk, [q dk,
    k dk, v g dv, z g dv]) as in_proj_qkv and in_proj_z, in_proj_ba (Hk, [b g, a g]) as in_proj_b and in_proj_a,
    its shared_expert as shared_experts and its stacked experts one by one."""
    Hq, hd = config.num_attention_heads, config.head_dim
    Hk, dk, dv = config.linear_num_key_heads, config.linear_key_head_dim, config.linear_value_head_dim
    g = config.linear_num_value_heads // Hk
    out = {}
    for name, t in expert_names(grads).items():
        if name.endswith("self_attn.q_proj.weight"):
            halves = t.view(Hq, 2, hd, -1)
            out[name] = halves[:, 0].reshape(Hq * hd, -1).contiguous()
            out[name.replace("q_proj", "output_gate")] = halves[:, 1].reshape(Hq * hd, -1).contiguous()
        elif name.endswith("conv1d.weight"):
            out[name] = t.squeeze(1).contiguous()
        elif name.endswith("in_proj_qkvz.weight"):
            q, k, v, z = t.view(Hk, 2 * dk + 2 * g * dv, -1).split([dk, dk, g * dv, g * dv], dim=1)
            flat = lambda x: x.reshape(-1, t.shape[-1])
            out[name.replace("qkvz", "qkv")] = torch.cat([flat(q), flat(k), flat(v)]).contiguous()
            out[name.replace("qkvz", "z")] = flat(z).contiguous()
        elif name.endswith("in_proj_ba.weight"):
            b, a = t.view(Hk, 2 * g, -1).split([g, g], dim=1)
            out[name.replace("_ba", "_b")] = b.reshape(-1, t.shape[-1]).contiguous()
            out[name.replace("_ba", "_a")] = a.reshape(-1, t.shape[-1]).contiguous()
        else:
            out[name.replace("mlp.shared_expert.", "mlp.shared_experts.")] = t
    return out


def bpbench_names(case, config, grads):
    """The gradients under bpbench's parameter names: Phi-3's fused ones split by rows, the experts one by
    one."""
    if case.model_cls in (Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3NextForCausalLM):
        return qwen3_5_names(config, grads)
    if case.model_cls in (Qwen3MoeForCausalLM, MixtralForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM,
                          Glm4MoeLiteForCausalLM, Glm4MoeForCausalLM):
        return expert_names(grads)
    if case.model_cls is GptOssForCausalLM:
        return gpt_oss_names(grads)
    if case.model_cls is not Phi3ForCausalLM:
        return grads
    head_dim = config.hidden_size // config.num_attention_heads
    out = {}
    for name, g in grads.items():
        fused = next(((f, parts) for f, parts in PHI3_FUSED if name.endswith(f)), None)
        if fused is None:
            out[name] = g
            continue
        suffix, parts = fused
        sizes = [rows(config) * head_dim if rows else config.intermediate_size for _, rows in parts]
        assert sum(sizes) == g.shape[0], (name, sizes, g.shape)
        for (part, _), piece in zip(parts, torch.split(g, sizes)):
            out[name[:-len(suffix)] + part] = piece.contiguous()
    return out
