// test_ring_attention.cpp: the pieces of ring context parallelism, each against what it replaces.
//   PartialAttention  a sequence cut into blocks of unequal sizes, every query block merged over the key
//   blocks
//                     before it and its own (causal): the output equals causal_attention on the whole
//                     sequence, and the pairs' backward, given the merged output and logsumexp, sums to its
//                     dQ, dK, dV; both kernels (the CPU's fused one, the math form), float64, GQA.
//   RingAttention     over 2, 3 and 4 Gloo ranks (3 is what Ulysses cannot split 4 heads over): every rank's
//                     output and dQ, dK, dV rows equal whole-sequence causal attention's, relative 1e-12,
//                     T a multiple of 2P and T padded (padding over more than one block included), Hkv 1 and
//                     2; the padded rows' gradients exactly zero; exactly 3P - 2 send_recv calls of one K/V
//                     pair's bytes each (forward P - 1, backward P - 1 K/V and P dK/dV); the FLOP counter's
//                     tally of the rank's pairs. The same in tiles (streambp-ring's) and under sliding
//                     windows against windowed attention, where a window short of a block leaves a step
//                     unsent (T = 40 on 4 ranks: 6 calls).
//   SendRecv          the ring shift on 2 and 3 ranks: what arrives is the left neighbour's, counted once.
//   MeshAttention     the 2-D mesh's attention (mesh_attention.h) on 4 ranks, 2 x 2, 4 x 1 and 1 x 4, against
//                     whole-sequence attention (windowed too), each subgroup's exchanges counted.
//   Subgroups         4 ranks in two ways of pairs (the 2-D mesh's groups): each subgroup's all_reduce,
//                     all_to_all and send_recv among its own ranks, counted in its own stats; a member list
//                     without this rank refused in one line.
//   RingFailure       a rank that dies before its first exchange: the others fail within the timeout, one
//                     line naming the rank, send_recv and its peers.
// A mutation that sends dK/dV home to the wrong owner ((r + 2) mod P) fails RingAttention on 3 and 4 ranks
// (checked by hand when this file was written).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "harness/model/attention_partial.h"
#include "harness/model/flop_count.h"
#include "harness/model/ops.h"
#include "impls/machinery/mesh_attention.h"
#include "impls/machinery/ring_attention.h"
#include "tests/support/dist_ranks.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_ring_attention {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kN = 2, kHeads = 4, kHeadDim = 6;

struct Inputs {
  torch::Tensor q, k, v, grad_out;  // (N, Hq, T, hd), (N, Hkv, T, hd) x 2, (N, Hq, T, hd)
};

Inputs inputs(int64_t T, int64_t kv_heads, int64_t seed) {
  torch::manual_seed(seed);
  auto o = torch::TensorOptions().dtype(torch::kDouble);
  return {torch::randn({kN, kHeads, T, kHeadDim}, o), torch::randn({kN, kv_heads, T, kHeadDim}, o),
          torch::randn({kN, kv_heads, T, kHeadDim}, o), torch::randn({kN, kHeads, T, kHeadDim}, o)};
}

// Whole-sequence causal attention's output and gradients (under a sliding window, if any): the reference.
std::vector<torch::Tensor> reference(const Inputs& in, int64_t window = 0) {
  auto q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(),
       v = in.v.clone().requires_grad_();
  // (N, T, Hq hd) as the model's layers take it, back to (N, Hq, T, hd).
  auto out =
      causal_attention(q, k, v, window).view({in.q.size(0), in.q.size(2), in.q.size(1), -1}).transpose(1, 2);
  out.backward(in.grad_out);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

double relative(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).norm().item<double>() / want.norm().item<double>();
}

// ---- partial attention, in one process
// ---------------------------------------------------------------------

class PartialAttentionBlocks : public ::testing::TestWithParam<std::tuple<PartialKernel, int64_t>> {};

