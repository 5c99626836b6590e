"""hf_oracle.py: Hugging Face transformers as the external oracle for bpbench's model.

Usage: hf_oracle.py OUT_DIR

Last, OUT_DIR/gpt_oss_mxfp4/: a tiny gpt-oss saved with its experts as MXFP4 (random blocks and scales, as the
Hub's released checkpoints store them) and expected.safetensors, transformers' own dequantization of them
(convert_moe_packed_tensors), which bpbench's loader must give back exactly.

For each case below it builds a tiny random model in transformers, saves it with save_pretrained (config.json +
model.safetensors, float32, as users' checkpoints are), and computes the loss and every parameter's gradient
in true float64 through transformers' own modules, for SFT (transformers' own loss) and DPO (from
transformers' logits: per-token log-probs of the targets summed over each response). It writes, per case,
OUT_DIR/<case>/model/ and OUT_DIR/<case>/oracle.safetensors (per objective: input_ids, targets, ref_sums, beta,
loss, loss_f32_casts and grad:<parameter name>), and OUT_DIR/cases.json. tests/model/test_hf_oracle.cpp loads the
directory through bpbench's own loader and holds every strategy's loss and gradients against it.

True float64: in float64, transformers still casts to float32 in RMSNorm, in the RoPE frequency table and its
cos/sin, and in the attention softmax and the loss (explicit .to(torch.float32), .float(), dtype=float32),
which moves the loss about 3e-8 relative. The Float64Casts mode below runs the same transformers code with
every float32 cast turned into a float64 one; nothing of transformers is rewritten. loss_f32_casts is the loss
with transformers' casts left in, so the test can show that the tolerance sees the difference.
"""

import collections
import contextlib
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          Gemma3ForCausalLM, Gemma3TextConfig, Glm4MoeConfig, Glm4MoeForCausalLM,
                          Glm4MoeLiteConfig, Glm4MoeLiteForCausalLM, GptOssConfig, GptOssForCausalLM,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig,
                          MixtralForCausalLM, Olmo2Config, Olmo2ForCausalLM, Olmo3Config, Olmo3ForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeConfig,
                          Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeTextConfig,
                          Qwen3_5TextConfig, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM, SmolLM3Config,
                          SmolLM3ForCausalLM)
from transformers.utils import logging as hf_logging

from oracle_common import Float64Casts, make_batch
from oracle_names import bpbench_names, qwen3_5_names


