// test_ring.cpp: the ring strategies (impls/ring.cpp, impls/streambp_ring.cpp) on 2, 3 and 4 Gloo ranks, each
// a process (tests/support/dist_ranks.h), against single-process plain BP on the same whole sequences,
// float64.
//
//   RingExactness   every parameter's gathered gradient and the loss equal plain BP's to 1e-10, for ring and
//                   streambp-ring (chunks of 2 rows: several in each block): SFT, DPO, GRPO on 2, 3 (which
//                   Ulysses cannot split tiny's 4 heads over) and 4 ranks; T = 13, padded on every P (to 16,
//                   18, 16), and T = 12 and 16, multiples of 2P; LoRA, tied embeddings, one K/V head,
//                   mixture-of-experts layers and their load-balancing loss, Gemma 3's sliding windows (round
//                   the ring, and on 4 ranks at T = 40 with the unneeded step never sent). Collectives of the
//                   step, exactly: L (4P - 3) send_recvs (a windowed layer that skips steps: 4 a needed
//                   step), no all_to_all, L + 2 reduce_scatters (LoRA: L), 2 all_reduces (DPO: 3; the
//                   load-balancing loss: one more); streambp-ring's forward with grad and backward once per
//                   K/V head (its passes), so L (P - 1 + Hkv (3P - 2)) send_recvs. Every kind's calls and
//                   bytes equal the collectives' estimate (estimate_comm.h).
//                   The 2-D mesh on 4 ranks as 2 x 2 (ulysses_degree 2): the same, with 6 all_to_alls a
//                   layer.
//   RingRefusal     shard_params, a ulysses_degree that does not divide the ranks or split the heads, and a
//                   ulysses_degree above 1 for a strategy off the ring: skipped cells with the reason;
//                   windowed models run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/ring_attention.h"
#include "tests/support/dist_ranks.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_ring {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kTol = 1e-10;

struct RingCase {
  std::string impl;
  std::string objective;
  int world;
  std::string model = "tiny";
  int64_t kv_heads = 2, lora_rank = 0, seq_len = kDistT;
  bool tied = false;
  double aux = 0.0;  // router_aux_loss_coef
  // tiny-gemma3's sliding layers (a window of 5): the steps whose pairs some rank needs, when not all of
  // them (then each goes straight to its ranks: 4 send_recvs a step and layer, against 4P - 3 round the
  // ring).
  int64_t window_steps = 0;
  int64_t ulysses = 1;  // the 2-D mesh: Ulysses over groups of U ranks inside ring groups of world / U
};

std::string label(const RingCase& c) {
  return fmt::format("{}{}_w{}{}{}{}{}{}{}{}", c.impl == "ring" ? "" : "streambp_", c.objective, c.world,
                     c.ulysses > 1 ? fmt::format("_U{}", c.ulysses) : "", preset_suffix(c.model),
                     c.kv_heads != 2 ? fmt::format("_kv{}", c.kv_heads) : "", c.lora_rank ? "_lora" : "",
                     c.seq_len != kDistT ? fmt::format("_T{}", c.seq_len) : "", c.tied ? "_tied" : "",
                     c.aux > 0 ? "_aux" : "");
}

// GoogleTest prints a failing case's parameter by its label, not as bytes.
void PrintTo(const RingCase& c, std::ostream* os) {
  *os << label(c);
}

json ring_job(const RingCase& c) {
  // streambp-ring in chunks of 2 rows: several chunks in every block (b = 3 or 4).
  return {{"impl", c.impl},       {"objective", c.objective}, {"model", c.model},
          {"dtype", "float64"},   {"kv_heads", c.kv_heads},   {"lora_rank", c.lora_rank},
          {"seq_len", c.seq_len}, {"tied", c.tied},           {"router_aux_loss_coef", c.aux},
          {"warmup", 0},          {"partition", 2},           {"ulysses_degree", c.ulysses}};
}

