// layerwise.h: pieces shared by the layerwise strategies (checkpoint, mst, streambp, streambp-dist): the
// no-grad forward that keeps each layer's input, the embedding backward, the LM head run in chunks, and
// StreamBP's layer backward. Shapes use the legend of model_config.h.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "impls/interface/strategy.h"
#include "impls/machinery/offload.h"

namespace bpbench {

// No-grad forward handing every layer input x_0..x_{L-1} (N, T, d) to `store` once the next one is computed;
// returns x_L, the last layer's output. Allocated under the "checkpoints" memory category. Attention runs
// over query chunks of `rows` rows (pass T for whole-sequence attention, as Hugging Face's eager forward
// does).
torch::Tensor checkpointed_forward(const Model& model, const torch::Tensor& ids, int64_t rows,
                                   CheckpointStore& store);
// The same, every checkpoint kept on the device: L + 1 tensors, x_0..x_{L-1} then x_L.
std::vector<torch::Tensor> checkpointed_forward(const Model& model, const torch::Tensor& ids, int64_t rows);

// The store a step hands its checkpoints to: the runner's (in.checkpoints, which may offload), else a device
// store kept in `owned`.
CheckpointStore& checkpoint_store(const StepInputs& in, std::unique_ptr<CheckpointStore>& owned);

// x_0 = embed(ids) (N, T, d) without grad, allocated as a checkpoint: layer 0's input made again where a
// strategy does not keep it.
torch::Tensor first_layer_input(const Model& model, const torch::Tensor& ids);

// A store in front of `kept` that keeps every layer input but x_0: put(0) drops it, take(0) makes it again
// from the ids (first_layer_input). An embedding row is a gather (Gemma 3: and one multiply), exact and all
// but free to redo, so holding x_0 from the forward to the end of the backward buys nothing: StreamBP's
// checkpoints are x_1..x_{L-1}, N*T*d*s bytes fewer through every phase, and with offload one fewer host
// buffer and copy each way.
class FirstInputRecomputed final : public CheckpointStore {
 public:
  FirstInputRecomputed(CheckpointStore& kept, const Model& model, const torch::Tensor& ids)
      : kept_(kept), model_(model), ids_(ids) {}
  Offload offload() const override { return kept_.offload(); }
  void put(int64_t i, torch::Tensor x) override;
  void prefetch(int64_t i) override;
  torch::Tensor take(int64_t i) override;

 private:
  CheckpointStore& kept_;
  const Model& model_;
  const torch::Tensor& ids_;
};

// The backward through the layers, from the top: for i = L-1..0 (phase "layer i backward"), x_i is taken from
// `store` as a leaf requiring grad, layer i-1's is prefetched, and dy <- backward(i, x_i, dy), which returns
// dL/dx_i. Returns dL/dx_0. Nothing is prefetched before it (offload.h: the head holds no layer input).
// Where nothing below layer i trains (LoRA's layer 0, Model::input_gradient_needed) x_i requires no grad and
// backward returns an undefined tensor, as plain BP computes no such gradient.
using LayerBackward = std::function<torch::Tensor(int64_t i, const torch::Tensor& x_in, torch::Tensor dy)>;
torch::Tensor layers_backward(const Model& model, CheckpointStore& store, torch::Tensor dy,
                              const LayerBackward& backward);

// Re-runs the embedding with grad and backpropagates dx (N, T, d) into the embedding weight (when trainable).
void embedding_backward(const Model& model, const torch::Tensor& ids, const torch::Tensor& dx);

// The LM head and loss, streamed over chunks of `rows` rows of x (N, T, d), the last layer's output:
// for each chunk, logits (N, c, V) and their gradient exist only while that chunk runs. Gradients land in
// W_lm / final norm .grad; the returned dx (N, T, d) is the gradient of the loss with respect to x.
// When f is not linear, or `sums` is given, f'(S) comes from S computed first (by a no-grad pass unless
// given).
struct HeadResult {
  torch::Tensor loss;  // 0-dim
  torch::Tensor dx;    // (N, T, d)
};
// Where dx goes: a buffer of its own, or x's rows, each once its chunk is done (for a caller that is done
// with x, as StreamBP is with x_L: N*T*d*s bytes fewer through the head; x then holds dx, and so does the
// result's dx, whose bytes stay in the memory category x was allocated under, "checkpoints").
enum class HeadDx { own_buffer, into_x };
HeadResult streamed_head_backward(const Model& model, const torch::Tensor& x, const Batch& batch,
                                  const Objective& objective, int64_t rows, torch::Tensor sums = {},
                                  HeadDx where = HeadDx::own_buffer);

// S (N) under no grad, over chunks of `rows` rows: the first pass of a non-linear objective, MsT's forward.
torch::Tensor streamed_sequence_sums(const Model& model, const torch::Tensor& x, const Batch& batch,
                                     const Objective& objective, int64_t rows);

// Note [StreamBP's layer backward]. Layer i's backward with its input x_in (N, T, d) and the gradient of its
// output dY (N, T, d), in chunks [s, e) of c = `rows` rows (the last may be shorter), chunk j = s / c:
//   a. K and V of all T rows as values (no graph), made chunk by chunk: h = attn_norm(x_in[s:e]),
//      K[s:e] = rope(k_norm(h Wk)), V[s:e] = h Wv, each (N, Hkv, T, hd); dK and dV accumulate in float32.
//   b. chunks from the last (j = D - 1) to the first, each forward and at once backward (phase "chunk j"):
//        q  = rope(q_norm(attn_norm(x_in[s:e]) Wq))             (N, Hq, c, hd), positions s..e-1
//        x1 = x_in[s:e] + o_proj(attention(q, K[:e], V[:e]))     query p sees keys 0..p
//        y  = x1 + mlp(mlp_norm(x1))                             (N, c, d)
//      and y's backward with dY[s:e]: the weight gradients add into .grad, dx[s:e] through q and the
//      residual, and dK[:e], dV[:e].
//   c. in the same chunk ("chunk j K/V backward"): no earlier chunk sees keys [s, e), so their dK, dV are
//      whole. The K/V path of rows [s, e) is made again from x_in[s:e] and backpropagated: Wk, Wv, k_norm and
//      the input norm accumulate, and dx[s:e] gains the K/V path's term. dx[s:e] is written into dY[s:e],
//      which no later chunk reads: one buffer carries dY in and dx out, the next layer's dY.
// Multi-head latent attention (DeepSeek): a. keeps the normed latent and the RoPE key of all rows instead,
// with their gradients; b. expands K and V from them one key block at a time (Note [StreamBP through the
// latent], harness/model/latent_attention.h); c. backpropagates the latent path of rows [s, e).
//
// Returns dx = dL/dx_in (N, T, d) in dy's buffer, or an undefined tensor where x_in requires no grad (LoRA's
// layer 0). between_chunks(j), when given, runs after chunk j whenever another chunk follows, once chunk j's
// activations are freed: streambp-dist's naive_comm reduces the layer's partial gradients there.
torch::Tensor streambp_layer_backward(const Model& model, int64_t i, const torch::Tensor& x_in,
                                      torch::Tensor dy, int64_t rows,
                                      const std::function<void(int64_t j)>& between_chunks = {});

}  // namespace bpbench