TEST_P(PartialAttentionBlocks, MergeToCausalAttentionAndItsGradients) {
  const auto [kernel, kv_heads] = GetParam();
  const std::vector<int64_t> sizes = {3, 4, 3};  // unequal blocks: T = 10
  const Inputs in = inputs(10, kv_heads, 5);
  const auto want = reference(in);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  std::vector<int64_t> starts = {0};
  for (int64_t s : sizes) starts.push_back(starts.back() + s);
  auto block = [&](const torch::Tensor& t, size_t i) { return t.narrow(2, starts[i], sizes[i]); };
  auto mask_of = [](size_t key, size_t query) {
    return key == query ? KeyBlockMask::causal : KeyBlockMask::all;
  };
  // Each query block's running output and logsumexp: views of one buffer, merged into in place.
  auto out = torch::empty_like(in.q), lse = torch::empty(out.sizes().slice(0, 3), out.options());
  std::vector<PartialAttention> merged;
  for (size_t a = 0; a < sizes.size(); ++a) {
    merged.push_back({block(out, a), block(lse, a)});
    for (size_t j = a + 1; j-- > 0;) {  // the diagonal first, then the earlier blocks: any order merges alike
      const auto pair =
          partial_attention(block(in.q, a), block(in.k, j), block(in.v, j), scale, mask_of(j, a), kernel);
      if (j == a) {
        merged[a].out.copy_(pair.out);
        merged[a].lse.copy_(pair.lse);
      } else {
        merge_partial(merged[a], pair);
      }
    }
  }
  auto dq = torch::zeros_like(in.q), dk = torch::zeros_like(in.k), dv = torch::zeros_like(in.v);
  for (size_t a = 0; a < sizes.size(); ++a) {
    EXPECT_LT(relative(merged[a].out, block(want[0], a)), 1e-12) << "output of block " << a;
    for (size_t j = 0; j <= a; ++j) {
      auto [dq_pair, dk_pair, dv_pair] =
          partial_attention_backward(block(in.grad_out, a), block(in.q, a), block(in.k, j), block(in.v, j),
                                     merged[a].out, merged[a].lse, scale, mask_of(j, a), kernel);
      block(dq, a).add_(dq_pair);
      block(dk, j).add_(dk_pair);
      block(dv, j).add_(dv_pair);
    }
  }
  EXPECT_LT(relative(dq, want[1]), 1e-12);
  EXPECT_LT(relative(dk, want[2]), 1e-12);
  EXPECT_LT(relative(dv, want[3]), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Kernels, PartialAttentionBlocks,
                         ::testing::Combine(::testing::Values(PartialKernel::cpu_fused, PartialKernel::math),
                                            ::testing::Values(int64_t{1}, int64_t{2})),
                         [](const auto& info) {
                           return fmt::format(
                               "{}_kv{}", std::get<0>(info.param) == PartialKernel::math ? "math" : "fused",
                               std::get<1>(info.param));
                         });

// ---- round the ring, on Gloo ranks ------------------------------------------------------------------------

// The ranks' piece: the same inputs on every rank, its zigzag rows through ring_attention and back; its
// output and gradients (ring.pt) and the exchanges counted (rank<r>.json).
void ring_piece(const json& job, dist::Communicator& comm, const fs::path& out) {
  const int64_t T = job.at("seq_len"), rank = comm.rank();
  if (rank == job.value("die_rank", -1)) std::_Exit(7);  // dies before its first exchange
  const Inputs in = inputs(T, job.at("kv_heads"), job.at("seed"));
  const auto layout = dist::zigzag_layout(T, comm.world_size(), rank);
  auto rows = [&](const torch::Tensor& t) {  // (N, H, T, hd) -> (N, H, 2b, hd), padded rows zero
    return dist::zigzag_rows(t.transpose(1, 2), layout, 0.0).transpose(1, 2).contiguous();
  };
  auto q = rows(in.q).requires_grad_(), k = rows(in.k).requires_grad_(), v = rows(in.v).requires_grad_();
  const auto before = comm.stats();
  FlopCounts flops;
  torch::Tensor o;
  {
    FlopCounter counter;
    o = dist::ring_attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(kHeadDim)), layout, comm,
                             "attention", job.value("tile", 0), job.value("window", 0));
    o.backward(rows(in.grad_out));  // a padded row's gradient is zero, as an ignored target makes it
    flops = counter.counts();
  }
  torch::save(std::vector<torch::Tensor>{o.detach(), q.grad(), k.grad(), v.grad()},
              (out / fmt::format("ring{}.pt", rank)).string());
  write_json(out / fmt::format("rank{}.json", rank), {{"comm", comm.stats().since(before).to_json()},
                                                      {"flops",
                                                       {{"forward", flops.forward_attention},
                                                        {"backward", flops.backward_attention},
                                                        {"rescore", flops.attention_rescore},
                                                        {"masked", flops.attention_masked}}}});
}
const bool ring_piece_registered = register_rank_piece("ring_attention", &ring_piece);