std::vector<RingCase> ring_cases() {
  std::vector<RingCase> cases;
  for (const std::string impl : {"ring", "streambp-ring"}) {
    for (int world : {2, 3, 4})
      for (const std::string objective : {"sft", "dpo", "grpo"}) cases.push_back({impl, objective, world});
    for (const auto& [world, T] : std::vector<std::pair<int, int64_t>>{{2, 12}, {3, 12}, {4, 16}}) {
      RingCase even{impl, "sft", world};
      even.seq_len = T;  // a multiple of 2P: no padding row
      cases.push_back(even);
    }
    RingCase lora{impl, "sft", 3};
    lora.lora_rank = 3;
    cases.push_back(lora);
    RingCase lora_dpo{impl, "dpo", 2};
    lora_dpo.lora_rank = 3;
    cases.push_back(lora_dpo);
    RingCase tied{impl, "sft", 2};
    tied.tied = true;
    cases.push_back(tied);
    RingCase gqa{impl, "grpo", 3};
    gqa.kv_heads = 1;
    cases.push_back(gqa);
    cases.push_back(RingCase{impl, "sft", 3, "tiny-moe"});
    RingCase aux{impl, "grpo", 3, "tiny-moe"};
    aux.seq_len = 12;
    aux.aux = 0.5;
    cases.push_back(aux);
    // Sliding windows of 5 keys: at T = 13 every step's pair is needed by some rank (round the ring); at
    // T = 40 on 4 ranks (b = 5) a query block sees its own block and the one before only, which on the zigzag
    // layout rank r gets at steps 1 (block r - 1) and 3 (block 6 - r, rank r + 1's): step 2 is never sent.
    cases.push_back(RingCase{impl, "sft", 2, "tiny-gemma3"});
    cases.push_back(RingCase{impl, "dpo", 3, "tiny-gemma3"});
    RingCase direct{impl, "sft", 4, "tiny-gemma3"};
    direct.seq_len = 40;
    direct.window_steps = 2;
    cases.push_back(direct);
    RingCase direct_lora{impl, "grpo", 4, "tiny-gemma3"};
    direct_lora.seq_len = 40;
    direct_lora.window_steps = 2;
    direct_lora.lora_rank = 3;
    cases.push_back(direct_lora);
    // The 2-D mesh on 4 ranks, 2 x 2: T = 13 padded to 16 (b = 4, each rank 2 rows of each block), T = 16
    // unpadded, and the objectives, LoRA, tied embeddings, one K/V head (repeated to the Ulysses pair), MoE
    // and windows.
    auto mesh = [&](RingCase c) {
      c.ulysses = 2;
      cases.push_back(c);
    };
    for (const std::string objective : {"sft", "dpo", "grpo"}) mesh({impl, objective, 4});
    RingCase mesh_even{impl, "sft", 4};
    mesh_even.seq_len = 16;
    mesh(mesh_even);
    RingCase mesh_lora{impl, "dpo", 4};
    mesh_lora.lora_rank = 3;
    mesh(mesh_lora);
    RingCase mesh_tied{impl, "sft", 4};
    mesh_tied.tied = true;
    mesh(mesh_tied);
    RingCase mesh_gqa{impl, "grpo", 4};
    mesh_gqa.kv_heads = 1;
    mesh(mesh_gqa);
    mesh(RingCase{impl, "sft", 4, "tiny-moe"});
    mesh(RingCase{impl, "sft", 4, "tiny-gemma3"});
    // OLMo 3 (no input norms, q/k normed over all heads before the exchange, sliding layers) and SmolLM3
    // (NoPE layers).
    cases.push_back(RingCase{impl, "sft", 2, "tiny-olmo3"});
    cases.push_back(RingCase{impl, "dpo", 4, "tiny-smollm3"});
    mesh(RingCase{impl, "grpo", 4, "tiny-olmo3"});
    // gpt-oss: attention sinks merged after the ring's pieces (and, on the mesh, sliced to the Ulysses
    // rank's heads), sliding and full layers, its experts.
    cases.push_back(RingCase{impl, "sft", 2, "tiny-gpt-oss"});
    mesh(RingCase{impl, "dpo", 4, "tiny-gpt-oss"});
    // DeepSeek's latent attention in the expanded form (K and V per head, V zero-padded) around the ring and
    // through the mesh's exchange; its grouped sigmoid routing, shared expert and dense first layer.
    cases.push_back(RingCase{impl, "dpo", 2, "tiny-deepseek"});
    mesh(RingCase{impl, "sft", 4, "tiny-deepseek"});
    cases.push_back(RingCase{impl, "sft", 2, "tiny-glm4-moe"});  // partial RoPE on each rank's blocks
  }
  return cases;
}

class RingExactness : public ::testing::TestWithParam<RingCase> {};

const std::string kExactnessTest = "GatheredGradientsEqualPlainOnTheWholeSequences";

TEST_P(RingExactness, GatheredGradientsEqualPlainOnTheWholeSequences) {
  const RingCase& c = GetParam();
  const std::string name = kExactnessTest + "/" + label(c);
  const SharedLaunch& launch =
      shared_launch(rank_cases_of(kExactnessTest, ring_cases(), label, ring_job), c.world);
  ASSERT_TRUE(launch.ran(name, c.world));
  const fs::path dir = launch.dir_of(name);
  const Model model = expect_plain_on_whole_sequences(ring_job(c), dir, c.world, kTol, label(c));
  const json r0 = json::parse(file_text(dir / "rank0.json"));
  const json& comm = r0.at("comm");  // the step's, its mesh subgroups' included
  expect_collectives_as_estimated(comm, ring_job(c), model, c.world, label(c));
  // By hand, per layer: the no-grad forward, the forward with grad and the backward; streambp-ring's last
  // two in one pass a K/V head on the plain ring (G = Hkv passes), ring's and the mesh's in one.
  const int64_t L = model.config.layers, R = c.world / c.ulysses;  // R: ranks round a ring
  const int64_t G = c.impl == "streambp-ring" && c.ulysses == 1 ? model.config.kv_heads : 1;
  int64_t exchanges = 0;
  for (int64_t i = 0; i < L; ++i) {
    const bool direct = model.config.window_of(i) > 0 && c.window_steps > 0;
    const int64_t forward = direct ? c.window_steps : R - 1,
                  backward = direct ? 2 * c.window_steps : 2 * R - 1;
    exchanges += forward + G * (forward + backward);
  }
  EXPECT_EQ(comm["send_recv"]["calls"], exchanges) << comm.dump();
  // The mesh: into and out of each of the layer's three attention calls (two forward, one backward).
  EXPECT_EQ(comm["all_to_all"]["calls"], c.ulysses > 1 ? 6 * L : 0) << comm.dump();
}

