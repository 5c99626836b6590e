// layerwise.cpp: checkpointed forward, embedding backward, streamed LM head, StreamBP's layer backward.
#include "impls/machinery/layerwise.h"

#include <fmt/format.h>

#include <memory>

#include "harness/model/latent_attention.h"
#include "harness/model/ops.h"
#include "impls/machinery/recurrent_layer.h"
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

namespace {

// The K/V side of a StreamBP layer (streambp.cpp's a. and c.) as the chunks use it: made for all rows
// before them, seen by each chunk's attention, backpropagated rows [s, e) at a time once complete.
class StreamedKeys {
 public:
  virtual ~StreamedKeys() = default;
  // Chunk [s, e)'s attention block: x_rows + o_proj(attention(q, the keys before e) [x sigmoid(gate)]),
  // (N, c, d); gate: Model::output_gate of the chunk's rows.
  virtual torch::Tensor attention_block(const torch::Tensor& x_rows, const torch::Tensor& q,
                                        const torch::Tensor& gate, int64_t s, int64_t e) const = 0;
  // c.: rows [s, s + c)'s K/V path, recomputed from x_rows, backpropagated with their finished gradients.
  virtual void backward_rows(const torch::Tensor& x_rows, int64_t s, int64_t c) const = 0;
};

// bf16: accumulate over chunks in float32, as one big matmul would, then round once per row.
torch::Tensor accumulator_like(const torch::Tensor& t) {
  const auto acc = t.scalar_type() == torch::kBFloat16 ? torch::kFloat : t.scalar_type();
  return torch::zeros_like(t, t.options().dtype(acc));
}

// K and V (N, Hkv, T, hd) of all rows as values, with their dK, dV.
class ExpandedKeys final : public StreamedKeys {
 public:
  ExpandedKeys(const Model& model, int64_t i, const torch::Tensor& x_in, int64_t rows) : m_(model), i_(i) {
    const KV kv = model.kv_values(i, x_in.detach(), rows);  // no graph, no T-row temporaries
    keys_ = kv.k;
    values_ = kv.v;
    dk_ = accumulator_like(keys_);
    dv_ = accumulator_like(values_);
  }
  torch::Tensor attention_block(const torch::Tensor& x_rows, const torch::Tensor& q,
                                const torch::Tensor& gate, int64_t s, int64_t e) const override {
    // (N, Hkv, e - k0, hd): the keys this chunk can see, all e under full attention, its window otherwise;
    // constants to autograd, whose gradients the attention adds straight into dK, dV (ops.h: KvGradSink).
    const int64_t k0 = m_.config.first_visible_key(i_, s);
    const KV visible{keys_.narrow(2, k0, e - k0), values_.narrow(2, k0, e - k0),
                     KvGradSink{dk_.narrow(2, k0, e - k0), dv_.narrow(2, k0, e - k0)}};
    return m_.attention_block(i_, x_rows, q, visible, gate);
  }
  void backward_rows(const torch::Tensor& x_rows, int64_t s, int64_t c) const override {
    // The weight gradients of attn_norm, k_norm, Wk and Wv accumulate; dx rows gain the K/V path's term.
    const KV kv = m_.project_kv(i_, m_.attn_norm(i_, x_rows), s, keys_.size(2));
    torch::autograd::backward({kv.k, kv.v}, {dk_.narrow(2, s, c).to(kv.k.scalar_type()),
                                             dv_.narrow(2, s, c).to(kv.v.scalar_type())});
  }

