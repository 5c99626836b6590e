// ring_layer.cpp: the ring strategies' layer on a rank's rows (ring_layer.h).
#include "impls/machinery/ring_layer.h"

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

#include "impls/machinery/ring_attention.h"

namespace bpbench::dist {

RingPlace::RingPlace(int64_t seq_len, int64_t ulysses_degree, Communicator& world) : world_(&world) {
  const int64_t P = world.world_size(), U = ulysses_degree;
  if (U < 1 || P % U != 0)
    throw std::invalid_argument(
        fmt::format("ring strategies: ulysses_degree {} does not divide {} ranks", ulysses_degree, P));
  layout_ = mesh_layout(seq_len, U, P / U, world.rank());
  if (U > 1) {
    ulysses_ = &world.subgroup(layout_.ulysses_members(), "ulysses");
    ring_ = &world.subgroup(layout_.ring_members(), "ring");
  }
}

torch::Tensor RingPlace::attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   double scale, const std::string& what, int64_t tile, int64_t window,
                                   const torch::Tensor& sink_logits) const {
  if (!ulysses_) {
    // U = 1: round every rank on the zigzag layout of the real T (the mesh's blocks, b = ceil(T / 2P)).
    return ring_attention(q, k, v, scale, zigzag_layout(layout_.seq_len, layout_.ring, layout_.rank), *world_,
                          what, tile, window, sink_logits);
  }
  return mesh_attention(q, k, v, scale, layout_, *ulysses_, *ring_, what, tile, window, sink_logits);
}

Batch ring_batch(const Batch& global, int64_t rank, int64_t ranks, int64_t ulysses_degree) {
  if (ulysses_degree == 1) return zigzag_batch(global, rank, ranks);
  const int64_t T = global.whole_seq_len > 0 ? global.whole_seq_len : global.seq_len();
  const MeshLayout l = mesh_layout(T, ulysses_degree, ranks / ulysses_degree, rank);
  return two_ranges_batch(global, l.first_position(0), l.first_position(1), l.rows() / 2);
}

torch::Tensor ring_layer(const Model& m, int64_t i, const torch::Tensor& x, const RingPlace& place) {
  const int64_t h = place.half(), N = x.size(0);
  torch::Tensor o;  // (N, 2h, Hq hd)
  {
    // q (N, Hq, 2h, hd), k and v (N, Hkv, 2h, hd): each range at its own positions.
    const std::vector<Model::PositionBlock> blocks{{h, place.first_position(0)},
                                                   {h, place.first_position(1)}};
    torch::Tensor q;
    KV kv;
    {
      const auto h_in = m.attn_norm(i, x);  // released before the attention (its graph keeps what it needs)
      q = m.project_q(i, h_in, blocks, place.seq_len());
      kv = m.project_kv(i, h_in, blocks, place.seq_len());
    }
    auto heads =
        place.attention(q, kv.k, kv.v, m.config.attention_scale(), fmt::format("layer {} attention", i), 0,
                        m.config.window_of(i), m.sink_logits(i, 0, m.config.heads));  // (N, Hq, 2h, hd)
    o = heads.transpose(1, 2).reshape({N, place.rows(), -1});
  }
  return m.mlp_block(i, m.attention_output(i, x, o));
}

std::vector<RowsQkv> ring_qkv_groups_in_chunks(const Model& m, int64_t i, const torch::Tensor& x,
                                               const RingPlace& place, int64_t rows, int64_t groups) {
  torch::NoGradGuard no_grad;
  const auto& c = m.config;
  TORCH_CHECK(groups >= 1 && c.kv_heads % groups == 0, "ring_qkv_groups_in_chunks: ", groups, " groups of ",
              c.kv_heads, " K/V heads");
  const int64_t N = x.size(0), R = place.rows(), hq = c.heads / groups, hk = c.kv_heads / groups;
  std::vector<RowsQkv> out;
  for (int64_t g = 0; g < groups; ++g)
    out.push_back({torch::empty({N, hq, R, c.head_dim}, x.options()),
                   torch::empty({N, hk, R, c.head_dim}, x.options()),
                   torch::empty({N, hk, R, c.head_dim}, x.options())});
  for_block_chunks(place, rows, [&](int64_t s, int64_t n, int64_t position) {
    const auto h = m.attn_norm(i, x.narrow(1, s, n));
    {
      const auto q = m.project_q(i, h, position, place.seq_len());  // (N, Hq, n, hd), released before k, v
      for (int64_t g = 0; g < groups; ++g) out[g].q.narrow(2, s, n).copy_(q.narrow(1, g * hq, hq));
    }
    const KV kv = m.project_kv(i, h, position, place.seq_len());
    for (int64_t g = 0; g < groups; ++g) {
      out[g].k.narrow(2, s, n).copy_(kv.k.narrow(1, g * hk, hk));
      out[g].v.narrow(2, s, n).copy_(kv.v.narrow(1, g * hk, hk));
    }
  });
  return out;
}

RowsQkv ring_qkv_in_chunks(const Model& m, int64_t i, const torch::Tensor& x, const RingPlace& place,
                           int64_t rows) {
  return ring_qkv_groups_in_chunks(m, i, x, place, rows, 1).front();
}

torch::Tensor output_rows(const torch::Tensor& heads, int64_t s, int64_t n) {
  return heads.narrow(2, s, n).transpose(1, 2).reshape({heads.size(0), n, -1});
}

torch::Tensor ring_layer_in_chunks(const Model& m, int64_t i, const torch::Tensor& x, const RingPlace& place,
                                   int64_t rows) {
  torch::NoGradGuard no_grad;
  torch::Tensor heads;  // (N, Hq, 2h, hd)
  {
    RowsQkv qkv = ring_qkv_in_chunks(m, i, x, place, rows);
    heads =
        place.attention(qkv.q, qkv.k, qkv.v, m.config.attention_scale(), fmt::format("layer {} attention", i),
                        rows, m.config.window_of(i), m.sink_logits(i, 0, m.config.heads));
  }
  auto y = torch::empty_like(x);
  for (int64_t s = 0; s < place.rows(); s += rows) {
    const int64_t n = std::min(rows, place.rows() - s);
    y.narrow(1, s, n).copy_(
        m.mlp_block(i, m.attention_output(i, x.narrow(1, s, n), output_rows(heads, s, n))));
  }
  return y;
}

}  // namespace bpbench::dist