struct RingCase {
  int world;
  int64_t seq_len, kv_heads;
  int64_t tile = 0, window = 0;  // pairs in tiles of `tile` (0: whole); a sliding window (0: none)
  int64_t calls = 0;             // send_recvs of the forward and backward (0: round the ring, 3P - 2)
};

std::string label(const RingCase& c) {
  return fmt::format("P{}_T{}_kv{}{}{}", c.world, c.seq_len, c.kv_heads,
                     c.tile ? fmt::format("_tile{}", c.tile) : "",
                     c.window ? fmt::format("_w{}", c.window) : "");
}

// GoogleTest prints a failing case's parameter by its label, not as bytes.
void PrintTo(const RingCase& c, std::ostream* os) {
  *os << label(c);
}

json ring_job(const RingCase& c) {
  return {{"piece", "ring_attention"}, {"seq_len", c.seq_len}, {"kv_heads", c.kv_heads},
          {"seed", 11 + c.world},      {"tile", c.tile},       {"window", c.window}};
}

std::vector<RingCase> ring_cases() {
  // T a multiple of 2P, and not: T = 11 on 4 ranks pads 5 rows, more than a block of 2. Tiles of 2 rows
  // (streambp-ring's), sliding windows (Gemma 3's local layers) with and without tiles: at T = 40 on 4 ranks
  // (b = 5) a window of 5 needs steps 1 and 3 only, each sent straight (1 forward, 2 backward): 6 calls.
  return {{2, 8, 2},        {2, 7, 1},           {3, 12, 1},          {3, 13, 2},
          {4, 16, 1},       {4, 11, 2},          {2, 13, 2, 2},       {3, 13, 1, 2, 5},
          {2, 13, 2, 0, 3}, {4, 40, 2, 0, 5, 6}, {4, 40, 1, 2, 5, 6}, {4, 11, 2, 3, 4}};
}

class RingAttention : public ::testing::TestWithParam<RingCase> {};

const std::string kRingTest = "EveryRankMatchesWholeSequenceAttention";  // the case names under it

