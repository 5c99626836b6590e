// test_moe_exactness.cpp: mixture-of-experts layers (Qwen3-MoE, Mixtral) under every strategy.
//   - the experts' MLP is each row's k chosen experts weighted by the router, computed row by row here
//     (dropless: no row dropped, however many choose one expert), and its counted FLOPs are the router's and
//     k experts' per row;
//   - every strategy equals plain BP in float64 (loss and every gradient, router and experts included,
//     relative error < 1e-10): E = 8, k = 2 and 3, T prime, partitions of 1, 5 and T rows (5 splits the rows
//     of one expert across chunks; checked), tied and untied heads, renormalised top-k or not, a dense layer
//     among sparse ones (mlp_only_layers), SFT, DPO and GRPO, LoRA on attention and experts, offloaded
//     checkpoints, the routers' load-balancing loss on and off;
//   - that loss, in plain BP, is the one written out here from the routers' logits (the gradient the hook
//     adds is autograd's of that loss), and it is zero-cost when off;
//   - each strategy's counted FLOPs equal estimate_flops' (the router and k experts a row).
// transformers' own Qwen3-MoE and Mixtral: tests/model/test_hf_oracle.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "harness/estimate/estimate.h"
#include "harness/estimate/estimate_flops.h"
#include "harness/model/flop_count.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_moe_exactness {
namespace {

constexpr int64_t kT = 13;  // prime
constexpr double kTol = 1e-10;

struct MoeShape {
  int64_t k = 2;
  bool tied = false;
  bool norm_topk = false;
  bool dense_first_layer = false;  // layer 0 keeps a dense MLP (mlp_only_layers = [0])
  bool lora = false;
  double aux = 0.0;  // router_aux_loss_coef: the load-balancing loss on where > 0
};

// tiny-moe (E = 8, Ie = 12) in float64, norms off the identity and router weights spread (spread_routers).
Model moe_model(const MoeShape& s) {
  ModelConfig c = find_model_preset("tiny-moe");
  c.experts_per_token = s.k;
  c.tie_embeddings = s.tied;
  c.norm_topk_prob = s.norm_topk;
  if (s.dense_first_layer) c.dense_layers = {0};
  Model m = Model::random(c, torch::TensorOptions().dtype(torch::kDouble), 7);
  m.router_balance = std::make_shared<RouterBalance>(s.aux);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  for (auto& p : m.named_parameters())
    if (p.group == ParamGroup::norms) p.tensor.add_(0.1 * torch::randn(p.tensor.sizes(), p.tensor.options()));
  spread_routers(m, 10);
  if (s.lora) {
    m.add_lora(/*rank=*/2, /*alpha=*/4.0, /*seed=*/3);
    torch::manual_seed(9);  // B at zero would make dL/dA zero: exercise both
    for (auto& p : m.trainable_parameters())
      if (p.name.find("lora_B") != std::string::npos) p.tensor.normal_(0.0, 0.05);
  }
  return m;
}

Batch batch_for(const std::string& objective, Model& m) {
  return make_objective(objective)->make_batch(padded_batch_spec(objective, m.config.vocab, kT, 8), m, 5);
}

// The model's forward over the batch, piece by piece as plain's: the last layer's output (N, T, d) and each
// routed layer's softmax probabilities (N T, E) (undefined for a dense layer), with grad where the caller
// has it on.
struct RoutedForward {
  torch::Tensor output;
  std::vector<torch::Tensor> probabilities;
};
RoutedForward routed_forward(const Model& m, const Batch& batch) {
  RoutedForward f;
  auto x = m.embed(batch.input_ids);  // (N, T, d)
  for (int64_t i = 0; i < m.config.layers; ++i) {
    const auto h = m.attn_norm(i, x);
    x = m.attention_block(i, x, m.project_q(i, h, 0, kT), m.project_kv(i, h));
    torch::Tensor p;
    if (m.config.is_moe_layer(i)) {
      const auto n = m.norm(x, m.layers[i].mlp_norm).reshape({-1, m.config.hidden});
      p = torch::softmax(torch::nn::functional::linear(n, m.layers[i].router), -1);
    }
    f.probabilities.push_back(p);
    x = m.mlp_block(i, x);
  }
  f.output = x;
  return f;
}

// Layer 1's routing of the batch's rows: the experts each row chose, as plain's forward computes them.
torch::Tensor routing_of(const Model& m, const Batch& batch) {
  torch::NoGradGuard no_grad;
  const int64_t k = m.config.experts_per_token;
  return std::get<1>(routed_forward(m, batch).probabilities[1].topk(k, -1))
      .view({batch.sequences(), kT, k});  // (N, T, k)
}

TEST(ExpertsMlp, IsEachRowsChosenExpertsWeightedByTheRouter) {
  for (const bool norm_topk : {false, true}) {
    const Model m = moe_model({/*k=*/3, false, norm_topk});
    torch::manual_seed(1);
    const auto n = torch::randn({2, 9, m.config.hidden}, torch::kDouble);  // (N, rows, d)
    const auto& w = m.layers[1];
    torch::Tensor got;
    int64_t forward_matmul = 0;
    {
      FlopCounter counter;
      got = m.experts_mlp(1, n);
      forward_matmul = counter.counts().forward_matmul;
    }
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t r = 0; r < 9; ++r) {
        const auto row = n[b][r];  // (d)
        const auto probs = torch::softmax(torch::mv(w.router, row), 0);
        auto [top, experts] = probs.topk(3);
        if (norm_topk) top = top / top.sum();
        auto want = torch::zeros({m.config.hidden}, torch::kDouble);
        for (int64_t j = 0; j < 3; ++j) {
          const auto& e = static_cast<size_t>(experts[j].item<int64_t>());
          const auto g = torch::mv(w.expert_gate[e].weight, row), u = torch::mv(w.expert_up[e].weight, row);
          want += top[j] * torch::mv(w.expert_down[e].weight, torch::silu(g) * u);
        }
        EXPECT_TRUE(torch::allclose(got[b][r], want, 1e-13, 1e-15)) << "row " << b << "," << r;
      }
    // The router over R = 18 rows, and each row's 3 experts' three matmuls: 2 R d (E + 3 k Ie).
    const int64_t R = 18, d = m.config.hidden, E = 8, Ie = m.config.expert_intermediate;
    EXPECT_EQ(forward_matmul, 2 * R * d * (E + 3 * 3 * Ie));
  }
}