# Odd shapes: GQA 1, 2, 3 and 4, tied and untied heads, q/k norm (Qwen3), q/k/v biases (Qwen2) and neither
# (Llama), RoPE theta other than 10000, T prime, right padding, head_dim not hidden / heads. Then every RoPE type
# transformers defines for these three families (default, linear, dynamic, yarn, llama3; longrope below), with head dims large
# enough that each scaling's regimes all occur (llama3: high, medium and low frequencies; yarn: a partial ramp),
# in both config forms: the directory as transformers 5 saves it ("rope_parameters"), and a config.json
# rewritten by hand into the 4.x form of the Hub's checkpoints (top-level "rope_theta" + "rope_scaling").
# Gemma 3 (Gemma3ForCausalLM): sliding and full layers mixed, windows shorter than T (and shorter and longer
# than the test's partition of 7 rows), each layer type with its own RoPE (the full layers' linearly scaled),
# query_pre_attn_scalar other than head_dim, tied and untied heads, and the Hub's legacy form (rope_theta,
# rope_local_base_freq, rope_scaling, sliding_window_pattern instead of layer_types). Their padding is shorter
# than the window: a padded query whose whole window is padding is a fully masked row, which transformers'
# float32 softmax (loss_f32_casts) turns into NaN, and 0 x NaN reaches the real rows through V.
# Mistral: a window on every layer (longer than the partition), and none (null, as v0.3 states it). Phi-3: q, k, v and gate, up fused in the checkpoint, with and
# without a window (shorter than the partition); its gradients are written under bpbench's parameter names
# (the fused ones split by rows, as bpbench loads them). Their pad_token_id is None: transformers' embedding
# freezes the row of a pad_token_id (nn.Embedding's padding_idx), which bpbench does not model (docs/models.md).
# Windows are longer than the padding, as Gemma 3's.
# Mixtures of experts: Qwen3-MoE (8 experts, 2 a token, not renormalised; 3 a token renormalised with layer 1
# dense through mlp_only_layers and decoder_sparse_step) and Mixtral (8 experts, 2 a token, always
# renormalised; saved under its block_sparse_moe.*.w1/w2/w3 names). Their router weights are drawn wide (std 1)
# so that no two routing probabilities of a row come near a tie; their expert gradients are written under
# bpbench's per-expert names (transformers 5 keeps each layer's experts as two stacked tensors).
# Phi-3's longrope: past its original context of 16 (T = 29: the long factors, the attention factor from
# max_position_embeddings / original) and within one of 32 (T = 23: the short factors, an attention factor
# given).
# OLMo 2 and 3: norms on the blocks' outputs only, q and k normed over the whole projection (GQA, so the two
# widths differ); OLMo 3's sliding and full layers with a RoPE each (the full layers' YaRN), and its legacy form
# (top-level rope_theta and rope_scaling, no layer_types: three sliding layers of four). SmolLM3: NoPE layers by
# its default interval (layer 3 of 4) and by an explicit no_rope_layers, tied, and its sliding window on the NoPE
# layers (use_sliding_window). Their pad_token_id is None, as Phi-3's.
# gpt-oss: attention sinks (drawn wide, std 1, so that some rows give the sink most of their weight), q, k, v and
# o biases, sliding (window 5) and full layers, YaRN (not truncated) over an original context of 16; its experts
# with biases, stored stacked and interleaved (gate_up_proj (E, d, 2 Ie)), their gate_up weights drawn wide
# (std 1.5) so that the clamped SwiGLU clamps some rows and not others; the router's top-k softmax and bias.
# Every bias starts off zero. Its gradients are written under bpbench's per-expert names, de-interleaved.
# Multi-head latent attention (DeepSeek-V3, V2, GLM-4.7-Flash): a q latent and none, values narrower than q and
# k (bpbench pads them) and as wide, interleaved RoPE and not, YaRN with mscale_all_dim (the softmax scale's
# mscale) and plain RoPE; DeepSeek's routing: sigmoid scores with a correction bias drawn wide (std 0.3,
# a buffer: it moves choices, has no gradient) in 4 groups of which 2 are chosen, renormalised and scaled
# (V3, GLM), V2's group-limited softmax, not renormalised; shared experts; dense first layers
# (first_k_dense_replace, mlp_layer_types); GLM with attention_bias (q_a, kv_a and o_proj). Their pad_token_id
# is None, as Phi-3's.
# Hybrid linear attention (Qwen3.5's text model, Qwen3-Next): Gated DeltaNet layers (2 key heads of 6 read by 4
# value heads of 5, a conv of 4 taps, so that a chunk of 1 or 2 rows splits its halo of 3) beside gated full
# attention with (1 + w) q/k norms and RoPE on a quarter of its 16 dims; Qwen3.5 three linear layers of four by
# its default interval, Qwen3-Next alternating (full_attention_interval 2) with 8 experts of 12 (2 a token,
# renormalised), a gated shared expert of 10 and a dense layer (mlp_only_layers). transformers computes the
# recurrence in float32 whatever the model's dtype: Float64Casts lifts that too. A_log is drawn so that a
# token's decay is 0.3 to 0.9 (transformers' init draws A up to 16, whose decays empty the state in a token or
# two: the state would carry nothing across chunks). Their pad_token_id is None.
# Qwen3.5-MoE: Qwen3.5's layers with Qwen3-Next's experts on every layer (always renormalised), tied.
# `rewrite` edits the saved config.json; `seed_of` shares another case's weights and batch (the same model, stated
# in another form, must give the same loss).
Case = collections.namedtuple("Case", "model_cls config_cls fields T lengths objectives rewrite seed_of",
                              defaults=[None, None])
SFT_DPO, SFT = ("sft", "dpo"), ("sft",)
# "sft_aux": SFT with transformers' load-balancing loss added (output_router_logits=True in the call, the
# config's router_aux_loss_coef, large so that its gradient is no round-off), over unpadded rows: transformers
# leaves the rows its attention mask drops out of that loss, which bpbench, counting every row, refuses.
SFT_DPO_AUX = ("sft", "dpo", "sft_aux")
AUX_COEF = 0.5
LLAMA_GQA2 = dict(vocab_size=67, hidden_size=64, intermediate_size=72, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)  # head_dim 64 / 4 = 16: eight frequencies
QWEN3_GQA3 = dict(vocab_size=79, hidden_size=40, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
                  num_key_value_heads=2, head_dim=16)
QWEN2_GQA2 = dict(vocab_size=73, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)  # head_dim 12
LLAMA3_SCALING = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                      original_max_position_embeddings=64)  # wavelengths 6.3 (high), 32 (medium), 167+ (low)


