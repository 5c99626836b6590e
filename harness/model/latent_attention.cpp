// latent_attention.cpp: a StreamBP chunk's attention over MLA's latent rows (latent_attention.h, Note
// [StreamBP through the latent]): K and V expanded one key block at a time in the forward and again in the
// backward, the blocks merged by their logsumexps (attention_partial.h).
#include "harness/model/latent_attention.h"

#include <algorithm>
#include <optional>

#include "harness/model/attention_kernels.h"
#include "harness/model/attention_partial.h"
#include "harness/model/flop_count.h"

namespace bpbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// What the node keeps besides q, its output and logsumexp: the keys' latent rows and their accumulators
// (read-only views of the caller's buffers, which change between forward and backward: saved_data, not
// saved for backward), and kv_b with the shapes its expansion needs.
struct LatentNodeData {
  MlaLatent keys;
  MlaLatentGrads grads;
  Linear kv_b;
  bool lora_enabled = true;
  int64_t heads = 0, nope_dim = 0, value_dim = 0, head_dim = 0, block = 0;
  double scale = 0;

  void save(AutogradContext* ctx) const {
    auto& d = ctx->saved_data;
    d["latent"] = keys.latent;
    d["k_rot"] = keys.k_rot;
    d["d_latent"] = grads.latent;
    d["d_k_rot"] = grads.k_rot;
    d["kv_b.weight"] = kv_b.weight;
    d["kv_b.bias"] = kv_b.bias;
    d["kv_b.lora_a"] = kv_b.lora_a;
    d["kv_b.lora_b"] = kv_b.lora_b;
    d["kv_b.lora_scale"] = kv_b.lora_scale;
    d["lora_enabled"] = lora_enabled;
    d["dims"] = std::vector<int64_t>{heads, nope_dim, value_dim, head_dim, block};
    d["scale"] = scale;
  }
  static LatentNodeData load(AutogradContext* ctx) {
    auto& d = ctx->saved_data;
    LatentNodeData n;
    n.keys = {d["latent"].toTensor(), d["k_rot"].toTensor()};
    n.grads = {d["d_latent"].toTensor(), d["d_k_rot"].toTensor()};
    n.kv_b.weight = d["kv_b.weight"].toTensor();
    n.kv_b.bias = d["kv_b.bias"].toTensor();
    n.kv_b.lora_a = d["kv_b.lora_a"].toTensor();
    n.kv_b.lora_b = d["kv_b.lora_b"].toTensor();
    n.kv_b.lora_scale = d["kv_b.lora_scale"].toDouble();
    n.lora_enabled = d["lora_enabled"].toBool();
    const auto dims = d["dims"].toIntVector();
    n.heads = dims[0], n.nope_dim = dims[1], n.value_dim = dims[2], n.head_dim = dims[3], n.block = dims[4];
    n.scale = d["scale"].toDouble();
    return n;
  }
  // K and V (N, Hq, keys, hd) of key rows [key0, key0 + keys), made from their latent rows `rows`.
  KV expand(const MlaLatent& rows) const {
    return expand_mla_latent(kv_b, lora_enabled, rows, heads, nope_dim, value_dim, head_dim);
  }
  MlaLatent rows(int64_t key0, int64_t keys) const {
    return {this->keys.latent.narrow(1, key0, keys), this->keys.k_rot.narrow(1, key0, keys)};
  }
};

// Calls `block(key0, keys, causal)` for the prefix keys [0, e - c) in blocks of at most `block` keys, then
// the chunk's own rows [e - c, e), causally: the order backward_by_key_blocks takes them in.
template <class BlockFn>
void for_each_key_block(int64_t c, int64_t e, int64_t block, BlockFn&& fn) {
  const int64_t prefix = e - c;
  for (int64_t key0 = 0; key0 < prefix; key0 += block) fn(key0, std::min(block, prefix - key0), false);
  fn(prefix, c, true);
}

// The forward: for each key block, K and V expanded under no grad, the block's partial attention merged
// into the chunk's output and logsumexp, K and V released.
PartialAttention attention_by_key_blocks(const torch::Tensor& q, const LatentNodeData& node) {
  torch::NoGradGuard no_grad;
  const int64_t c = q.size(2), e = node.keys.latent.size(1);
  PartialAttention acc;
  for_each_key_block(c, e, node.block, [&](int64_t key0, int64_t keys, bool causal) {
    PartialAttention part;
    {
      const KV kv = node.expand(node.rows(key0, keys));
      part = partial_attention(q, kv.k, kv.v, node.scale, causal ? KeyBlockMask::causal : KeyBlockMask::all);
    }
    if (!acc.out.defined())
      acc = std::move(part);
    else
      merge_partial(acc, part);
  });
  return acc;
}