TEST_P(RingAttention, EveryRankMatchesWholeSequenceAttention) {
  const RingCase& c = GetParam();
  const std::string name = kRingTest + "/" + label(c);
  const SharedLaunch& launch =
      shared_launch(rank_cases_of(
                        kRingTest, ring_cases(), [](const RingCase& r) { return label(r); }, ring_job),
                    c.world);
  ASSERT_TRUE(launch.ran(name, c.world));
  const json job = ring_job(c);
  const Inputs in = inputs(c.seq_len, c.kv_heads, job["seed"]);
  const auto want = reference(in, c.window);
  for (int r = 0; r < c.world; ++r) {
    SCOPED_TRACE(fmt::format("rank {} of {}", r, c.world));
    std::vector<torch::Tensor> got;
    torch::load(got, (launch.dir_of(name) / fmt::format("ring{}.pt", r)).string());
    ASSERT_EQ(got.size(), 4u);
    const auto layout = dist::zigzag_layout(c.seq_len, c.world, r);
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t start = layout.first_position(i), b = layout.block;
      const int64_t real = std::clamp<int64_t>(c.seq_len - start, 0, b);
      for (size_t t = 0; t < 4; ++t) {
        const auto mine = got[t].narrow(2, i * b, b);
        if (real > 0) {
          EXPECT_LT(relative(mine.narrow(2, 0, real), want[t].narrow(2, start, real)), 1e-12)
              << "tensor " << t << " (out, dq, dk, dv), block " << layout.block_index(i);
        }
        if (t > 0 && real < b) {
          EXPECT_EQ(mine.narrow(2, real, b - real).abs().max().item<double>(), 0.0)
              << "padded rows, tensor " << t;
        }
      }
    }
    const json comm = json::parse(file_text(launch.dir_of(name) / fmt::format("rank{}.json", r)))["comm"];
    const int64_t pair_bytes = 2 * kN * c.kv_heads * layout.rows() * kHeadDim * 8;
    const int64_t calls = c.calls > 0 ? c.calls : 3 * c.world - 2;
    EXPECT_EQ(comm["send_recv"]["calls"], calls);
    EXPECT_EQ(comm["send_recv"]["bytes"], calls * pair_bytes);
    EXPECT_EQ(comm["send_recv"]["wire_bytes"], calls * pair_bytes);
    EXPECT_EQ(comm["all_to_all"]["calls"], 0);
    // FLOPs (flop_count.h): per (sequence, head) two causal b x b pairs and 2P - 1 whole ones, whatever the
    // rank and the tiles; the CPU's fused kernel skips the masked half and computes Q K^T again in its
    // backward. Under a window, row p (padded rows included) sees its last min(W, p + 1) keys; a banded
    // piece's mask computes its hidden scores too (counted as masked), so only the model's work is fixed.
    const json flops = json::parse(file_text(launch.dir_of(name) / fmt::format("rank{}.json", r)))["flops"];
    const int64_t b = layout.block, per_pair = kN * kHeads * kHeadDim;
    int64_t visible = 0;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t p = layout.first_position(i); p < layout.first_position(i) + b; ++p)
        visible += c.window > 0 ? std::min(c.window, p + 1) : p + 1;
    if (c.window == 0) {
      EXPECT_EQ(visible, 2 * (b * b - b * (b - 1) / 2) + (2 * c.world - 1) * b * b);
    }
    EXPECT_EQ(flops["forward"], 4 * per_pair * visible);
    EXPECT_EQ(flops["backward"], 8 * per_pair * visible);
    if (c.window > 0) continue;
    EXPECT_EQ(flops["rescore"], 2 * per_pair * visible);
    EXPECT_EQ(flops["masked"], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, RingAttention, ::testing::ValuesIn(ring_cases()),
                         [](const auto& info) { return label(info.param); });

// ---- on a 2-D mesh: Ulysses inside groups of U, the ring across groups of R
// ---------------------------------

// The ranks' piece: the same inputs on every rank, its mesh rows through mesh_attention on its two subgroups
// and back; its output and gradients (mesh.pt) and each subgroup's exchanges (rank<r>.json).
void mesh_piece(const json& job, dist::Communicator& comm, const fs::path& out) {
  const int64_t T = job.at("seq_len"), rank = comm.rank();
  const Inputs in = inputs(T, job.at("kv_heads"), job.at("seed"));
  const auto layout = dist::mesh_layout(T, job.at("ulysses"), job.at("ring"), rank);
  auto& ulysses = comm.subgroup(layout.ulysses_members(), "ulysses");
  auto& ring = comm.subgroup(layout.ring_members(), "ring");
  auto rows = [&](const torch::Tensor& t) {  // (N, H, T, hd) -> (N, H, 2b/U, hd), padded rows zero
    return dist::mesh_rows(t.transpose(1, 2), layout, 0.0).transpose(1, 2).contiguous();
  };
  auto q = rows(in.q).requires_grad_(), k = rows(in.k).requires_grad_(), v = rows(in.v).requires_grad_();
  auto o = dist::mesh_attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(kHeadDim)), layout, ulysses,
                                ring, "attention", 0, job.value("window", 0));
  o.backward(rows(in.grad_out));
  torch::save(std::vector<torch::Tensor>{o.detach(), q.grad(), k.grad(), v.grad()},
              (out / fmt::format("mesh{}.pt", rank)).string());
  write_json(out / fmt::format("rank{}.json", rank),
             {{"ulysses", ulysses.stats().to_json()}, {"ring", ring.stats().to_json()}});
}
const bool mesh_piece_registered = register_rank_piece("mesh_attention", &mesh_piece);