# DeepSeek-shaped: 4 heads of qk_nope 6 + qk_rope 4, a kv latent of 8, 8 experts of 12 (2 a token) and one
# shared; layer 0 dense (first_k_dense_replace), 3 layers.
QWEN3_5_TINY = dict(vocab_size=83, hidden_size=32, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                    linear_key_head_dim=6, linear_value_head_dim=5, linear_conv_kernel_dim=4, pad_token_id=None)


DEEPSEEK_TINY = dict(vocab_size=79, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=8, qk_rope_head_dim=4,
                     qk_nope_head_dim=6, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=12,
                     n_shared_experts=1, first_k_dense_replace=1, pad_token_id=None)


def both_forms(config):
    """transformers 5's form with the base also at the top level, agreeing."""
    config["rope_theta"] = config["rope_parameters"]["rope_theta"]
    return config


def hub_form(rope_theta, rope_scaling, **top):
    """The 4.x form of the Hub's config.json files: no "rope_parameters"; "rope_theta" and "rope_scaling" at the
    top level, the way Llama 3.1, Llama 2 and the Qwen YaRN recipes write them."""
    def rewrite(config):
        for key in ("rope_parameters", "dtype", "transformers_version"):
            config.pop(key, None)
        config.update(rope_theta=rope_theta, rope_scaling=rope_scaling, torch_dtype="bfloat16",
                      transformers_version="4.51.3", **top)
        return config
    return rewrite


GEMMA3_ROPE = {"sliding_attention": dict(rope_type="default", rope_theta=2e4),
               "full_attention": dict(rope_type="linear", factor=4.0, rope_theta=5e5)}


OLMO3_ROPE = {"sliding_attention": dict(rope_type="default", rope_theta=5e5),
              "full_attention": dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16,
                                     rope_theta=1e4)}


def olmo3_hub_form(config):
    """The 4.x form of an OLMo 3 config.json: rope_theta and rope_scaling at the top level (the full layers'),
    no layer_types. transformers gives the sliding layers 500k whatever rope_theta says (hf_olmo.cpp)."""
    for key in ("rope_parameters", "layer_types", "dtype", "transformers_version"):
        config.pop(key, None)
    config.update(rope_theta=1e4, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 16},
                  torch_dtype="bfloat16", transformers_version="4.57.0")
    return config


def gemma3_hub_form(config):
    """The legacy form of the Hub's Gemma 3 config.json files: layer types from sliding_window_pattern, the
    thetas at the top level, the full layers' scaling in rope_scaling."""
    for key in ("rope_parameters", "layer_types", "dtype", "transformers_version"):
        config.pop(key, None)
    config.update(sliding_window_pattern=2, rope_theta=5e5, rope_local_base_freq=2e4,
                  rope_scaling={"rope_type": "linear", "factor": 4.0}, torch_dtype="bfloat16",
                  transformers_version="4.50.0")
    return config


