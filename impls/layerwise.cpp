// layerwise.cpp: checkpointed forward, embedding backward, streamed LM head, StreamBP's layer backward.
#include "impls/layerwise.h"

#include <fmt/format.h>

#include "harness/model/ops.h"
#include "profiles/memory.h"

namespace bpbench {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

torch::Tensor checkpointed_forward(const Model& model, const torch::Tensor& ids, int64_t rows,
                                   CheckpointStore& store) {
  PhaseScope phase("forward");
  MemoryScope scope(Category::checkpoints);
  torch::NoGradGuard no_grad;
  torch::Tensor x = model.embed(ids);
  for (int64_t i = 0; i < model.config.layers; ++i) {
    torch::Tensor next = model.layer_in_chunks(i, x, rows);
    store.put(i, std::move(x));
    x = std::move(next);
  }
  return x;
}

std::vector<torch::Tensor> checkpointed_forward(const Model& model, const torch::Tensor& ids, int64_t rows) {
  auto store = make_checkpoint_store(Offload::none, ids.device());
  torch::Tensor last = checkpointed_forward(model, ids, rows, *store);
  std::vector<torch::Tensor> xs;
  for (int64_t i = 0; i < model.config.layers; ++i) xs.push_back(store->take(i));
  xs.push_back(std::move(last));
  return xs;
}

CheckpointStore& checkpoint_store(const StepInputs& in, std::unique_ptr<CheckpointStore>& owned) {
  if (in.checkpoints) return *in.checkpoints;
  owned = make_checkpoint_store(Offload::none, in.batch.input_ids.device());
  return *owned;
}

torch::Tensor layers_backward(const Model& model, CheckpointStore& store, torch::Tensor dy,
                              const LayerBackward& backward) {
  for (int64_t i = model.config.layers - 1; i >= 0; --i) {
    PhaseScope phase(fmt::format("layer {} backward", i));
    // The store's copy lives on only as x_in. No input gradient where nothing below trains (LoRA's layer 0).
    auto x_in = store.take(i).detach().requires_grad_(model.input_gradient_needed(i));
    store.prefetch(i - 1);
    dy = backward(i, x_in, std::move(dy));
  }
  return dy;
}

void embedding_backward(const Model& model, const torch::Tensor& ids, const torch::Tensor& dx) {
  if (!model.embed_weight.requires_grad()) return;
  PhaseScope phase("embedding backward");
  MemoryScope scope(Category::activations);
  model.embed(ids).backward(dx);
}

torch::Tensor streamed_sequence_sums(const Model& model, const torch::Tensor& x, const Batch& batch,
                                     const Objective& objective, int64_t rows) {
  PhaseScope phase("head sums");
  MemoryScope scope(Category::logits);
  torch::NoGradGuard no_grad;
  const int64_t T = x.size(1);
  torch::Tensor sums;
  for (int64_t s = 0; s < T; s += rows) {
    const int64_t c = std::min(rows, T - s);
    auto part = objective.token_sums(model.head_logits(x.narrow(1, s, c)), batch, s);  // (N)
    sums = sums.defined() ? sums + part : part;
  }
  return sums;
}

HeadResult streamed_head_backward(const Model& model, const torch::Tensor& x, const Batch& batch,
                                  const Objective& objective, int64_t rows, torch::Tensor sums) {
  const int64_t T = x.size(1);
  if (!sums.defined() && !objective.outer_is_linear())
    sums = streamed_sequence_sums(model, x, batch, objective, rows);  // DPO: S first, then f'(S)

  PhaseScope phase("head");
  MemoryScope scope(Category::logits);
  // f'(S): the weight each sequence's token sums carry. For a linear f it is the same at any S, so S = 0 will
  // do.
  const auto sum_dtype = compute_dtype(model.dtype());
  auto s_var = (sums.defined() ? sums.detach().clone()
                               : torch::zeros({batch.sequences()}, x.options().dtype(sum_dtype)))
                   .requires_grad_(true);
  auto outer_grad = torch::autograd::grad({objective.outer(s_var, batch)}, {s_var})[0];  // (N)

  auto dx = torch::empty_like(x);
  torch::Tensor accumulated = torch::zeros({batch.sequences()}, outer_grad.options());
  for (int64_t s = 0, j = 0; s < T; s += rows, ++j) {
    PhaseScope chunk(fmt::format("head chunk {}", j));
    const int64_t c = std::min(rows, T - s);
    auto x_rows = x.narrow(1, s, c).detach().requires_grad_(true);          // (N, c, d)
    auto part = objective.token_sums(model.head_logits(x_rows), batch, s);  // (N), via logits (N, c, V)
    torch::autograd::backward({part}, {outer_grad});
    dx.narrow(1, s, c).copy_(x_rows.grad());
    accumulated += part.detach();
  }
  torch::NoGradGuard no_grad;
  auto loss = objective.outer(sums.defined() ? sums : accumulated, batch);
  return {loss.detach(), dx};
}

torch::Tensor streambp_layer_backward(const Model& model, int64_t i, const torch::Tensor& x_in,
                                      torch::Tensor dy, int64_t rows,
                                      const std::function<void(int64_t j)>& between_chunks) {
  const int64_t T = x_in.size(1);
  // a. K/V path, all rows, kept with its graph until step c.
  KV kv;
  torch::Tensor k_leaf, v_leaf, dk, dv;
  {
    MemoryScope scope(Category::kv);
    kv = model.project_kv(i, model.attn_norm(i, x_in));  // (N, Hkv, T, hd) each
    k_leaf = kv.k.detach().requires_grad_(true);
    v_leaf = kv.v.detach().requires_grad_(true);
    // bf16: accumulate dK/dV over chunks in float32, as one big matmul would, then round once.
    const auto acc = kv.k.scalar_type() == torch::kBFloat16 ? torch::kFloat : kv.k.scalar_type();
    dk = torch::zeros_like(k_leaf, k_leaf.options().dtype(acc));
    dv = torch::zeros_like(v_leaf, v_leaf.options().dtype(acc));
  }
  const bool wants_dx = x_in.requires_grad();  // not for LoRA's layer 0 (Model::input_gradient_needed)
  torch::Tensor dx;
  if (wants_dx) {
    MemoryScope scope(Category::activations);
    dx = torch::empty_like(x_in);
  }
  // b. chunks: forward then backward, one chunk's activations alive at a time.
  for (int64_t s = 0, j = 0; s < T; s += rows, ++j) {
    const int64_t c = std::min(rows, T - s), e = s + c;
    {
      PhaseScope phase(fmt::format("chunk {}", j));
      MemoryScope scope(Category::activations);
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);  // (N, c, d)
      // (N, Hkv, e - k0, hd): the keys this chunk can see, all e under full attention, its window otherwise
      const int64_t k0 = model.config.first_visible_key(i, s);
      auto k_vis = k_leaf.detach().narrow(2, k0, e - k0).requires_grad_(true);
      auto v_vis = v_leaf.detach().narrow(2, k0, e - k0).requires_grad_(true);
      auto q = model.project_q(i, model.attn_norm(i, x_rows), s, T);                       // (N, Hq, c, hd)
      auto y = model.mlp_block(i, model.attention_block(i, x_rows, q, KV{k_vis, v_vis}));  // (N, c, d)
      y.backward(dy.narrow(1, s, c));
      if (wants_dx) dx.narrow(1, s, c).copy_(x_rows.grad());
      dk.narrow(2, k0, e - k0).add_(k_vis.grad());
      dv.narrow(2, k0, e - k0).add_(v_vis.grad());
    }
    if (between_chunks && e < T) between_chunks(j);
  }
  dy = torch::Tensor();  // the layer above's gradient is no longer needed
  // c. K/V path backward once; its dx contribution lands in x_in.grad.
  {
    MemoryScope scope(Category::kv);
    torch::autograd::backward({kv.k, kv.v}, {dk.to(kv.k.scalar_type()), dv.to(kv.v.scalar_type())});
  }
  if (wants_dx) dx.add_(x_in.grad());
  return dx;
}

}  // namespace bpbench