INSTANTIATE_TEST_SUITE_P(Gloo, RingExactness, ::testing::ValuesIn(ring_cases()),
                         [](const auto& info) { return label(info.param); });

// Every sharding runs on the rings (zero3 too: tests/run/test_train_distributed.cpp); what they refuse is a
// mesh that does not fit.
TEST(RingRefusal, TheMeshOutsideItsRanksOrHeadsIsSkippedWithTheReason) {
  const ModelConfig tiny = find_model_preset("tiny");  // 4 query heads: 3 ranks cannot split them by heads
  const ModelConfig gemma = find_model_preset("tiny-gemma3");
  for (const std::string impl : {"ring", "streambp-ring"}) {
    const auto ring = make_strategy(impl);
    EXPECT_FALSE(ring->unsupported(CellTraits{"sft", 3, &tiny}).has_value()) << impl;
    EXPECT_FALSE(ring->unsupported(CellTraits{"sft", 2, &gemma}).has_value()) << impl;
    dist::DistOptions sharded;
    sharded.shard_params = true;
    const auto sharded_ring = make_distributed_strategy(impl, sharded);
    EXPECT_FALSE(sharded_ring->unsupported(CellTraits{"sft", 2, &tiny}).has_value()) << impl;
    // The mesh: U must divide the ranks and split the heads (tiny: 4 query heads, 2 K/V heads).
    auto meshed = [&](int64_t U) {
      dist::DistOptions options;
      options.ulysses_degree = U;
      return make_distributed_strategy(impl, options);
    };
    EXPECT_FALSE(meshed(2)->unsupported(CellTraits{"sft", 4, &tiny}).has_value()) << impl;
    EXPECT_FALSE(meshed(4)->unsupported(CellTraits{"sft", 4, &tiny}).has_value()) << impl;
    EXPECT_EQ(meshed(2)->unsupported(CellTraits{"sft", 3, &tiny}).value_or(""),
              impl + ": ulysses_degree 2 does not divide world_size 3 (valid for tiny: 1)");
    EXPECT_EQ(meshed(3)->unsupported(CellTraits{"sft", 6, &tiny}).value_or(""),
              impl +
                  ": ulysses_degree 3 cannot split tiny's attention by heads (4 query heads, 2 K/V heads: U "
                  "must divide the query heads, and divide the K/V heads or be a multiple of them; valid on "
                  "6 ranks: 1, 2)");
  }
  dist::DistOptions options;
  options.ulysses_degree = 2;
  const auto why =
      make_distributed_strategy("streambp-ulysses", options)->unsupported(CellTraits{"sft", 4, &tiny});
  EXPECT_EQ(
      why.value_or(""),
      "streambp-ulysses: ulysses_degree 2 is the 2-D mesh of the ring strategies (ring, streambp-ring); "
      "streambp-ulysses runs with ulysses_degree 1");
}

TEST(RingLayout, ZigzagBatchHoldsBlocksRAnd2PMinus1MinusR) {
  Model model = tiny_model({2, false});
  auto sft = make_objective("sft");
  BatchSpec spec;
  spec.examples = 1;
  spec.seq_len = 13;
  spec.seed = 3;
  spec.vocab = model.config.vocab;
  const Batch global = sft->make_batch(spec, model, 13);
  int64_t tokens = 0;
  for (int64_t r = 0; r < 3; ++r) {  // b = 3, T' = 18: positions 13..17 padding
    const Batch b = dist::zigzag_batch(global, r, 3);
    const auto layout = dist::zigzag_layout(13, 3, r);
    EXPECT_EQ(b.seq_len(), 6);
    EXPECT_EQ(b.whole_seq_len, 13);
    for (int64_t i = 0; i < 2; ++i) {
      const int64_t start = layout.first_position(i), real = std::clamp<int64_t>(13 - start, 0, 3);
      EXPECT_EQ(start, i == 0 ? 3 * r : 3 * (5 - r));
      if (real > 0)
        EXPECT_TRUE(b.input_ids.narrow(1, 3 * i, real).equal(global.input_ids.narrow(1, start, real)));
      if (real < 3)
        EXPECT_TRUE(b.targets.narrow(1, 3 * i + real, 3 - real).eq(kIgnoreIndex).all().item<bool>());
    }
    tokens += b.loss_tokens;
  }
  EXPECT_EQ(tokens, global.loss_tokens);
}

}  // namespace
}  // namespace bpbench::testing::test_ring