CASES = {
    "qwen3_gqa2_tied": Case(Qwen3ForCausalLM, Qwen3Config, dict(
        vocab_size=97, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, rope_theta=1e6, tie_word_embeddings=True), 29, [29, 19], SFT_DPO),
    "qwen3_gqa4_untied": Case(Qwen3ForCausalLM, Qwen3Config, dict(
        vocab_size=89, hidden_size=40, intermediate_size=72, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, head_dim=6, rope_theta=5e5, tie_word_embeddings=False), 31, [31, 23], SFT_DPO),
    "llama_gqa2_untied": Case(LlamaForCausalLM, LlamaConfig, dict(
        vocab_size=83, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=3, rope_theta=5e5, tie_word_embeddings=False), 23, [23, 17], SFT_DPO),
    "llama_mha_tied": Case(LlamaForCausalLM, LlamaConfig, dict(
        vocab_size=71, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=4, rope_theta=10000.0, tie_word_embeddings=True, rms_norm_eps=1e-5), 17, [13, 17],
        SFT_DPO),
    "qwen3_gqa3_tied": Case(Qwen3ForCausalLM, Qwen3Config, dict(
        QWEN3_GQA3, rope_theta=1e6, tie_word_embeddings=True), 29, [29, 22], SFT),
    "qwen2_bias": Case(Qwen2ForCausalLM, Qwen2Config, dict(QWEN2_GQA2, rope_theta=1e6), 29, [29, 24], SFT),
    "llama3_scaling": Case(LlamaForCausalLM, LlamaConfig, dict(
        LLAMA_GQA2, rope_parameters=dict(LLAMA3_SCALING, rope_theta=5e5), max_position_embeddings=512), 29,
        [29, 25], SFT),
    "llama3_scaling_both_forms": Case(LlamaForCausalLM, LlamaConfig, dict(
        LLAMA_GQA2, rope_parameters=dict(LLAMA3_SCALING, rope_theta=5e5), max_position_embeddings=512), 29,
        [29, 25], SFT, both_forms, "llama3_scaling"),
    "llama3_scaling_hub_4x": Case(LlamaForCausalLM, LlamaConfig, dict(LLAMA_GQA2), 29, [29, 25], SFT, hub_form(
        500000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64, "rope_type": "llama3"},
        max_position_embeddings=512, pretraining_tp=1), "llama3_scaling"),
    "linear": Case(Qwen3ForCausalLM, Qwen3Config, dict(
        QWEN3_GQA3, rope_parameters=dict(rope_type="linear", factor=2.5, rope_theta=1e6)), 23, [23, 19], SFT),
    "linear_hub_4x": Case(LlamaForCausalLM, LlamaConfig, dict(LLAMA_GQA2), 23, [17, 23], SFT, hub_form(
        10000.0, {"type": "linear", "factor": 2.0})),
    "dynamic_past_max_positions": Case(LlamaForCausalLM, LlamaConfig, dict(
        LLAMA_GQA2, rope_parameters=dict(rope_type="dynamic", factor=2.5, rope_theta=5e5),
        max_position_embeddings=19), 29, [29, 21], SFT),
    "dynamic_within_max_positions_hub_4x": Case(Qwen2ForCausalLM, Qwen2Config, dict(QWEN2_GQA2), 29, [29, 26],
        SFT, hub_form(1e6, {"type": "dynamic", "factor": 4.0}, max_position_embeddings=32768)),
    "yarn": Case(Qwen3ForCausalLM, Qwen3Config, dict(
        QWEN3_GQA3, rope_parameters=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768,
                                         rope_theta=1e6), max_position_embeddings=131072), 29, [29, 20], SFT),
    "yarn_every_option": Case(LlamaForCausalLM, LlamaConfig, dict(
        LLAMA_GQA2, rope_parameters=dict(rope_type="yarn", factor=3.0, original_max_position_embeddings=512,
                                         beta_fast=8, beta_slow=2, truncate=False, mscale=0.9,
                                         mscale_all_dim=0.5, rope_theta=5e5)), 23, [23, 18], SFT),
    "yarn_attention_factor_implicit_factor": Case(Qwen2ForCausalLM, Qwen2Config, dict(
        QWEN2_GQA2, rope_parameters=dict(rope_type="yarn", factor=None, original_max_position_embeddings=16,
                                         attention_factor=1.25, rope_theta=1e6), max_position_embeddings=40), 29,
        [29, 27], SFT),
    "yarn_hub_4x": Case(Qwen3ForCausalLM, Qwen3Config, dict(QWEN3_GQA3, tie_word_embeddings=True), 29, [29, 23],
        SFT, hub_form(1000000, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                      max_position_embeddings=40960)),
    "gemma3_mixed": Case(Gemma3ForCausalLM, Gemma3TextConfig, dict(
        vocab_size=89, hidden_size=32, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=12, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=1e4),
                         "full_attention": dict(rope_type="linear", factor=2.0, rope_theta=1e6)},
        tie_word_embeddings=True), 29, [29, 26], SFT_DPO),
    "gemma3_hub_4x": Case(Gemma3ForCausalLM, Gemma3TextConfig, dict(
        vocab_size=79, hidden_size=48, intermediate_size=40, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=11,
        layer_types=["sliding_attention", "full_attention"] * 2, rope_parameters=GEMMA3_ROPE,
        tie_word_embeddings=False), 23, [23, 17], SFT, gemma3_hub_form),
    "mistral_window": Case(MistralForCausalLM, MistralConfig, dict(
        LLAMA_GQA2, sliding_window=9, rope_parameters=dict(rope_type="default", rope_theta=1e6),
        tie_word_embeddings=False), 29, [29, 23], SFT_DPO),
    "mistral_no_window": Case(MistralForCausalLM, MistralConfig, dict(
        QWEN2_GQA2, sliding_window=None, rope_parameters=dict(rope_type="default", rope_theta=1e6)), 23, [23, 19],
        SFT),
    "phi3_fused": Case(Phi3ForCausalLM, Phi3Config, dict(
        QWEN2_GQA2, pad_token_id=None, rope_parameters=dict(rope_type="default", rope_theta=1e4)), 29, [29, 24],
        SFT_DPO),
    "phi3_longrope_long": Case(Phi3ForCausalLM, Phi3Config, dict(
        QWEN2_GQA2, pad_token_id=None, original_max_position_embeddings=16, rope_parameters=dict(
            rope_type="longrope", rope_theta=1e4, short_factor=[1.0, 1.1, 1.3, 1.7, 2.3, 3.1],
            long_factor=[1.0, 1.5, 2.5, 4.0, 6.5, 9.0])), 29, [29, 24], SFT),
    "phi3_longrope_short": Case(Phi3ForCausalLM, Phi3Config, dict(
        QWEN2_GQA2, pad_token_id=None, original_max_position_embeddings=32, rope_parameters=dict(
            rope_type="longrope", rope_theta=1e4, short_factor=[1.0, 1.1, 1.3, 1.7, 2.3, 3.1],
            long_factor=[1.0, 1.5, 2.5, 4.0, 6.5, 9.0], attention_factor=1.2)), 23, [23, 19], SFT),
    "qwen3_moe_k2": Case(Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
        QWEN3_GQA3, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=20, norm_topk_prob=False,
        rope_theta=1e6, router_aux_loss_coef=AUX_COEF), 29, [29, 23], SFT_DPO_AUX),
    "qwen3_moe_k3_dense_layer": Case(Qwen3MoeForCausalLM, Qwen3MoeConfig, dict(
        QWEN3_GQA3, num_hidden_layers=3, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=12,
        norm_topk_prob=True, mlp_only_layers=[1], tie_word_embeddings=True, rope_theta=1e6), 23, [23, 19], SFT),
    "mixtral": Case(MixtralForCausalLM, MixtralConfig, dict(
        LLAMA_GQA2, intermediate_size=24, num_local_experts=8, num_experts_per_tok=2,
        router_aux_loss_coef=AUX_COEF, rope_parameters=dict(rope_type="default", rope_theta=1e6)), 29, [29, 24],
        SFT_DPO_AUX),
    "olmo2": Case(Olmo2ForCausalLM, Olmo2Config, dict(
        QWEN3_GQA3, pad_token_id=None, rope_parameters=dict(rope_type="default", rope_theta=5e5)), 29, [29, 23],
        SFT_DPO),
    "olmo3_mixed": Case(Olmo3ForCausalLM, Olmo3Config, dict(
        LLAMA_GQA2, num_hidden_layers=3, pad_token_id=None, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_parameters=OLMO3_ROPE,
        tie_word_embeddings=True), 23, [23, 19], SFT_DPO),
    "olmo3_hub_4x": Case(Olmo3ForCausalLM, Olmo3Config, dict(
        QWEN2_GQA2, num_hidden_layers=4, pad_token_id=None, sliding_window=9,
        layer_types=["sliding_attention"] * 3 + ["full_attention"], rope_parameters=OLMO3_ROPE), 29, [29, 24],
        SFT, olmo3_hub_form),
    "smollm3_nope": Case(SmolLM3ForCausalLM, SmolLM3Config, dict(
        QWEN2_GQA2, num_hidden_layers=4, pad_token_id=None,
        rope_parameters=dict(rope_type="default", rope_theta=2e6)), 29, [29, 22], SFT_DPO),
    "smollm3_window": Case(SmolLM3ForCausalLM, SmolLM3Config, dict(
        LLAMA_GQA2, num_hidden_layers=3, pad_token_id=None, no_rope_layers=[1, 0, 0], use_sliding_window=True,
        sliding_window=7, tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1e5)),
        23, [23, 19], SFT),
    "gpt_oss": Case(GptOssForCausalLM, GptOssConfig, dict(
        QWEN3_GQA3, hidden_size=32, intermediate_size=12, head_dim=8, num_attention_heads=4, num_local_experts=8,
        num_experts_per_tok=2, sliding_window=5, router_aux_loss_coef=AUX_COEF,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters=dict(rope_type="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                             original_max_position_embeddings=16, rope_theta=1e4)), 23, [23, 20], SFT_DPO_AUX),
    "deepseek_v3": Case(DeepseekV3ForCausalLM, DeepseekV3Config, dict(
        DEEPSEEK_TINY, q_lora_rank=12, v_head_dim=6, n_group=4, topk_group=2, routed_scaling_factor=2.5,
        rope_parameters=dict(rope_type="yarn", factor=4.0, mscale=1.0, mscale_all_dim=1.0,
                             original_max_position_embeddings=16, rope_theta=1e4)), 23, [23, 20], SFT_DPO),
    "deepseek_v3_direct_q": Case(DeepseekV3ForCausalLM, DeepseekV3Config, dict(
        DEEPSEEK_TINY, q_lora_rank=None, v_head_dim=10, rope_interleave=False, n_group=1, topk_group=1,
        norm_topk_prob=False, num_hidden_layers=2, rope_parameters=dict(rope_type="default", rope_theta=5e4)),
        23, [23, 19], SFT),
    "deepseek_v2": Case(DeepseekV2ForCausalLM, DeepseekV2Config, dict(
        DEEPSEEK_TINY, q_lora_rank=None, v_head_dim=8, topk_method="group_limited_greedy", n_group=4,
        topk_group=2, n_shared_experts=2, routed_scaling_factor=1.5,
        rope_parameters=dict(rope_type="yarn", factor=4.0, mscale=0.707, mscale_all_dim=0.707,
                             original_max_position_embeddings=16, rope_theta=1e4)), 23, [23, 20], SFT_DPO),
    "glm4_moe_lite": Case(Glm4MoeLiteForCausalLM, Glm4MoeLiteConfig, dict(
        DEEPSEEK_TINY, q_lora_rank=12, v_head_dim=10, attention_bias=True, n_group=2, topk_group=1,
        routed_scaling_factor=1.8, mlp_layer_types=["dense", "sparse", "dense"],
        rope_parameters=dict(rope_type="default", rope_theta=1e6)), 23, [23, 20], SFT),
    "glm4_moe": Case(Glm4MoeForCausalLM, Glm4MoeConfig, dict(
        QWEN3_GQA3, hidden_size=32, head_dim=8, num_attention_heads=4, num_hidden_layers=3, attention_bias=True,
        use_qk_norm=True, partial_rotary_factor=0.5, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=12, n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=1.5,
        first_k_dense_replace=1, pad_token_id=None, rope_parameters=dict(rope_type="default", rope_theta=1e6)),
        23, [23, 20], SFT_DPO),
    # int(head_dim x partial_rotary_factor) odd, as Glm4MoeConfig's defaults make it (21 of 42): frequencies
    # spaced over 3 dims, 4 rotated.
    "glm4_moe_odd_rotary": Case(Glm4MoeForCausalLM, Glm4MoeConfig, dict(
        QWEN3_GQA3, hidden_size=32, head_dim=6, num_attention_heads=4, num_hidden_layers=2,
        partial_rotary_factor=0.5, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
        n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1, pad_token_id=None,
        rope_parameters=dict(rope_type="default", rope_theta=1e4)), 23, [23, 20], SFT),
    "qwen3_5": Case(Qwen3_5ForCausalLM, Qwen3_5TextConfig, dict(
        QWEN3_5_TINY, tie_word_embeddings=False, rope_parameters=dict(rope_type="default", rope_theta=1e4)), 23,
        [23, 19], SFT_DPO),
    "qwen3_next": Case(Qwen3NextForCausalLM, Qwen3NextConfig, dict(
        QWEN3_5_TINY, full_attention_interval=2, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=12,
        shared_expert_intermediate_size=10, norm_topk_prob=True, mlp_only_layers=[2], tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1e6)), 23, [23, 19], SFT_DPO),
    "qwen3_5_moe": Case(Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, dict(
        QWEN3_5_TINY, num_hidden_layers=3, full_attention_interval=3, num_experts=8, num_experts_per_tok=3,
        moe_intermediate_size=12, shared_expert_intermediate_size=10, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1e5)), 23, [23, 19], SFT),
    "phi3_window": Case(Phi3ForCausalLM, Phi3Config, dict(
        LLAMA_GQA2, pad_token_id=None, sliding_window=5, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1e4)), 23, [23, 19], SFT),
}

