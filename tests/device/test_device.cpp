// test_device.cpp: GPU-only tests. They are compiled and registered in every CUDA build (so a GPU path that
// no longer compiles breaks every machine's build), and skip with a one-line reason where no GPU is present:
// skipped, never failed, never missing from the count. scripts/gpu/check.sh runs them on a GPU, one case at a
// time.
//   - the tiny model's loss and every gradient on CUDA equal the CPU's (float64: to round-off);
//   - one cell of every single-process strategy through the runner on CUDA: status ok, gradient error of
//     float32 against float64 plain BP at round-off, FLOPs counted on CUDA (backward hooks on autograd's
//     device thread) equal to the estimate's, the GPU's name and, for a GPU in the peak table, MFU and HFU;
//   - the bfloat16 RoPE tables of every RoPE type on CUDA equal the CPU's, at positions past 100k;
//   - the fused CUDA RMSNorm kernel equals the float64 formula within bfloat16 rounding, gradients included;
//   - offloaded checkpoints (pinned buffers, copy stream, events) give the same gradients, step after step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/estimate/estimate_flops.h"
#include "harness/model/ops.h"
#include "harness/model/rope.h"
#include "harness/run/runner.h"
#include "harness/run/scenario.h"
#include "profiles/cuda_build.h"
#include "profiles/host_memory.h"
#include "tests/support/test_support.h"

namespace bpbench::testing::test_device {
namespace {

#define REQUIRE_GPU() \
  if (profiles::cuda_device_count() == 0) GTEST_SKIP() << profiles::no_gpu_reason() << ": GPU test skipped"

// Every parameter of `model` moved to the GPU in place (the same Model, so its pieces see the moved tensors).
void move_to_cuda(Model& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) p.tensor.set_data(p.tensor.to(torch::kCUDA));
}

TEST(Device, TinyModelLossAndGradientsOnCudaEqualCpu) {
  REQUIRE_GPU();
  for (const bool tied : {false, true}) {
    Model cpu = tiny_model({/*kv_heads=*/2, tied}, torch::kDouble);
    Model gpu = tiny_model({/*kv_heads=*/2, tied}, torch::kDouble);
    move_to_cuda(gpu);
    BatchSpec spec;
    spec.examples = 2;
    spec.seq_len = 29;
    spec.padding = true;
    spec.vocab = cpu.config.vocab;
    const auto objective = make_objective("sft");
    const Batch on_cpu = objective->make_batch(spec, cpu, 8);
    Batch on_gpu = on_cpu;
    on_gpu.input_ids = on_cpu.input_ids.to(torch::kCUDA);
    on_gpu.targets = on_cpu.targets.to(torch::kCUDA);
    for (const std::string impl : {"plain", "streambp"}) {
      const StepResult ref = run_step(impl, cpu, on_cpu, *objective, {7, 5});
      StepResult got = run_step(impl, gpu, on_gpu, *objective, {7, 5});
      for (auto& g : got.grads) g = g.cpu();
      expect_same_gradients(ref, got, 1e-10, fmt::format("{} tied={} on CUDA", impl, tied));
    }
  }
}

TEST(Device, OneCellOfEveryStrategyRunsOnCuda) {
  REQUIRE_GPU();
  TempDir tmp;
  const Scenario s = parse_scenario_text(R"({"name": "device", "device": "cuda", "seed": 1,
    "grid": {"model": "tiny", "impl": ["plain", "checkpoint", "checkpoint-chunked-head", "mst", "streambp"],
             "seq_len": 61, "partition": 16, "logits_partition": 8, "dtype": "float32"},
    "measure": {"memory": true, "time": {"warmup": 1, "repeat": 2}, "grad_error": {"reference": "float64"}}})",
                                         "device");
  RunOptions opt;
  opt.out_dir = tmp.path();
  opt.self_exe = BPBENCH_BINARY;
  opt.argv = {"test_device"};
  const RunSummary summary = run_scenario(s, opt);
  const nlohmann::json r = json_file(summary.results_path);
  EXPECT_EQ(r.at("meta").at("versions").at("cuda").at("enabled"), true);
  ASSERT_EQ(r.at("cells").size(), 5u);
  for (const auto& cell : r.at("cells")) {
    const std::string impl = cell.at("axes").at("impl");
    EXPECT_EQ(cell.at("status"), "ok") << impl << ": " << cell.dump();
    EXPECT_TRUE(std::isfinite(cell.at("loss").get<double>())) << impl;
    EXPECT_LT(cell.at("grad_error").at("groups").at("all").at("rel_l2").get<double>(), 1e-4) << impl;

    EstimateInput in;
    in.config = find_model_preset("tiny");
    in.seq_len = 61;
    in.partition = 16;
    in.logits_partition = 8;
    in.impl = impl;
    in.device = "cuda";
    const FlopCounts expected = estimate_flops(in);
    const auto& compute = cell.at("compute");
    EXPECT_EQ(compute.at("model_flops").get<int64_t>(), expected.model()) << impl;
    EXPECT_EQ(compute.at("hardware_flops").get<int64_t>(), expected.hardware()) << impl;
    // tiny's head size 6 is not a multiple of 8: the math kernel, which computes every masked score.
    EXPECT_GT(compute.at("counts").at("attention_masked").get<int64_t>(), 0) << impl;
    const auto& peak = compute.at("peak");
    EXPECT_FALSE(peak.at("gpu").get<std::string>().empty()) << impl << ": " << peak.dump();
    if (peak.contains("tflops")) {  // a GPU in the table (harness/run/gpu_peak.cpp)
      const double mfu = compute.at("mfu").get<double>(), hfu = compute.at("hfu").get<double>();
      EXPECT_GT(mfu, 0.0) << impl;
      EXPECT_LT(hfu, 1.0) << impl;
      EXPECT_GE(hfu, mfu) << impl;
    }
  }
}