struct Case {
  std::string impl, objective;
  MoeShape shape;
  int64_t partition;
  Offload offload = Offload::none;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const MoeShape& s = c.shape;
  return test_name(
      fmt::format("{}_{}_k{}_{}{}{}{}{}_p{}{}", c.impl, c.objective, s.k, s.tied ? "tied" : "untied",
                  s.norm_topk ? "_norm" : "", s.dense_first_layer ? "_dense0" : "", s.lora ? "_lora" : "",
                  s.aux > 0 ? "_aux" : "", c.partition, c.offload == Offload::none ? "" : "_offloaded"));
}

class MoeExactness : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExactness, MatchesPlainInFloat64) {
  const Case& c = GetParam();
  Model model = moe_model(c.shape);
  auto objective = make_objective(c.objective);
  const Batch batch = batch_for(c.objective, model);
  auto ref = run_step("plain", model, batch, *objective, {kT, kT});
  auto store = make_checkpoint_store(c.offload, torch::kCPU);
  auto got = run_step(c.impl, model, batch, *objective, {c.partition, 3}, store.get());
  expect_same_gradients(ref, got, kTol, case_name({c, 0}));
}

std::vector<Case> moe_matrix() {
  std::vector<Case> cases;
  for (const std::string impl : {"checkpoint", "checkpoint-chunked-head", "mst", "streambp"})
    for (const std::string objective : {"sft", "dpo", "grpo"}) {
      if (make_strategy(impl)->unsupported({objective, 1})) continue;
      for (const int64_t k : {2, 3})
        for (const int64_t p : {int64_t{1}, int64_t{5}, kT})
          cases.push_back({impl, objective, {k, /*tied=*/k == 3, /*norm_topk=*/k == 2}, p});
      cases.push_back({impl, objective, {2, false, true, /*dense_first_layer=*/true}, 5});
      cases.push_back({impl, objective, {3, true, false, false, /*lora=*/true}, 5});
      if (impl != "checkpoint-chunked-head")
        cases.push_back({impl, objective, {2, false, true}, 5, Offload::checkpoints});
      // The load-balancing loss on (a large weight, so that its gradient is no round-off beside the
      // objective's): counted once in the first forward, whatever the strategy recomputes.
      cases.push_back({impl, objective, {2, false, true, false, false, /*aux=*/0.5}, 5});
      cases.push_back({impl, objective, {3, true, false, /*dense_first_layer=*/true, /*lora=*/true, 0.5}, 1});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Strategies, MoeExactness, ::testing::ValuesIn(moe_matrix()), case_name);

// The matrix's partitions of 5 rows split the rows one expert takes across chunks (so a strategy that routed
// or accumulated an expert per sequence, not per chunk, would be caught), and every expert takes some row.
TEST(MoeExactness, PartitionsSplitTheRowsOfAnExpertAcrossChunks) {
  for (const int64_t k : {2, 3}) {
    Model m = moe_model({k});
    const auto chosen = routing_of(m, batch_for("sft", m));  // (N, T, k)
    std::set<int64_t> experts_hit;
    int64_t split = 0;
    for (int64_t e = 0; e < m.config.experts; ++e) {
      std::set<int64_t> chunks;
      for (int64_t n = 0; n < chosen.size(0); ++n)
        for (int64_t t = 0; t < kT; ++t)
          if ((chosen[n][t] == e).any().item<bool>()) {
            chunks.insert(t / 5);
            experts_hit.insert(e);
          }
      split += chunks.size() > 1 ? 1 : 0;
    }
    EXPECT_EQ(static_cast<int64_t>(experts_hit.size()), m.config.experts) << "k " << k;
    EXPECT_GE(split, 4) << "k " << k;
  }
}

// Every strategy that `model` is estimated for (estimated_for_model), one step of `objective_name` counted at
// the seam, against estimate_flops: model and hardware FLOPs equal.
void expect_counted_flops_equal_the_estimate(Model& model, const std::string& objective_name, int64_t lora,
                                             const std::string& what) {
  auto objective = make_objective(objective_name);
  const Batch batch = batch_for(objective_name, model);
  EstimateInput in;
  in.config = model.config;
  in.seq_len = kT;
  in.sequences = batch.sequences();
  in.partition = 5;
  in.logits_partition = 3;
  in.dtype = torch::kDouble;
  in.objective = objective_name;
  in.lora_rank = lora;
  for (const std::string impl : {"plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"}) {
    if (make_strategy(impl)->unsupported({objective_name, 1}) || !estimated_for_model(model.config, impl))
      continue;
    FlopCounter counter;
    run_step(impl, model, batch, *objective, {5, 3});
    in.impl = impl;
    EXPECT_EQ(counter.counts().model(), estimate_flops(in).model()) << what << " " << impl;
    EXPECT_EQ(counter.counts().hardware(), estimate_flops(in).hardware()) << what << " " << impl;
  }
}

// What each strategy runs, counted at the seam, is what estimate_flops says for a mixture of experts too: the
// router over every row and k experts a row (model FLOPs: the active ones), MsT's and checkpointing's
// recomputation included; with LoRA the router, which has no adapter, computes only its input's gradient.
TEST(MoeFlops, CountedEqualTheEstimateForEveryStrategy) {
  for (const MoeShape& shape : {MoeShape{2}, MoeShape{3, true, true, /*dense_first_layer=*/true},
                                MoeShape{2, false, false, false, /*lora=*/true}})
    for (const std::string objective_name : {"sft", "grpo"}) {
      Model model = moe_model(shape);
      expect_counted_flops_equal_the_estimate(
          model, objective_name, shape.lora ? 2 : 0,
          fmt::format("{} k{}{}{}", objective_name, shape.k, shape.dense_first_layer ? " dense0" : "",
                      shape.lora ? " lora" : ""));
    }
}

// GLM-4.5's layers (DeepSeek's router, a shared expert on every row, a dense first layer, partial RoPE) and
// DeepSeek-V3's (multi-head latent attention's projections in the expanded form, and StreamBP's kv_b
// expansions by key block, each key row's in its own chunk the model's work), with LoRA and without:
// counted at the seam, every strategy that is estimated runs what estimate_flops says.
TEST(MoeFlops, SharedExpertsAndDeepSeeksRouterCountedEqualTheEstimate) {
  for (const std::string preset : {"tiny-glm4-moe", "tiny-deepseek"})
    for (const int64_t lora : {0, 2}) {
      Model model = Model::random(find_model_preset(preset), torch::TensorOptions().dtype(torch::kDouble), 7);
      if (lora > 0) model.add_lora(lora, 4.0, 3);
      expect_counted_flops_equal_the_estimate(model, "sft", lora, fmt::format("{} lora {}", preset, lora));
    }
}

// transformers' load_balancing_loss_func written out over the routers' logits, with autograd through it:
// what plain BP with the load-balancing loss on must equal (loss and every gradient). The logits come from
// the model's own pieces, layer by layer, on a copy with the loss off.
TEST(RouterBalance, PlainEqualsAutogradOfTheLossWrittenOut) {
  for (const std::string objective_name : {"sft", "dpo"})
    for (const MoeShape& shape :
         {MoeShape{2, false, true, false, false, 0.5}, MoeShape{3, true, false, true, false, 0.5}}) {
      Model model = moe_model(shape);
      auto objective = make_objective(objective_name);
      const Batch batch = batch_for(objective_name, model);
      const auto got = run_step("plain", model, batch, *objective, {kT, kT});

      Model written = model;  // the same weights, its own load-balancing state, off
      written.router_balance = std::make_shared<RouterBalance>();
      for (auto& p : written.trainable_parameters()) p.tensor.mutable_grad().reset();
      const int64_t E = written.config.experts, k = written.config.experts_per_token;
      const RoutedForward forward = routed_forward(written, batch);
      auto counts = torch::zeros({E}, torch::kDouble), probability_sums = torch::zeros({E}, torch::kDouble);
      int64_t rows = 0;
      for (const auto& p : forward.probabilities) {
        if (!p.defined()) continue;  // a dense layer
        counts += torch::bincount(std::get<1>(p.topk(k, -1)).flatten(), {}, E).to(torch::kDouble);
        probability_sums = probability_sums + p.sum(0);
        rows += p.size(0);
      }
      const auto aux = E * (counts / rows * probability_sums / rows).sum();
      const auto loss = objective->loss(written.head_logits(forward.output), batch) + shape.aux * aux;
      loss.backward();
      StepResult want;
      want.loss = loss.item<double>();
      for (auto& p : written.trainable_parameters()) {
        want.names.push_back(p.name);
        want.grads.push_back(p.tensor.grad().detach().clone());
      }
      const std::string what = fmt::format("{} k{}", objective_name, shape.k);
      expect_same_gradients(want, got, kTol, what);
      // Off: the loss is the objective's alone, and the routers' gradients lose a part that is no round-off
      // (so a hook that never fired would fail above).
      Model off = model;
      off.router_balance = std::make_shared<RouterBalance>();
      const auto without = run_step("plain", off, batch, *objective, {kT, kT});
      EXPECT_NEAR(got.loss - without.loss, shape.aux * aux.item<double>(), 1e-12) << what;
      for (size_t i = 0; i < got.names.size(); ++i)
        if (got.names[i].find("mlp.gate.weight") != std::string::npos)
          EXPECT_GT((got.grads[i] - without.grads[i]).norm().item<double>(),
                    1e-3 * got.grads[i].norm().item<double>())
              << what << " " << got.names[i];
    }
}

TEST(MoeExactness, LoraAdaptsEveryExpertAndNotTheRouter) {
  const Model m = moe_model({2, false, false, false, /*lora=*/true});
  int64_t adapted = 0;
  for (const auto& p : m.trainable_parameters()) {
    EXPECT_EQ(p.group, ParamGroup::lora) << p.name;
    EXPECT_EQ(p.name.find("mlp.gate.lora"), std::string::npos) << p.name;
    adapted += p.name.find("mlp.experts.") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(adapted, 2 * 3 * 8 * m.config.layers);  // A and B of gate, up, down of 8 experts per layer
}

}  // namespace
}  // namespace bpbench::testing::test_moe_exactness