struct MeshCase {
  int64_t ulysses, ring, seq_len, kv_heads, window = 0;
};

std::string mesh_label(const MeshCase& c) {
  return fmt::format("U{}_R{}_T{}_kv{}{}", c.ulysses, c.ring, c.seq_len, c.kv_heads,
                     c.window ? fmt::format("_w{}", c.window) : "");
}

// GoogleTest prints a failing case's parameter by its label, not as bytes.
void PrintTo(const MeshCase& c, std::ostream* os) {
  *os << mesh_label(c);
}

class MeshAttention : public ::testing::TestWithParam<MeshCase> {};

// On 4 Gloo ranks: 2 x 2 (T a multiple of 2RU, padded, one K/V head repeated to the Ulysses group, a sliding
// window), and the mesh's two ends, Ulysses alone (4 x 1) and the ring alone (1 x 4). Every rank's output
// and dQ, dK, dV rows equal whole-sequence causal attention's within 1e-12 relative, padded rows' gradients
// exactly zero; each Ulysses group runs 4 all-to-alls (q, k, v and the output, forward and backward), each
// ring group the ring's 3R - 2 send_recvs (none on one position).
TEST_P(MeshAttention, EveryRankMatchesWholeSequenceAttention) {
  const MeshCase& c = GetParam();
  TempDir tmp;
  const json job = {{"piece", "mesh_attention"}, {"seq_len", c.seq_len},
                    {"kv_heads", c.kv_heads},    {"seed", 5},
                    {"ulysses", c.ulysses},      {"ring", c.ring},
                    {"window", c.window},        {"out", tmp.dir().string()}};
  const int world = static_cast<int>(c.ulysses * c.ring);
  const LaunchResult run = launch_ranks(job, world);
  ASSERT_EQ(run.exit_code, 0) << run.error << rank_errors(tmp.dir(), world);
  const auto want = reference(inputs(c.seq_len, c.kv_heads, 5), c.window);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(fmt::format("rank {} of {}", r, world));
    std::vector<torch::Tensor> got;
    torch::load(got, (tmp.dir() / fmt::format("mesh{}.pt", r)).string());
    ASSERT_EQ(got.size(), 4u);
    const auto layout = dist::mesh_layout(c.seq_len, c.ulysses, c.ring, r);
    const int64_t n = layout.block / layout.ulysses;
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t start = layout.first_position(i), real = std::clamp<int64_t>(c.seq_len - start, 0, n);
      for (size_t t = 0; t < 4; ++t) {
        const auto mine = got[t].narrow(2, i * n, n);
        if (real > 0) {
          EXPECT_LT(relative(mine.narrow(2, 0, real), want[t].narrow(2, start, real)), 1e-12)
              << "tensor " << t << " (out, dq, dk, dv), rows from " << start;
        }
        if (t > 0 && real < n) {
          EXPECT_EQ(mine.narrow(2, real, n - real).abs().max().item<double>(), 0.0)
              << "padded rows, tensor " << t;
        }
      }
    }
    const json comm = json::parse(file_text(tmp.dir() / fmt::format("rank{}.json", r)));
    EXPECT_EQ(comm["ulysses"]["all_to_all"]["calls"], 4);
    EXPECT_EQ(comm["ulysses"]["send_recv"]["calls"], 0);
    EXPECT_EQ(comm["ring"]["all_to_all"]["calls"], 0);
    if (c.window == 0) {
      EXPECT_EQ(comm["ring"]["send_recv"]["calls"], c.ring > 1 ? 3 * c.ring - 2 : 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, MeshAttention,
                         ::testing::Values(MeshCase{2, 2, 16, 2}, MeshCase{2, 2, 13, 1},
                                           MeshCase{2, 2, 29, 2, 5}, MeshCase{4, 1, 13, 2},
                                           MeshCase{1, 4, 13, 2}),
                         [](const auto& info) { return mesh_label(info.param); });

// ---- the exchange itself, and a rank that dies ------------------------------------------------------------

void shift_piece(const json&, dist::Communicator& comm, const fs::path& out) {
  const int r = comm.rank(), P = comm.world_size();
  const auto before = comm.stats();
  auto got = comm.send_recv(torch::full({3, 5}, static_cast<double>(r), torch::kDouble), (r + 1) % P,
                            (r + P - 1) % P, "shift");
  write_json(out / fmt::format("rank{}.json", r), {{"received", got.mean().item<double>()},
                                                   {"exact", got.eq((r + P - 1) % P).all().item<bool>()},
                                                   {"comm", comm.stats().since(before).to_json()}});
}
const bool shift_piece_registered = register_rank_piece("shift", &shift_piece);

// Subgroups of 4 ranks, the 2-D mesh's: "pairs" {0, 1}, {2, 3} and "cross" {0, 2}, {1, 3}.
void subgroups_piece(const json&, dist::Communicator& comm, const fs::path& out) {
  const int r = comm.rank();
  const auto before = comm.stats();
  auto& pairs = comm.subgroup({r / 2 * 2, r / 2 * 2 + 1}, "pairs");
  auto& cross = comm.subgroup({r % 2, r % 2 + 2}, "cross");
  auto sum = torch::full({1}, static_cast<double>(r + 1), torch::kDouble);
  pairs.all_reduce(sum, dist::ReduceOp::sum, "sum");
  // Block j of the input goes to the subgroup's rank j: 10 r + j; what comes back from j is its block for me.
  auto blocks = torch::tensor({10.0 * r, 10.0 * r + 1}, torch::kDouble).view({2, 1});
  auto swapped = cross.all_to_all(blocks, "blocks");
  const int other = 1 - cross.rank();
  auto got = cross.send_recv(torch::full({3}, static_cast<double>(r), torch::kDouble), other, other, "swap");
  // Asked for again (the next step of a run): the same group, no second rendezvous on its store keys.
  const bool same = &comm.subgroup({r / 2 * 2, r / 2 * 2 + 1}, "pairs") == &pairs;
  std::string refusal;
  try {
    comm.subgroup({(r + 1) % 4}, "without me");
  } catch (const dist::CommError& e) {
    refusal = e.what();
  }
  write_json(out / fmt::format("rank{}.json", r),
             {{"pairs_rank", pairs.rank()},
              {"cross_rank", cross.rank()},
              {"sum", sum.item<double>()},
              {"swapped", {swapped[0].item<double>(), swapped[1].item<double>()}},
              {"received", got.mean().item<double>()},
              {"refusal", refusal},
              {"same", same},
              {"with_subgroups", comm.stats_with_subgroups().since(before).to_json()},
              {"pairs_comm", pairs.stats().to_json()},
              {"cross_comm", cross.stats().to_json()},
              {"comm", comm.stats().since(before).to_json()}});
}
const bool subgroups_piece_registered = register_rank_piece("subgroups", &subgroups_piece);

TEST(Subgroups, EachRunsItsOwnCollectivesCountedApart) {
  TempDir tmp;
  const LaunchResult run = launch_ranks({{"piece", "subgroups"}, {"out", tmp.dir().string()}}, 4);
  ASSERT_EQ(run.exit_code, 0) << run.error << rank_errors(tmp.dir(), 4);
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(fmt::format("rank {}", r));
    const json got = json::parse(file_text(tmp.dir() / fmt::format("rank{}.json", r)));
    const int pair_first = r / 2 * 2, partner = (r + 2) % 4;  // the pairs' first rank, the cross partner
    EXPECT_EQ(got["pairs_rank"], r % 2);
    EXPECT_EQ(got["cross_rank"], r / 2);
    EXPECT_EQ(got["sum"], (pair_first + 1) + (pair_first + 2));
    // From cross-rank j: its block number my cross rank, 10 j' + mine, j' its global rank.
    const int me = r / 2, first = r % 2, second = r % 2 + 2;
    EXPECT_EQ(got["swapped"][0], 10.0 * first + me);
    EXPECT_EQ(got["swapped"][1], 10.0 * second + me);
    EXPECT_EQ(got["received"], partner);
    EXPECT_NE(got["refusal"].get<std::string>().find(fmt::format(
                  "rank {} of 4 (gloo): subgroup 'without me' of ranks [{}] is not a list of distinct "
                  "ranks of 0..3 that holds this one",
                  r, (r + 1) % 4)),
              std::string::npos)
        << got["refusal"];
    EXPECT_EQ(got["pairs_comm"]["all_reduce"]["calls"], 1);
    EXPECT_EQ(got["cross_comm"]["all_to_all"]["calls"], 1);
    EXPECT_EQ(got["cross_comm"]["send_recv"]["calls"], 1);
    EXPECT_EQ(got["cross_comm"]["send_recv"]["bytes"], 3 * 8);
    EXPECT_EQ(got["comm"]["all_reduce"]["calls"], 0);  // the group's own counts: none of the subgroups'
    EXPECT_EQ(got["comm"]["all_to_all"]["calls"], 0);
    EXPECT_TRUE(got["same"].get<bool>());
    // The rank's traffic, whatever group carried it: the subgroups' counts summed into the group's.
    EXPECT_EQ(got["with_subgroups"]["all_reduce"]["calls"], 1);
    EXPECT_EQ(got["with_subgroups"]["all_to_all"]["calls"], 1);
    EXPECT_EQ(got["with_subgroups"]["send_recv"]["bytes"], 3 * 8);
  }
}