// A CUDA cell's gradient error against a float64 reference run on the CPU
// (measure.grad_error.reference_device, what scenarios/h100_table7_grad_error.json needs): the same round-off
// as a reference on the GPU, and the meta names the GPU that measured it (results.h), with the allocator's
// retries per cell.
TEST(Device, TheGradientErrorReferenceOnTheCpuOfACudaCell) {
  REQUIRE_GPU();
  TempDir tmp;
  auto run = [&](const std::string& where) {
    const Scenario s = parse_scenario_text(fmt::format(R"({{"name": "ref", "device": "cuda", "seed": 1,
      "grid": {{"model": "tiny", "impl": "streambp", "seq_len": 61, "partition": 16, "logits_partition": 8,
               "dtype": "float32"}},
      "measure": {{"time": false, "grad_error": {{"reference": "float64", "reference_device": "{}"}}}}}})",
                                                       where),
                                           "device");
    RunOptions opt;
    opt.out_dir = tmp.sub(where);
    opt.self_exe = BPBENCH_BINARY;
    opt.argv = {"test_device"};
    std::ifstream in(run_scenario(s, opt).results_path);
    return nlohmann::json::parse(in);
  };
  const nlohmann::json on_gpu = run("cell"), on_cpu = run("cpu");
  const auto& a = on_gpu.at("cells").at(0);
  const auto& b = on_cpu.at("cells").at(0);
  ASSERT_EQ(b.at("status"), "ok") << b.dump();
  EXPECT_EQ(a.at("grad_error").at("reference_device"), "cuda:0");
  EXPECT_EQ(b.at("grad_error").at("reference_device"), "cpu");
  ASSERT_FALSE(b.at("grad_error").contains("error")) << b.dump();
  const double rel_gpu = a.at("grad_error").at("groups").at("all").at("rel_l2");
  const double rel_cpu = b.at("grad_error").at("groups").at("all").at("rel_l2");
  EXPECT_GT(rel_cpu, 0.0);
  EXPECT_LT(rel_cpu, 1e-4);
  EXPECT_NEAR(rel_cpu, rel_gpu, 1e-6);  // both are float32's distance from the same float64 gradients
  EXPECT_NEAR(b.at("grad_error").at("reference_loss").get<double>(),
              a.at("grad_error").at("reference_loss").get<double>(), 1e-10);
  const auto& gpus = on_cpu.at("meta").at("device").at("gpus");
  ASSERT_GE(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].at("name"), profiles::cuda_device_name());
  EXPECT_GT(gpus[0].at("total_memory_bytes").get<int64_t>(), int64_t{1} << 30);
  EXPECT_EQ(b.at("memory").at("alloc_retries"), 0);
}