def make_model(case, seed):
    torch.manual_seed(seed)
    # Eager attention and experts: the fused ones (SDPA, grouped_mm) take no float64.
    config = case.config_cls(**{"max_position_embeddings": 64, "attn_implementation": "eager",
                                "experts_implementation": "eager", **case.fields})
    model = case.model_cls(config)
    with torch.no_grad():  # norm weights at 1 would hide a wrong norm-gradient path
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith("mlp.gate.weight") or name.endswith("mlp.router.weight"):
                p.normal_(0.0, 1.0)  # a router: routing that decides, far from ties
            if name.endswith("sinks"):
                p.normal_(0.0, 1.0)
            if name.endswith("gate_up_proj"):
                p.normal_(0.0, 1.5)
            if name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
            if name.endswith("A_log"):  # decays of 0.3 to 0.9 a token: a state that carries across chunks
                p.copy_(torch.empty_like(p).uniform_(0.1, 1.0).log())
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek's: it moves the choice of experts
                b.normal_(0.0, 0.3)
    return model


def save(case, model, model_dir):
    """Saves the model, rewrites its config.json where the case says so, and returns the config transformers
    reads back from the directory: the references below are of the model that directory holds."""
    model.save_pretrained(model_dir)
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        written = json.load(f)
    if case.rewrite:
        written = case.rewrite(written)
        with open(path, "w") as f:
            json.dump(written, f, indent=2)
    config = case.config_cls.from_pretrained(model_dir, attn_implementation="eager", experts_implementation="eager")
    if case.model_cls in (Gemma3ForCausalLM, Olmo3ForCausalLM):
        # Per layer type: the file, in either form, must give back the model's own RoPE and layer types.
        assert config.layer_types == model.config.layer_types, (config.layer_types, model.config.layer_types)
        for layer_type, stated in model.config.rope_parameters.items():
            assert config.rope_parameters[layer_type] == stated, (config.rope_parameters, stated)
        return config
    # transformers must read the RoPE the file states, in either form, or the case would test nothing.
    stated = dict(written.get("rope_parameters") or written.get("rope_scaling") or {})
    stated.setdefault("rope_theta", written.get("rope_theta"))
    assert all(config.rope_parameters.get(k) == v for k, v in stated.items()), (config.rope_parameters, stated)
    return config


