// recurrent_layer.cpp: Note [StreamBP through the recurrence] (recurrent_layer.h).
#include "impls/machinery/recurrent_layer.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "profiles/memory.h"

namespace bpbench {

using profiles::Category;
using profiles::MemoryScope;
using profiles::PhaseScope;

torch::Tensor streambp_recurrent_layer_backward(const Model& model, int64_t i, const torch::Tensor& x_in,
                                                torch::Tensor dy, int64_t rows,
                                                const std::function<void(int64_t j)>& between_chunks) {
  const int64_t N = x_in.size(0), T = x_in.size(1), chunks = (T + rows - 1) / rows;
  // a. the state entering each chunk, from one forward without a graph.
  std::vector<LinearState> entering(static_cast<size_t>(chunks));
  {
    PhaseScope phase("boundary states");
    torch::NoGradGuard no_grad;
    {
      MemoryScope kept(Category::kv);
      entering[0] = model.initial_linear_state(N);
    }
    for (int64_t j = 0; j + 1 < chunks; ++j) {
      // The chunk's forward is an activation; the state it leaves is kept (copied into the kv category, a
      // state's bytes for a moment, so that the timeline shows the kept states as such).
      MemoryScope scope(Category::activations);
      const LinearState next = model
                                   .linear_attention_block(i, x_in.detach().narrow(1, j * rows, rows),
                                                           entering[static_cast<size_t>(j)])
                                   .next;
      MemoryScope kept(Category::kv);
      entering[static_cast<size_t>(j + 1)] = {next.state.clone(), next.halo.clone()};
    }
  }
  const bool wants_dx = x_in.requires_grad();  // not for LoRA's layer 0 (Model::input_gradient_needed)
  LinearState leaving_grad;                    // dS, dhalo of the state after chunk j; none after the last
  // b. chunks from the last to the first, the state's gradient carried back.
  for (int64_t j = chunks - 1; j >= 0; --j) {
    const int64_t s = j * rows, c = std::min(rows, T - s);
    {
      PhaseScope phase(fmt::format("chunk {}", j));
      MemoryScope scope(Category::activations);
      auto x_rows = x_in.detach().narrow(1, s, c).requires_grad_(wants_dx);  // (N, c, d)
      LinearState& kept = entering[static_cast<size_t>(j)];
      // The first chunk's state is the zeros before row 0: no gradient goes there.
      const LinearState in{kept.state.requires_grad_(j > 0), kept.halo.requires_grad_(j > 0)};
      {
        LinearBlock block = model.linear_attention_block(i, x_rows, in);
        std::vector<torch::Tensor> roots = {model.mlp_block(i, block.x1)}, grads = {dy.narrow(1, s, c)};
        if (leaving_grad.state.defined()) {
          roots.insert(roots.end(), {block.next.state, block.next.halo});
          grads.insert(grads.end(), {leaving_grad.state, leaving_grad.halo});
        }
        torch::autograd::backward(roots, grads);
      }
      leaving_grad = j > 0 ? LinearState{in.state.grad(), in.halo.grad()} : LinearState{};
      kept = LinearState{};  // chunk j's state is spent
      if (wants_dx) dy.narrow(1, s, c).copy_(x_rows.grad());
    }
    if (between_chunks && j > 0) between_chunks(j);
  }
  return wants_dx ? dy : torch::Tensor();  // dy's buffer now holds dx
}

}  // namespace bpbench
