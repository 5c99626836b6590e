// test_sequence_parallel.cpp: Ulysses sequence parallelism (impls/machinery/sequence_parallel.h): ulysses and
// streambp-ulysses on 2 and 4 Gloo ranks, each a process (tests/support/dist_ranks.h), against single-process
// plain BP on the same whole sequences, float64.
//
//   SequenceParallelLayout   the layout, the refusals and shard_batch, in one process.
//   SequenceParallelExactness  every parameter's gathered gradient and the loss equal plain BP's to 1e-10:
//                   SFT, DPO, GRPO, LoRA, tied embeddings, GQA with Hkv < P (tiny with 1 K/V head;
//                   tiny-gemma3 with 2 K/V heads on 4 ranks, sliding windows of 5), T = 13 (padded: 14 on 2
//                   ranks, 16 on 4) and T = 12, shard_params. Collectives of the step, exactly: 6 L
//                   all_to_alls, L + 2 reduce_scatters, 2 all_reduces (DPO: 3).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "impls/machinery/dist_common.h"
#include "impls/machinery/sequence_parallel.h"
#include "tests/support/dist_ranks.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_sequence_parallel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kTol = 1e-10;

TEST(SequenceParallelLayout, RanksSplitHeadsAndRowsOrAreRefusedByName) {
  const ModelConfig tiny = find_model_preset("tiny");  // Hq 4, Hkv 2
  const auto four = dist::sequence_layout(tiny, 13, 4, 3);
  EXPECT_EQ(four.rows, 4);
  EXPECT_EQ(four.padded(), 16);
  EXPECT_EQ(four.first_row(), 12);
  EXPECT_EQ(four.q_heads, 1);
  EXPECT_EQ(four.kv_repeat, 2);  // 2 K/V heads repeated to 4, one per rank
  EXPECT_EQ(four.kv_heads, 1);
  const auto two = dist::sequence_layout(tiny, 12, 2, 1);
  EXPECT_EQ(two.rows, 6);
  EXPECT_EQ(two.kv_repeat, 1);
  EXPECT_EQ(two.kv_heads, 1);
  const auto why = dist::sequence_parallel_refusal(tiny, 3);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(
      *why,
      "3 ranks cannot split tiny's attention by heads (4 query heads, 2 K/V heads: the ranks must divide "
      "the query heads, and divide the K/V heads or be a multiple of them); valid rank counts: 1, 2, 4");
  EXPECT_THROW(dist::sequence_layout(tiny, 13, 8, 0), std::invalid_argument);
}

TEST(SequenceParallelLayout, ShardBatchPadsTheLastSliceWithIgnoredRows) {
  Model model = tiny_model({2, false});
  auto grpo = make_objective("grpo");
  BatchSpec spec;
  spec.examples = 1;
  spec.group = 2;
  spec.seq_len = 13;
  spec.prompt_len = 4;
  spec.seed = 3;
  spec.vocab = model.config.vocab;
  const Batch global = grpo->make_batch(spec, model, 13);
  int64_t tokens = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const Batch b = dist::shard_batch(global, r, 4);
    EXPECT_EQ(b.seq_len(), 4);
    EXPECT_EQ(b.first_position, 4 * r);
    EXPECT_EQ(b.whole_seq_len, 13);
    const int64_t real = std::min<int64_t>(4, 13 - 4 * r);
    EXPECT_TRUE(b.input_ids.narrow(1, 0, real).equal(global.input_ids.narrow(1, 4 * r, real)));
    EXPECT_TRUE(b.old_logps.narrow(1, 0, real).equal(global.old_logps.narrow(1, 4 * r, real)));
    EXPECT_TRUE(b.advantages.equal(global.advantages));
    if (real < 4) {
      EXPECT_TRUE(b.targets.narrow(1, real, 4 - real).eq(kIgnoreIndex).all().item<bool>());
      EXPECT_TRUE(b.input_ids.narrow(1, real, 4 - real).eq(0).all().item<bool>());
    }
    tokens += b.loss_tokens;
  }
  EXPECT_EQ(tokens, global.loss_tokens);
}

