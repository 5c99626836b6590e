// layerwise.cpp: checkpointed forward, embedding backward, streamed LM head, StreamBP's layer backward.
#include "impls/machinery/layerwise.h"

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
  torch::Tensor x = first_layer_input(model, ids);
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

torch::Tensor first_layer_input(const Model& model, const torch::Tensor& ids) {
  MemoryScope scope(Category::checkpoints);
  torch::NoGradGuard no_grad;
  return model.embed(ids);
}

void FirstInputRecomputed::put(int64_t i, torch::Tensor x) {
  if (i != 0) kept_.put(i, std::move(x));
}

void FirstInputRecomputed::prefetch(int64_t i) {
  if (i != 0) kept_.prefetch(i);
}

torch::Tensor FirstInputRecomputed::take(int64_t i) {
  if (i != 0) return kept_.take(i);
  PhaseScope phase("x_0 again");  // what making it again costs shows on the timeline
  return first_layer_input(model_, ids_);
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
                                  const Objective& objective, int64_t rows, torch::Tensor sums,
                                  HeadDx where) {
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

  // Row s of x is read by chunk s's forward only (and the sums' pass, done by now).
  auto dx = where == HeadDx::into_x ? x : torch::empty_like(x);
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
  const int64_t T = x_in.size(1), chunks = (T + rows - 1) / rows;
  // a. K and V of all rows, values only, made chunk by chunk: no graph, no T-row temporaries.
  torch::Tensor keys, values, dk, dv;  // (N, Hkv, T, hd) each
  {
    PhaseScope phase("K/V");
    MemoryScope scope(Category::kv);
    torch::NoGradGuard no_grad;
    const KV kv = model.kv_values(i, x_in.detach(), rows);
    keys = kv.k;
    values = kv.v;
    // bf16: accumulate dK/dV over chunks in float32, as one big matmul would, then round once per row.
    const auto acc = keys.scalar_type() == torch::kBFloat16 ? torch::kFloat : keys.scalar_type();
    dk = torch::zeros_like(keys, keys.options().dtype(acc));
    dv = torch::zeros_like(values, values.options().dtype(acc));
  }
  const bool wants_dx = x_in.requires_grad();  // not for LoRA's layer 0 (Model::input_gradient_needed)
  // b. chunks from the last to the first, each forward then at once backward. Chunk j's queries see keys
  // before e only, so once chunks j.. are done, key rows [s, e) have their whole dK/dV: c. runs their K/V
  // path backward there and then. dx rows go into dy's rows, which only chunk j reads.
  for (int64_t j = chunks - 1; j >= 0; --j) {
    const int64_t s = j * rows, c = std::min(rows, T - s), e = s + c;
    {
      PhaseScope phase(fmt::format("chunk {}", j));
      MemoryScope scope(Category::activations);
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);  // (N, c, d)
      {
        // (N, Hkv, e - k0, hd): the keys this chunk can see, all e under full attention, its window
        // otherwise; constants to autograd, whose gradients the attention adds straight into dK, dV (ops.h:
        // KvGradSink).
        const int64_t k0 = model.config.first_visible_key(i, s);
        const KV visible{keys.narrow(2, k0, e - k0), values.narrow(2, k0, e - k0),
                         KvGradSink{dk.narrow(2, k0, e - k0), dv.narrow(2, k0, e - k0)}};
        auto q = model.project_q(i, model.attn_norm(i, x_rows), s, T);              // (N, Hq, c, hd)
        auto y = model.mlp_block(i, model.attention_block(i, x_rows, q, visible));  // (N, c, d)
        y.backward(dy.narrow(1, s, c));
      }
      {
        // c. the K/V path of rows [s, e), recomputed from x_rows, backward with their finished dK, dV: the
        // weight gradients of attn_norm, k_norm, Wk and Wv accumulate, dx rows gain the K/V path's term.
        PhaseScope kv_phase(fmt::format("chunk {} K/V backward", j));
        MemoryScope kv_scope(Category::kv);
        const KV kv = model.project_kv(i, model.attn_norm(i, x_rows), s, T);
        torch::autograd::backward({kv.k, kv.v}, {dk.narrow(2, s, c).to(kv.k.scalar_type()),
                                                 dv.narrow(2, s, c).to(kv.v.scalar_type())});
      }
      if (wants_dx) dy.narrow(1, s, c).copy_(x_rows.grad());
    }
    if (between_chunks && j > 0) between_chunks(j);
  }
  return wants_dx ? dy : torch::Tensor();  // dy's buffer now holds dx
}

}  // namespace bpbench