def sft_loss(model, ids, mask, labels, targets, extras):
    """transformers' own causal-LM loss."""
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def sft_aux_loss(model, ids, mask, labels, targets, extras):
    """transformers' causal-LM loss plus router_aux_loss_coef times its load-balancing loss (in float64 under
    Float64Casts: load_balancing_loss_func casts to float32)."""
    out = model(input_ids=ids, attention_mask=mask, labels=labels, output_router_logits=True)
    assert out.aux_loss is not None and model.config.router_aux_loss_coef == AUX_COEF
    return out.loss


def dpo_loss(model, ids, mask, labels, targets, extras):
    """Sigmoid DPO over (chosen, rejected) row pairs from transformers' logits: per-token log-probs of the
    targets, summed over each sequence's response, against fixed reference sums."""
    logits = model(input_ids=ids, attention_mask=mask).logits.double()
    logps = torch.log_softmax(logits, -1).gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    sums = logps.masked_fill(targets == -100, 0.0).sum(1) - extras["ref_sums"]
    margin = sums.view(-1, 2)
    return -torch.nn.functional.logsigmoid(extras["beta"] * (margin[:, 0] - margin[:, 1])).mean()


def loss_and_grads(loss_fn, model_cls, config, state, batch, extras, lift_casts):
    """The loss and every parameter's gradient in float64, with transformers' float32 casts lifted or not."""
    torch.set_default_dtype(torch.float64)
    try:
        with Float64Casts() if lift_casts else contextlib.nullcontext():
            # RoPE's frequency table is made at construction: build the model under the mode too.
            model = model_cls(config)
            model.load_state_dict(state)
            loss = loss_fn(model, *batch, extras)
            loss.backward()
    finally:
        torch.set_default_dtype(torch.float32)
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