struct SpCase {
  std::string impl, objective;
  int world;
  std::string model = "tiny";
  int64_t kv_heads = 2, lora_rank = 0, seq_len = kDistT;
  bool tied = false, shard_params = false;
  double aux = 0.0;  // router_aux_loss_coef: the routers' load-balancing loss on where > 0
};

std::string label(const SpCase& c) {
  return fmt::format("{}_{}_w{}{}{}{}{}{}{}{}", c.impl == "ulysses" ? "ulysses" : "streambp", c.objective,
                     c.world, preset_suffix(c.model), c.kv_heads != 2 ? fmt::format("_kv{}", c.kv_heads) : "",
                     c.lora_rank ? "_lora" : "", c.seq_len != kDistT ? fmt::format("_T{}", c.seq_len) : "",
                     c.tied ? "_tied" : "", c.shard_params ? "_shard" : "", c.aux > 0 ? "_aux" : "");
}
std::string case_name(const ::testing::TestParamInfo<SpCase>& info) {
  return label(info.param);
}
void PrintTo(const SpCase& c, std::ostream* os) {
  *os << label(c);
}

class SequenceParallelExactness : public ::testing::TestWithParam<SpCase> {};

json exactness_job(const SpCase& c) {
  return {{"impl", c.impl},
          {"objective", c.objective},
          {"model", c.model},
          {"dtype", "float64"},
          {"kv_heads", c.kv_heads},
          {"lora_rank", c.lora_rank},
          {"seq_len", c.seq_len},
          {"tied", c.tied},
          {"shard_params", c.shard_params},
          {"router_aux_loss_coef", c.aux},
          {"warmup", c.shard_params ? 1 : 0}};  // the second step runs on an already sharded model
}

std::vector<SpCase> exactness_cases();

const std::string kExactnessTest = "GatheredGradientsEqualPlainOnTheWholeSequences";

TEST_P(SequenceParallelExactness, GatheredGradientsEqualPlainOnTheWholeSequences) {
  const SpCase& c = GetParam();
  const std::string name = kExactnessTest + "/" + label(c);
  const SharedLaunch& launch =
      shared_launch(rank_cases_of(kExactnessTest, exactness_cases(), label, exactness_job), c.world);
  ASSERT_TRUE(launch.ran(name, c.world));
  const fs::path dir = launch.dir_of(name);
  const Model model = expect_plain_on_whole_sequences(exactness_job(c), dir, c.world, kTol, label(c));
  const json r0 = json::parse(file_text(dir / "rank0.json"));
  EXPECT_TRUE(r0.at("params_restored").get<bool>()) << "restore_parameters";
  EXPECT_TRUE(r0.at("grads_loaded").get<bool>()) << "load_full_gradients";

  const int64_t L = model.config.layers;
  const json& comm = r0.at("comm");
  EXPECT_EQ(comm["all_to_all"]["calls"], 6 * L) << comm.dump();
  // On latent attention both gather each layer's latent rows in the forward and again in the backward, and
  // reduce-scatter their gradient (sequence_parallel.h, latent_travels).
  const dist::SequenceLayout layout = dist::sequence_layout(model.config, c.seq_len, c.world, 0);
  const int64_t latent = dist::latent_travels(model.config, layout) ? L : 0;
  EXPECT_EQ(comm["reduce_scatter"]["calls"], (model.has_lora() ? L : L + 2) + latent) << comm.dump();
  // Loss normalisers and loss, DPO's sequence sums, the routers' counts where the load-balancing loss is on.
  EXPECT_EQ(comm["all_reduce"]["calls"], 2 + (c.objective == "dpo" ? 1 : 0) + (c.aux > 0 ? 1 : 0))
      << comm.dump();
  EXPECT_EQ(comm["all_gather"]["calls"], (c.shard_params ? 2 * L : 0) + 2 * latent) << comm.dump();
  if (latent == 0) expect_collectives_as_estimated(comm, exactness_job(c), model, c.world, label(c));
}