TEST(SendRecv, TheRingShiftDeliversTheLeftNeighboursTensorCountedOnce) {
  for (int world : {2, 3}) {
    TempDir tmp;
    const LaunchResult run = launch_ranks({{"piece", "shift"}, {"out", tmp.dir().string()}}, world);
    ASSERT_EQ(run.exit_code, 0) << run.error << rank_errors(tmp.dir(), world);
    for (int r = 0; r < world; ++r) {
      const json got = json::parse(file_text(tmp.dir() / fmt::format("rank{}.json", r)));
      EXPECT_EQ(got["received"], (r + world - 1) % world) << "rank " << r << " of " << world;
      EXPECT_TRUE(got["exact"].get<bool>());
      EXPECT_EQ(got["comm"]["send_recv"]["calls"], 1);
      EXPECT_EQ(got["comm"]["send_recv"]["bytes"], 15 * 8);
      EXPECT_EQ(got["comm"]["send_recv"]["wire_bytes"], 15 * 8);
      EXPECT_EQ(got["comm"]["send_recv"]["physical"], "send_recv");
    }
  }
}

TEST(RingFailure, ARankThatDiesMidRingEndsTheOthersWithOneLine) {
  TempDir tmp;
  json job = ring_job({3, 12, 2});
  job["die_rank"] = 1;
  job["out"] = tmp.dir().string();
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult run = launch_ranks(job, 3, {{"BPBENCH_DIST_TIMEOUT_S", "20"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(seconds, 60.0);
  EXPECT_NE(run.error.find("rank 1 of 3"), std::string::npos) << run.error;
  for (int r : {0, 2}) {
    const std::string err = file_text(tmp.dir() / fmt::format("rank{}.error", r));
    EXPECT_NE(err.find(fmt::format("rank {} of 3 (gloo): send_recv 'attention K/V (to rank", r)),
              std::string::npos)
        << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
  }
}

}  // namespace
}  // namespace bpbench::testing::test_ring_attention