// Offloaded checkpoints on CUDA (impls/machinery/offload_cuda.cpp): pinned buffers, a copy stream, events.
// The same gradients as on the device (float64: the copies are exact, so any difference is a race), over
// three steps that reuse one store, with its pinned bytes on the host ledger and off the device.
TEST(Device, OffloadedCheckpointsOnCudaGiveTheSameGradients) {
  REQUIRE_GPU();
  Model gpu = tiny_model({/*kv_heads=*/2, false}, torch::kDouble);
  move_to_cuda(gpu);
  BatchSpec spec;
  spec.examples = 2;
  spec.seq_len = 301;
  spec.vocab = gpu.config.vocab;
  const auto objective = make_objective("sft");
  Batch batch = objective->make_batch(spec, gpu, 64);
  batch.input_ids = batch.input_ids.to(torch::kCUDA);
  batch.targets = batch.targets.to(torch::kCUDA);
  const int64_t host0 = profiles::host_live_bytes();
  for (const std::string impl : {"streambp", "checkpoint", "mst"}) {
    const StepResult ref = run_step(impl, gpu, batch, *objective, {64, 32});
    auto store = make_checkpoint_store(Offload::checkpoints, torch::Device(torch::kCUDA));
    for (int step = 0; step < 3; ++step) {
      const StepResult got = run_step(impl, gpu, batch, *objective, {64, 32}, store.get());
      expect_same_gradients(ref, got, 1e-12, fmt::format("{} offloaded on CUDA, step {}", impl, step));
    }
    // One pinned buffer per stored layer input: streambp makes x_0 again from the ids.
    const int64_t stored = gpu.config.layers - (make_strategy(impl)->keeps_first_input() ? 0 : 1);
    EXPECT_EQ(profiles::host_live_bytes() - host0, stored * 2 * 301 * gpu.config.hidden * 8) << impl;
    store.reset();
    EXPECT_EQ(profiles::host_live_bytes(), host0) << impl << ": pinned buffers freed with their store";
  }
}

// Float64 tables cast once on either device: the same bf16 values, so a GPU run rotates as the CPU run does.
TEST(Device, Bf16RopeTablesOnCudaEqualCpu) {
  REQUIRE_GPU();
  const RopeConfig qwen = find_model_preset("qwen3-8b").rope;
  const std::vector<RopeConfig> ropes = {
      qwen,
      find_model_preset("llama3.1-8b").rope,
      rope_with_parameters(qwen, {{"rope_type", "linear"}, {"factor", 2}}),
      rope_with_parameters(qwen, {{"rope_type", "dynamic"}, {"factor", 2}}),
      rope_with_parameters(
          qwen, {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 32768}}),
  };
  for (const auto& r : ropes) {
    const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16);
    const RopeTables cpu = rope_tables(r, 128, 110000, 4096, 131072, bf16);
    const RopeTables gpu = rope_tables(r, 128, 110000, 4096, 131072, bf16.device(torch::kCUDA));
    EXPECT_TRUE(torch::equal(cpu.cos, gpu.cos.cpu())) << rope_summary(r);
    EXPECT_TRUE(torch::equal(cpu.sin, gpu.sin.cpu())) << rope_summary(r);
  }
}

TEST(Device, FusedRmsNormOnCudaIsTheFloat64FormulaInBfloat16) {
  REQUIRE_GPU();
  torch::manual_seed(4);
  const auto x = torch::randn({2, 513, 4096}, torch::kDouble),
             w = 1 + 0.1 * torch::randn({4096}, torch::kDouble);
  const auto dy = torch::randn({2, 513, 4096}, torch::kDouble);
  auto run = [&](const torch::TensorOptions& to, NormKernel k) {
    auto xi = x.to(to).requires_grad_(true), wi = w.to(to).requires_grad_(true);
    auto y = rms_norm(xi, wi, 1e-6, k);
    y.backward(dy.to(to));
    return std::vector<torch::Tensor>{y.detach().cpu().to(torch::kDouble), xi.grad().cpu().to(torch::kDouble),
                                      wi.grad().cpu().to(torch::kDouble)};
  };
  const auto exact = run(torch::TensorOptions().dtype(torch::kDouble), NormKernel::hf);
  const auto fused =
      run(torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA), NormKernel::fused);
  const char* names[] = {"y", "dx", "dw"};
  for (int i = 0; i < 3; ++i) {
    // Relative L2 error of a bfloat16 computation: a few ulps (2^-8) at most.
    const double rel = ((fused[i] - exact[i]).norm() / exact[i].norm()).item<double>();
    EXPECT_LE(rel, 2e-2) << names[i];
  }
}

}  // namespace
}  // namespace bpbench::testing::test_device