 private:
  const Model& m_;
  int64_t i_;
  torch::Tensor keys_, values_, dk_, dv_;
};

// MLA: the normed latent and the RoPE key of all rows, (N, T, r) and (N, T, dr), with their gradients;
// each chunk's attention expands K and V from them by key blocks (Note [StreamBP through the latent]).
class LatentKeys final : public StreamedKeys {
 public:
  LatentKeys(const Model& model, int64_t i, const torch::Tensor& x_in, int64_t rows)
      : m_(model), i_(i), keys_(model.latent_values(i, x_in.detach(), rows)) {
    grads_ = {accumulator_like(keys_.latent), accumulator_like(keys_.k_rot)};
  }
  torch::Tensor attention_block(const torch::Tensor& x_rows, const torch::Tensor& q,
                                const torch::Tensor& gate, int64_t /*s*/, int64_t e) const override {
    const MlaLatent visible{keys_.latent.narrow(1, 0, e), keys_.k_rot.narrow(1, 0, e)};
    const MlaLatentGrads sink{grads_.latent.narrow(1, 0, e), grads_.k_rot.narrow(1, 0, e)};
    return m_.attention_output(i_, x_rows, latent_chunk_attention(m_, i_, q, visible, sink, q.size(2)), gate);
  }
  void backward_rows(const torch::Tensor& x_rows, int64_t s, int64_t c) const override {
    // kv_a's, its norm's and (with it) the input norm's gradients accumulate; dx rows gain the latent path's.
    const MlaLatent rows = m_.project_latent(i_, m_.attn_norm(i_, x_rows), s, keys_.latent.size(1));
    torch::autograd::backward({rows.latent, rows.k_rot},
                              {grads_.latent.narrow(1, s, c).to(rows.latent.scalar_type()),
                               grads_.k_rot.narrow(1, s, c).to(rows.k_rot.scalar_type())});
  }

 private:
  const Model& m_;
  int64_t i_;
  MlaLatent keys_;
  MlaLatentGrads grads_;
};

}  // namespace

torch::Tensor streambp_layer_backward(const Model& model, int64_t i, const torch::Tensor& x_in,
                                      torch::Tensor dy, int64_t rows,
                                      const std::function<void(int64_t j)>& between_chunks) {
  if (model.config.is_linear_layer(i))  // Gated DeltaNet: Note [StreamBP through the recurrence]
    return streambp_recurrent_layer_backward(model, i, x_in, std::move(dy), rows, between_chunks);
  const int64_t T = x_in.size(1), chunks = (T + rows - 1) / rows;
  // a. the K/V side of all rows, values only, made chunk by chunk: no graph, no T-row temporaries.
  std::unique_ptr<StreamedKeys> keys;
  {
    PhaseScope phase("K/V");
    MemoryScope scope(Category::kv);
    torch::NoGradGuard no_grad;
    if (model.config.mla)
      keys = std::make_unique<LatentKeys>(model, i, x_in, rows);
    else
      keys = std::make_unique<ExpandedKeys>(model, i, x_in, rows);
  }
  const bool wants_dx = x_in.requires_grad();  // not for LoRA's layer 0 (Model::input_gradient_needed)
  // b. and c. of Note [StreamBP's layer backward] (layerwise.h): chunks from the last to the first.
  for (int64_t j = chunks - 1; j >= 0; --j) {
    const int64_t s = j * rows, c = std::min(rows, T - s), e = s + c;
    {
      PhaseScope phase(fmt::format("chunk {}", j));
      MemoryScope scope(Category::activations);
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);  // (N, c, d)
      {
        auto h = model.attn_norm(i, x_rows);   // (N, c, d)
        auto q = model.project_q(i, h, s, T);  // (N, Hq, c, hd)
        auto y = model.mlp_block(i, keys->attention_block(x_rows, q, model.output_gate(i, h), s, e));
        y.backward(dy.narrow(1, s, c));
      }
      {
        PhaseScope kv_phase(fmt::format("chunk {} K/V backward", j));
        MemoryScope kv_scope(Category::kv);
        keys->backward_rows(x_rows, s, c);
      }
      if (wants_dx) dy.narrow(1, s, c).copy_(x_rows.grad());
    }
    if (between_chunks && j > 0) between_chunks(j);
  }
  return wants_dx ? dy : torch::Tensor();  // dy's buffer now holds dx
}

}  // namespace bpbench
