// mesh_attention.h: causal attention on a 2-D mesh of U x R ranks (USP, LoongTrain): Ulysses' all-to-all
// inside groups of U ranks, the ring (ring_attention.h) across groups of R. Legend: model_config.h, plus
//   U   ranks of a Ulysses group     R   ranks of a ring group (ring positions)     P = U R
//   b   rows of a block, a multiple of U: U ceil(T / 2RU)            T' = 2 R b   the padded sequence
//
// Rank r = g U + u sits at ring position g and Ulysses index u. Its Ulysses group is the U ranks of ring
// position g; its ring group the R ranks of Ulysses index u. The sequence is 2R blocks of b rows; ring
// position g holds blocks g and 2R-1-g (the ring's zigzag), and each of its U ranks a U-th of both: rows
// [u b/U, (u+1) b/U) of each block, 2b/U rows in all.
//
// Attention: one all-to-all inside the Ulysses group turns the rank's 2b/U rows of every head into the ring
// position's 2b rows of Hq/U heads (K/V heads as Ulysses exchanges them, repeated where Hkv < U); the
// ring runs over the R ranks that hold the same heads; one all-to-all takes the output back to the rows.
// Only the Ulysses split constrains the heads (U divides Hq, and divides Hkv or is a multiple of it).
#pragma once

#include <torch/torch.h>

#include <string>

#include "impls/machinery/comm.h"
#include "impls/machinery/ring_attention.h"

namespace bpbench::dist {

struct MeshLayout {
  int64_t ulysses = 1, ring = 1;  // U, R
  int64_t rank = 0;               // r = g U + u
  int64_t seq_len = 0;            // T, the real tokens
  int64_t block = 0;              // b, a multiple of U

  int64_t ring_position() const { return rank / ulysses; }  // g
  int64_t ulysses_index() const { return rank % ulysses; }  // u
  int64_t rows() const { return 2 * block / ulysses; }      // the rank's rows
  // The position of the rank's first row of its block i (0: block g, 1: block 2R-1-g).
  int64_t first_position(int64_t i) const {
    const int64_t g = ring_position(), block_index = i == 0 ? g : 2 * ring - 1 - g;
    return block_index * block + ulysses_index() * (block / ulysses);
  }
  // The ring's layout over the ring positions: blocks of b rows (its T the padded T', so that its block is
  // b).
  ZigzagLayout ring_layout() const { return zigzag_layout(2 * ring * block, ring, ring_position()); }
  // The members of the rank's Ulysses group and of its ring group, in their order.
  std::vector<int> ulysses_members() const;
  std::vector<int> ring_members() const;
};

MeshLayout mesh_layout(int64_t seq_len, int64_t ulysses, int64_t ring, int64_t rank);

// Rank `layout.rank`'s rows of a (N, T, ...) per-position tensor (its U-th of its two blocks, in order), the
// positions past T filled with `pad`.
torch::Tensor mesh_rows(const torch::Tensor& whole, const MeshLayout& layout, double pad);

// q (N, Hq, 2b/U, hd), k and v (N, Hkv, 2b/U, hd), the rank's rows -> (N, Hq, 2b/U, hd), differentiable in
// q, k and v. `ulysses` is the rank's Ulysses group (U ranks, its rank u), `ring` its ring group (R ranks,
// its rank g): Communicator::subgroup's. The exchanges are counted on them, named after `what`.
// sink_logits (Hq): q's heads' attention sinks, of which the ring runs the Ulysses rank's (undefined: none).
torch::Tensor mesh_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, const MeshLayout& layout, Communicator& ulysses,
                             Communicator& ring, const std::string& what, int64_t tile = 0,
                             int64_t window = 0, const torch::Tensor& sink_logits = {});

}  // namespace bpbench::dist
