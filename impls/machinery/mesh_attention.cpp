// mesh_attention.cpp: the 2-D mesh's layout and attention (mesh_attention.h).
#include "impls/machinery/mesh_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "harness/model/attention_sinks.h"
#include "impls/machinery/sequence_parallel.h"

namespace bpbench::dist {

MeshLayout mesh_layout(int64_t seq_len, int64_t ulysses, int64_t ring, int64_t rank) {
  if (seq_len < 1 || ulysses < 1 || ring < 1 || rank < 0 || rank >= ulysses * ring)
    throw std::invalid_argument(
        fmt::format("mesh layout: T = {} over {} x {} ranks has no rank {}", seq_len, ulysses, ring, rank));
  MeshLayout l;
  l.ulysses = ulysses;
  l.ring = ring;
  l.rank = rank;
  l.seq_len = seq_len;
  l.block = ulysses * ((seq_len + 2 * ring * ulysses - 1) / (2 * ring * ulysses));
  return l;
}

std::vector<int> MeshLayout::ulysses_members() const {
  std::vector<int> members;
  for (int64_t u = 0; u < ulysses; ++u) members.push_back(static_cast<int>(ring_position() * ulysses + u));
  return members;
}

std::vector<int> MeshLayout::ring_members() const {
  std::vector<int> members;
  for (int64_t g = 0; g < ring; ++g) members.push_back(static_cast<int>(g * ulysses + ulysses_index()));
  return members;
}

torch::Tensor mesh_rows(const torch::Tensor& whole, const MeshLayout& layout, double pad) {
  return two_ranges_rows(whole, layout.first_position(0), layout.first_position(1), layout.rows() / 2, pad);
}

namespace {

// After the Ulysses exchange the ring position's rows arrive by source rank, each source's 2b/U rows being
// its U-th of block g, then of block 2R-1-g: (N, H, U, 2, b/U, hd). The ring wants block g's b rows, then
// block 2R-1-g's: (N, H, 2, U, b/U, hd). `to_ring` false: the way back.
torch::Tensor reorder(const torch::Tensor& x, const MeshLayout& layout, bool to_ring) {
  const int64_t N = x.size(0), H = x.size(1), hd = x.size(3), U = layout.ulysses, n = layout.block / U;
  const auto shape =
      to_ring ? std::vector<int64_t>{N, H, U, 2, n, hd} : std::vector<int64_t>{N, H, 2, U, n, hd};
  return x.reshape(shape).permute({0, 1, 3, 2, 4, 5}).reshape({N, H, 2 * layout.block, hd});
}

}  // namespace

torch::Tensor mesh_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, const MeshLayout& layout, Communicator& ulysses,
                             Communicator& ring, const std::string& what, int64_t tile, int64_t window,
                             const torch::Tensor& sink_logits) {
  const int64_t Hq = q.size(1), Hkv = k.size(1), U = layout.ulysses;
  if (!heads_split(Hq, Hkv, U))
    throw std::invalid_argument(
        fmt::format("mesh attention: {} Ulysses ranks cannot split {} query heads and {} "
                    "K/V heads",
                    U, Hq, Hkv));
  TORCH_CHECK(ulysses.world_size() == U && ulysses.rank() == layout.ulysses_index() &&
                  ring.world_size() == layout.ring && ring.rank() == layout.ring_position(),
              "mesh attention: groups of ", ulysses.world_size(), " and ", ring.world_size(), " ranks for a ",
              U, " x ", layout.ring, " mesh");
  // The ring position's 2b rows of the rank's heads, in the ring's order; each exchanged tensor released as
  // its reordered copy is made (the exchange's results are copies already: nothing else holds them).
  torch::Tensor ring_q, ring_k, ring_v;  // (N, Hq/U or Hk'/U, 2b, hd)
  {
    HeadShards heads = exchange_qkv(q, k, v, kv_copies(Hkv, U), ulysses, what + " q, k, v");
    ring_q = reorder(std::exchange(heads.q, torch::Tensor()), layout, true);
    ring_k = reorder(std::exchange(heads.k, torch::Tensor()), layout, true);
    ring_v = reorder(std::exchange(heads.v, torch::Tensor()), layout, true);
  }
  // The exchange leaves the rank the u-th of q's heads (in order): their sinks.
  const auto sinks = sink_logits_of_heads(sink_logits, layout.ulysses_index() * (Hq / U), Hq / U);
  auto out =
      ring_attention(ring_q, ring_k, ring_v, scale, layout.ring_layout(), ring, what, tile, window, sinks);
  ring_q = ring_k = ring_v = torch::Tensor();  // with grad the ring's node keeps them
  const auto rows_order = reorder(std::exchange(out, torch::Tensor()), layout, false);
  return heads_to_seq(rows_order, ulysses, what + " output");  // (N, Hq, 2b/U, hd)
}

}  // namespace bpbench::dist