# objective -> (loss function, prompt tokens)
OBJECTIVES = {"sft": (sft_loss, 0), "dpo": (dpo_loss, 5), "sft_aux": (sft_aux_loss, 0)}


def write_mxfp4_model(out_dir):
    """gpt-oss with d = Ie = 32 (MXFP4 blocks are 32 values wide), its experts' stacked tensors replaced by
    random MXFP4 blocks and scales (exponents near 127: values of a few units) and a quantization_config."""
    from safetensors.torch import load_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    torch.manual_seed(300)
    config = GptOssConfig(vocab_size=79, hidden_size=32, intermediate_size=32, head_dim=8, num_attention_heads=4,
                          num_key_value_heads=2, num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2,
                          layer_types=["sliding_attention", "full_attention"], sliding_window=5)
    model_dir = os.path.join(out_dir, "gpt_oss_mxfp4", "model")
    GptOssForCausalLM(config).save_pretrained(model_dir)
    path = os.path.join(model_dir, "model.safetensors")
    tensors, expected = load_file(path), {}
    g = torch.Generator().manual_seed(301)
    for name in [n for n in tensors if n.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]:
        experts, cols, rows = tensors.pop(name).shape  # x @ W: the dequantized (E, rows, cols) transposed
        blocks = torch.randint(0, 256, (experts, rows, cols // 32, 16), dtype=torch.uint8, generator=g)
        scales = torch.randint(124, 131, (experts, rows, cols // 32), dtype=torch.uint8, generator=g)
        tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
        expected[name] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).contiguous()
    save_file(tensors, path)
    save_file(expected, os.path.join(out_dir, "gpt_oss_mxfp4", "expected.safetensors"))
    with open(os.path.join(model_dir, "config.json")) as f:
        written = json.load(f)
    written["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                      "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(written, f, indent=2)


def write_multimodal_models(out_dir):
    """Qwen3.5's and Qwen3.5-MoE's image-text checkpoints (a one-block vision tower beside the text model of
    the cases qwen3_5 and qwen3_5_moe), saved by transformers, and expected.safetensors: the text model's
    weights as transformers' own text class loads them from that directory, under bpbench's names."""
    from safetensors.torch import save_file as save
    vision = dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, patch_size=4, temporal_patch_size=1,
                  spatial_merge_size=1, num_position_embeddings=16)
    for name, config_cls, cond_cls, causal_cls, case in (
            ("qwen3_5_multimodal", Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3_5ForCausalLM,
             CASES["qwen3_5"]),
            ("qwen3_5_moe_multimodal", Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeForCausalLM,
             CASES["qwen3_5_moe"])):
        torch.manual_seed(400)
        text = {"max_position_embeddings": 64, **case.fields}
        config = config_cls(text_config=text, vision_config=dict(vision, out_hidden_size=text["hidden_size"]),
                            tie_word_embeddings=text["tie_word_embeddings"])
        model = cond_cls(config)
        with torch.no_grad():
            for param_name, p in model.named_parameters():
                if "norm" in param_name or param_name.endswith("bias"):
                    p.add_(0.1 * torch.randn_like(p))
                if param_name.endswith("A_log"):
                    p.copy_(torch.empty_like(p).uniform_(0.1, 1.0).log())
        model_dir = os.path.join(out_dir, name, "model")
        model.save_pretrained(model_dir)
        loaded = causal_cls.from_pretrained(model_dir)
        weights = {n: t.detach().contiguous() for n, t in loaded.state_dict().items()}
        if loaded.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)
        save(qwen3_5_names(loaded.config, weights), os.path.join(out_dir, name, "expected.safetensors"))


def main(out_dir):
    hf_logging.disable_progress_bar()
    os.makedirs(out_dir, exist_ok=True)
    names = list(CASES)
    for name, case in CASES.items():
        index = names.index(case.seed_of or name)
        model = make_model(case, seed=100 + index)
        case_dir = os.path.join(out_dir, name)
        config = save(case, model, os.path.join(case_dir, "model"))
        state = {k: v.double() for k, v in model.state_dict().items()}
        tensors = {}
        for objective in case.objectives:
            loss_fn, prompt = OBJECTIVES[objective]
            g = torch.Generator().manual_seed(200 + index)
            rows = {"sft": case.lengths, "sft_aux": [case.T] * len(case.lengths),
                    "dpo": case.lengths + [case.lengths[0] - 2, case.lengths[1]]}[objective]
            batch = make_batch(config, case.T, rows, prompt, g)
            extras = {"beta": 0.1, "ref_sums": -50.0 * torch.rand(len(rows), generator=g, dtype=torch.float64)}
            run = lambda lift: loss_and_grads(loss_fn, case.model_cls, config, state, batch, extras, lift)
            (loss, grads), (with_casts, _) = run(True), run(False)
            ids, _, _, targets = batch
            tensors.update({f"{objective}:input_ids": ids, f"{objective}:targets": targets,
                            f"{objective}:ref_sums": extras["ref_sums"],
                            f"{objective}:beta": torch.tensor([extras["beta"]], dtype=torch.float64),
                            f"{objective}:loss": loss.reshape(1), f"{objective}:loss_f32_casts": with_casts.reshape(1)})
            if objective == "sft_aux":
                tensors[f"{objective}:router_aux_loss_coef"] = torch.tensor([AUX_COEF], dtype=torch.float64)
            tensors.update({f"{objective}:grad:{n}": g for n, g in bpbench_names(case, config, grads).items()})
            print(f"{name} {objective}: loss {loss.item():.15g} (transformers' float32 casts: {with_casts.item():.15g})")
        save_file(tensors, os.path.join(case_dir, "oracle.safetensors"))
    write_mxfp4_model(out_dir)
    write_multimodal_models(out_dir)
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump({name: list(case.objectives) for name, case in CASES.items()}, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hf_oracle.py OUT_DIR")
    main(sys.argv[1])