class LatentChunkAttention : public torch::autograd::Function<LatentChunkAttention> {
 public:
  // q (N, Hq, c, hd) -> (N, Hq, c, hd).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const LatentNodeData& node) {
    const PartialAttention acc = attention_by_key_blocks(q, node);
    ctx->save_for_backward({q, acc.out, acc.lse});
    node.save(ctx);
    return acc.out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &out = saved[1], &lse = saved[2];
    const LatentNodeData node = LatentNodeData::load(ctx);
    const int64_t c = q.size(2), e = node.keys.latent.size(1);
    const auto& grad_out = grads[0];
    // Each block's K and V with a graph from kv_b and the block's latent rows (leaves), kept until the
    // block's dK, dV have gone back through it; the kernel's backward reads their values.
    torch::autograd::AutoGradMode grad_on(true);
    MlaLatent leaves;
    KV kv;
    auto expand_block = [&](int64_t key0, int64_t keys) {
      const MlaLatent rows = node.rows(key0, keys);
      leaves = {rows.latent.detach().requires_grad_(true), rows.k_rot.detach().requires_grad_(true)};
      kv = node.expand(leaves);
    };
    auto call = [&](int64_t key0, int64_t keys, bool causal) {
      // Each key row is expanded with a graph once as the model's work: in the chunk whose own rows it is
      // (the causal block). Later chunks' expansions of it, and their backward, are recomputation.
      std::optional<CountedAsRecompute> again;
      if (!causal) again.emplace();
      expand_block(key0, keys);
      torch::NoGradGuard no_grad;
      return partial_attention_backward(grad_out, q, kv.k.detach(), kv.v.detach(), out, lse, node.scale,
                                        causal ? KeyBlockMask::causal : KeyBlockMask::all);
    };
    auto take = [&](int64_t key0, int64_t keys, torch::Tensor dk, torch::Tensor dv) {
      torch::autograd::backward({kv.k, kv.v}, {dk, dv});  // kv_b's .grad accumulates; the leaves get theirs
      dk.reset();
      dv.reset();
      kv = KV();
      torch::NoGradGuard no_grad;
      node.grads.latent.narrow(1, key0, keys).add_(leaves.latent.grad());
      node.grads.k_rot.narrow(1, key0, keys).add_(leaves.k_rot.grad());
      leaves = MlaLatent();
    };
    auto dq = backward_by_key_blocks(c, e, node.block, call, take);
    return {dq, torch::Tensor()};
  }
};

LatentNodeData node_of(const Model& model, int64_t layer, const torch::Tensor& q, const MlaLatent& keys,
                       const MlaLatentGrads& grads, int64_t block) {
  const ModelConfig& c = model.config;
  TORCH_CHECK(c.mla, "latent attention: ", c.name, " has no latent attention");
  TORCH_CHECK(c.window_of(layer) == 0 && !c.attention_sinks, "latent attention: no windows or sinks");
  const int64_t rows = q.size(2), e = keys.latent.size(1);
  TORCH_CHECK(e >= rows && keys.k_rot.size(1) == e, "latent attention: ", rows, " queries over latent rows ",
              keys.latent.sizes(), " and ", keys.k_rot.sizes());
  LatentNodeData node;
  node.keys = keys;
  node.grads = grads;
  node.kv_b = model.layers[static_cast<size_t>(layer)].kv_b;
  node.lora_enabled = model.lora_enabled;
  node.heads = q.size(1);
  node.nope_dim = c.qk_nope_head_dim();
  node.value_dim = c.value_head_dim();
  node.head_dim = q.size(3);
  node.block = block;
  node.scale = c.attention_scale();
  return node;
}

// (N, Hq, c, hd) -> (N, c, Hq*hd) as Model::attention_heads returns it, its pairs counted.
torch::Tensor heads_out(const torch::Tensor& q, const torch::Tensor& out, int64_t keys) {
  const int64_t n = q.size(0), hq = q.size(1), rows = q.size(2), hd = q.size(3);
  const AttentionKernel kernel = attention_kernel_for(q.device(), q.scalar_type(), hd);
  count_attention(n, hq, hd, attention_pairs(kernel, rows, keys, 0), out);
  return out.transpose(1, 2).reshape({n, rows, hq * hd});
}

}  // namespace

torch::Tensor latent_chunk_attention(const Model& model, int64_t layer, const torch::Tensor& q,
                                     const MlaLatent& keys, const MlaLatentGrads& grads, int64_t block) {
  TORCH_CHECK(grads.latent.sizes() == keys.latent.sizes() && grads.k_rot.sizes() == keys.k_rot.sizes(),
              "latent_chunk_attention: accumulators ", grads.latent.sizes(), " and ", grads.k_rot.sizes(),
              " for latent rows ", keys.latent.sizes(), " and ", keys.k_rot.sizes());
  const LatentNodeData node = node_of(model, layer, q, keys, grads, block);
  return heads_out(q, LatentChunkAttention::apply(q, node), keys.latent.size(1));
}

torch::Tensor latent_attention_values(const Model& model, int64_t layer, const torch::Tensor& q,
                                      const MlaLatent& keys, int64_t block) {
  const LatentNodeData node = node_of(model, layer, q, keys, {}, block);
  return heads_out(q, attention_by_key_blocks(q, node).out, keys.latent.size(1));
}

}  // namespace bpbench