std::vector<SpCase> exactness_cases() {
  std::vector<SpCase> cases;
  for (const std::string impl : {"ulysses", "streambp-ulysses"}) {
    for (int world : {2, 4})
      for (const std::string objective : {"sft", "dpo", "grpo"}) cases.push_back({impl, objective, world});
    SpCase lora{impl, "sft", 4};
    lora.lora_rank = 3;
    cases.push_back(lora);
    SpCase lora_dpo{impl, "dpo", 2};
    lora_dpo.lora_rank = 3;
    cases.push_back(lora_dpo);
    for (int world : {2, 4}) {  // one K/V head: Hkv < P, repeated to P
      SpCase gqa{impl, "sft", world};
      gqa.kv_heads = 1;
      cases.push_back(gqa);
    }
    SpCase gemma{impl, "sft", 4, "tiny-gemma3"};  // sliding windows, Hkv = 2 < P = 4
    cases.push_back(gemma);
    SpCase gemma_dpo{impl, "dpo", 2, "tiny-gemma3"};
    cases.push_back(gemma_dpo);
    cases.push_back(SpCase{impl, "sft", 4, "tiny-moe"});      // mixture-of-experts layers on each rank's rows
    cases.push_back(SpCase{impl, "sft", 4, "tiny-olmo3"});    // no input norms, q/k normed over all heads
    cases.push_back(SpCase{impl, "dpo", 2, "tiny-smollm3"});  // NoPE layers
    cases.push_back(SpCase{impl, "sft", 4, "tiny-gpt-oss"});  // sinks sliced to each rank's one query head
    // Latent attention, one query head a rank (ulysses: the latent gathered, each rank's heads expanded).
    cases.push_back(SpCase{impl, "sft", 4, "tiny-deepseek"});
    cases.push_back(SpCase{impl, "dpo", 2, "tiny-deepseek"});
    SpCase latent_lora{impl, "sft", 2, "tiny-deepseek"};
    latent_lora.lora_rank = 3;  // kv_b's B split by heads, its A shared
    cases.push_back(latent_lora);
    cases.push_back(SpCase{impl, "sft", 2, "tiny-glm4-moe"});  // partial RoPE, q/k norms, biases
    SpCase moe_lora{impl, "grpo", 2, "tiny-moe"};
    moe_lora.lora_rank = 3;  // on attention and every expert
    cases.push_back(moe_lora);
    SpCase even{impl, "sft", 4};
    even.seq_len = 12;
    cases.push_back(even);
    // The load-balancing loss: every rank's rows counted, their counts summed (T divisible by P).
    SpCase aux{impl, impl == "ulysses" ? "sft" : "grpo", impl == "ulysses" ? 2 : 4, "tiny-moe"};
    aux.seq_len = 12;
    aux.aux = 0.5;
    cases.push_back(aux);
    SpCase tied{impl, "sft", 2};
    tied.tied = true;
    cases.push_back(tied);
    SpCase shard{impl, "sft", 2};
    shard.shard_params = true;
    cases.push_back(shard);
  }
  return cases;
}

// Under MLA the latent travels where it is the smaller: r + dr = 576 values a token against 2 Hq' hd.
TEST(SequenceParallelLatent, TheLatentTravelsWhereItIsTheSmaller) {
  auto travels = [](const char* preset, int64_t ranks) {
    const ModelConfig c = find_model_preset(preset);
    return dist::latent_travels(c, dist::sequence_layout(c, 4096, ranks, 0));
  };
  EXPECT_TRUE(travels("deepseek-v3", 8));         // 16 heads a rank: 6,144 values
  EXPECT_TRUE(travels("deepseek-v3", 64));        // 2 heads: 768
  EXPECT_FALSE(travels("deepseek-v3", 128));      // 1 head: 384
  EXPECT_TRUE(travels("deepseek-v2-lite", 8));    // 2 heads: 768
  EXPECT_FALSE(travels("deepseek-v2-lite", 16));  // 1 head: 384
  EXPECT_FALSE(travels("qwen3-8b", 8));           // no latent
}

