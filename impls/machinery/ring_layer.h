// ring_layer.h: a layer of the ring strategies (ring.cpp, streambp_ring.cpp) on a rank's rows, whichever way
// its attention crosses the ranks: round a ring of every rank (ring_attention.h: ulysses_degree 1) or on the
// 2-D mesh, Ulysses inside groups of U ranks and the ring across them (mesh_attention.h). Legend:
// model_config.h, plus ring_attention.h's and mesh_attention.h's (U, R = P / U, b a block, h = b / U).
//
// A rank holds two ranges of h rows of every sequence: its U-th of each of its ring position's two zigzag
// blocks (with U = 1 the blocks themselves), x: (N, 2h, d). Every piece but attention runs on them as on any
// rows, RoPE at each range's own positions; attention is RingPlace::attention's.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness/model/model.h"
#include "harness/objectives/batch.h"
#include "impls/machinery/comm.h"
#include "impls/machinery/mesh_attention.h"

namespace bpbench::dist {

// One rank's place in a ring strategy's step: its rows and the groups its attention runs on.
class RingPlace {
 public:
  // Rank world.rank()'s place for sequences of T tokens on P = world.world_size() ranks; with U > 1 its
  // Ulysses and ring groups are made from `world` (Communicator::subgroup: joined once a run).
  RingPlace(int64_t seq_len, int64_t ulysses_degree, Communicator& world);

  const MeshLayout& layout() const { return layout_; }
  int64_t seq_len() const { return layout_.seq_len; }  // T, the real tokens
  int64_t rows() const { return layout_.rows(); }      // 2h
  int64_t half() const { return layout_.rows() / 2; }  // h: the rows of each range
  int64_t first_position(int64_t i) const { return layout_.first_position(i); }

  // Causal attention of the rank's rows over the whole sequence, differentiable in q, k and v: q (N, Hq,
  // 2h, hd), k and v (N, Hkv, 2h, hd) -> (N, Hq, 2h, hd). U = 1: ring_attention on every rank; else
  // mesh_attention. Pairs of blocks in tiles of `tile` (0: whole), a sliding `window` (0: none), q's heads'
  // attention sinks (undefined: none).
  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          double scale, const std::string& what, int64_t tile = 0, int64_t window = 0,
                          const torch::Tensor& sink_logits = {}) const;

 private:
  MeshLayout layout_;
  Communicator* world_ = nullptr;
  Communicator* ulysses_ = nullptr;  // U > 1 only
  Communicator* ring_ = nullptr;
};

// Rank `rank`'s rows of `global` (whole sequences of T tokens) on a U x (P / U) mesh (U = 1: zigzag_batch).
Batch ring_batch(const Batch& global, int64_t rank, int64_t ranks, int64_t ulysses_degree);

// Layer i of `m` on the rank's rows x (N, 2h, d) -> (N, 2h, d), differentiable: norms, projections (RoPE
// at each range's positions), o_proj and MLP on the rows, the attention across ranks (named "layer i
// attention").
torch::Tensor ring_layer(const Model& m, int64_t i, const torch::Tensor& x, const RingPlace& place);

// StreamBP's pieces on the rows (streambp_ring.cpp): the rank's 2h rows in chunks of at most `rows`, none
// across the boundary of its two ranges (a chunk's positions are one range): body(s, n, position) for the
// chunk of rows [s, s + n), at sequence positions [position, position + n).
template <class Body>
void for_block_chunks(const RingPlace& place, int64_t rows, Body&& body) {
  const int64_t h = place.half();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t off = 0; off < h; off += rows)
      body(i * h + off, std::min(rows, h - off), place.first_position(i) + off);
}

// q (N, Hq, 2h, hd), k and v (N, Hkv, 2h, hd) of the rank's rows x (N, 2h, d) as values, made `rows` rows
// at a time (for_block_chunks) into buffers.
struct RowsQkv {
  torch::Tensor q, k, v;
};
RowsQkv ring_qkv_in_chunks(const Model& m, int64_t i, const torch::Tensor& x, const RingPlace& place,
                           int64_t rows);
// The same in `groups` tensors each, group g holding K/V heads [g Hkv/G, (g+1) Hkv/G) and the query heads
// that read them (G divides Hkv): (N, Hq/G, 2h, hd), (N, Hkv/G, 2h, hd).
std::vector<RowsQkv> ring_qkv_groups_in_chunks(const Model& m, int64_t i, const torch::Tensor& x,
                                               const RingPlace& place, int64_t rows, int64_t groups);

// Layer i as values, `rows` rows at a time wherever a piece has rows: q, k and v in chunks, the attention
// across ranks (its pairs in tiles of `rows`), o_proj, the residual and the MLP in chunks into (N, 2h, d).
torch::Tensor ring_layer_in_chunks(const Model& m, int64_t i, const torch::Tensor& x, const RingPlace& place,
                                   int64_t rows);

// The rows [s, s + n) of an attention output (N, Hq, 2h, hd) as o_proj takes them: (N, n, Hq hd).
torch::Tensor output_rows(const torch::Tensor& heads, int64_t s, int64_t n);

}  // namespace bpbench::dist
