// test_bf16.cpp: in bfloat16, StreamBP is as accurate as checkpointing. Both are compared with a float64
// plain BP on the same (bf16-rounded) weights; streambp's relative gradient error must be within 1.5x of
// checkpoint's (the paper's base16 vs stream16 comparison, appendix B.1).
#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace bpbench::testing::test_bf16 {
namespace {

double relative_error(const StepResult& ref, const StepResult& got) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    diff += (got.grads[i] - ref.grads[i]).pow(2).sum().item<double>();
    norm += ref.grads[i].pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

TEST(BFloat16, StreamBPErrorWithinOneAndAHalfOfCheckpoints) {
  for (const std::string objective_name : {"sft", "grpo"}) {
    Model m16 = tiny_model({2, false}, torch::kBFloat16, 21);
    Model m64 = m16.converted(torch::TensorOptions().dtype(torch::kDouble));
    auto objective = make_objective(objective_name);
    BatchSpec spec;
    spec.examples = 2;
    spec.seq_len = 96;
    spec.group = 2;
    spec.vocab = m16.config.vocab;
    Batch batch = objective->make_batch(spec, m64, 32);
    auto ref = run_step("plain", m64, batch, *objective, {96, 96});
    const double ckpt = relative_error(ref, run_step("checkpoint", m16, batch, *objective, {96, 96}));
    const double stream = relative_error(ref, run_step("streambp", m16, batch, *objective, {24, 16}));
    RecordProperty(objective_name + "_checkpoint_rel_error", std::to_string(ckpt));
    RecordProperty(objective_name + "_streambp_rel_error", std::to_string(stream));
    EXPECT_GT(ckpt, 0.0);  // bf16 really is inexact here: the comparison means something
    EXPECT_LE(stream, 1.5 * ckpt) << objective_name << ": streambp " << stream << " vs checkpoint " << ckpt;
    std::cout << objective_name << ": bf16 relative gradient error checkpoint " << ckpt << ", streambp "
              << stream << "\n";
  }
}

}  // namespace
}  // namespace bpbench::testing::test_bf16