// T not divisible by P (the ring: 2P) pads rows, which the load-balancing loss would count: such a cell is
// skipped with the reason, one without padding runs.
TEST(SequenceParallelRefusal, TheLoadBalancingLossNeedsTDivisibleByTheRanks) {
  const ModelConfig moe = find_model_preset("tiny-moe");
  for (const auto& [impl, multiple] :
       std::vector<std::pair<std::string, int>>{{"ulysses", 2}, {"streambp-ulysses", 2}, {"ring", 4}}) {
    const auto strategy = make_strategy(impl);
    CellTraits traits{"sft", 2, &moe};
    traits.router_balance = true;
    traits.seq_len = 13;
    const auto why = strategy->unsupported(traits);
    ASSERT_TRUE(why.has_value()) << impl;
    EXPECT_NE(why->find(fmt::format("needs T divisible by {} (T = 13 is padded by {} row(s)", multiple,
                                    multiple - 13 % multiple)),
              std::string::npos)
        << *why;
    traits.seq_len = 12;
    EXPECT_FALSE(strategy->unsupported(traits).has_value()) << impl;
    traits.seq_len = 13;
    traits.router_balance = false;
    EXPECT_FALSE(strategy->unsupported(traits).has_value()) << impl;
  }
}

// Two "nodes" of two ranks with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT): the rendezvous spans both, and the step is the same. Ulysses'
// all-to-alls and the ring's neighbour exchanges (ranks 1 and 3 send across the "nodes") alike.
TEST(SequenceParallelLaunch, TwoNodesOfTwoRanksWithTorchrunsVariables) {
  for (const char* impl : {"streambp-ulysses", "ring"}) {
    TempDir tmp;
    const json job = {{"impl", impl},
                      {"objective", "sft"},
                      {"dtype", "float64"},
                      {"nodes", 2},
                      {"out", tmp.dir().string()}};
    const LaunchResult run = launch_ranks(job, 4);
    ASSERT_EQ(run.exit_code, 0) << impl << ": " << run.error << "\n" << rank_errors(tmp.dir(), 4);
    for (int r = 0; r < 4; ++r) {
      const json rr = json::parse(file_text(tmp.dir() / fmt::format("rank{}.json", r)));
      EXPECT_EQ(rr.at("local_rank"), r % 2) << impl << " rank " << r;
      EXPECT_EQ(rr.at("node"), r / 2) << impl << " rank " << r;
    }
    Model model = dist_job_model(job);
    const Batch global = dist_job_global_batch(job, model, 4);
    const StepResult ref = run_step("plain", model, global, *make_objective("sft"), {kDistT, kDistT});
    const StepResult got = rank0_step(tmp.dir());
    expect_same_gradients(ref, got, kTol, fmt::format("{} on 2 nodes x 2 ranks", impl));
  }
}

// A rank that dies in its LM head (after the forward's all-to-alls): the others fail on their own within the
// timeout, each with one line naming itself and the collective it was in.
TEST(SequenceParallelLaunch, DeadRankEndsTheStepWithAOneLineError) {
  TempDir tmp;
  const json job = {
      {"impl", "streambp-ulysses"}, {"objective", "sft"}, {"die_rank", 1}, {"out", tmp.dir().string()}};
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult run = launch_ranks(job, 4, {{"BPBENCH_DIST_TIMEOUT_S", "20"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(run.exit_code, 0);
  EXPECT_LT(seconds, 60.0);
  EXPECT_NE(run.error.find("rank 1 of 4"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("exited with status 7"), std::string::npos) << run.error;
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(run.ranks[r].signal, 0) << run.ranks[r].describe();
    const std::string err = file_text(tmp.dir() / fmt::format("rank{}.error", r));
    EXPECT_NE(err.find(fmt::format("rank {} of 4 (gloo)", r)), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), err.size() - 1) << "one line: " << err;
  }
}

INSTANTIATE_TEST_SUITE_P(Gloo, SequenceParallelExactness, ::testing::ValuesIn(exactness_cases()), case_name);

}  // namespace
}  // namespace bpbench::testing::test_sequence_parallel
