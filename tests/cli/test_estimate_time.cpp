// test_estimate_time.cpp: `bpbench estimate`'s collectives and time per step
// (harness/estimate/estimate_comm.h, estimate_time.h) through the command, as --json gives them:
//   - each term is its count over its stated rate: the counted hardware FLOPs over HFU x the GPU's peak, each
//     collective's wire bytes over NVLink within a node and InfiniBand across, the offload copies over PCIe;
//   - the flags move exactly their term, and bad values are one-line errors naming the flag;
//   - no time without one GPU of known peak.
// That the collectives' bytes are what a step sends: every measured cell's "comm" against the estimate in
// tests/impls/test_ring.cpp, test_sequence_parallel.cpp, test_dist.cpp, tests/run/test_per_rank_peaks.cpp
// and test_train_distributed.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/estimate_command.h"

namespace bpbench::test_estimate_time {
namespace {

using nlohmann::json;

json estimate_doc(std::vector<std::string> args) {
  args.push_back("--json");
  std::ostringstream out;
  EXPECT_EQ(estimate_command(args, out), 0);
  return json::parse(out.str());
}

std::string error_of(const std::vector<std::string>& args) {
  std::ostringstream out;
  try {
    estimate_command(args, out);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

// Qwen3-0.6B's streambp-ring over 8 ranks at 64k, a training step with the optimizer offloaded.
std::vector<std::string> ring_job(std::vector<std::string> more = {}) {
  std::vector<std::string> args = {
      "--model", "qwen3-0.6b", "--seq-len", "64k",     "--impl", "streambp-ring", "--ranks",
      "8",       "--sharding", "zero2",     "--train", "mixed",  "--offload",     "checkpoints,optimizer",
      "--gpu",   "h100-sxm"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

double wire_bytes(const json& estimate) {
  double bytes = 0;
  for (const auto& c : estimate["comm"]) bytes += c["wire_bytes"].get<double>();
  return bytes;
}

TEST(EstimateTime, EachTermIsItsCountOverItsStatedRate) {
  const json e = estimate_doc(ring_job())["estimates"][0];
  const json& t = e["time"];
  ASSERT_TRUE(t.is_object()) << e.dump();
  EXPECT_EQ(t["gpu"], "H100 SXM, bf16 tensor core (dense)");
  EXPECT_DOUBLE_EQ(t["peak_tflops"], 989.5);
  EXPECT_DOUBLE_EQ(t["hfu"], 0.4);
  EXPECT_DOUBLE_EQ(t["compute_s"], e["flops"]["hardware"].get<double>() / (0.4 * 989.5e12));
  // One node: every collective over NVLink; the optimizer's once, the micro-batch's once (grad_accum 1).
  EXPECT_DOUBLE_EQ(t["ib_s"], 0.0);
  EXPECT_NEAR(t["nvlink_s"].get<double>(), wire_bytes(e) / 450e9, 1e-12);
  EXPECT_DOUBLE_EQ(t["pcie_s"], e["memory"]["offload_traffic_bytes"].get<double>() / 64e9);
  const double serial =
      t["compute_s"].get<double>() + t["nvlink_s"].get<double>() + t["pcie_s"].get<double>();
  EXPECT_NEAR(t["serial_s"].get<double>(), serial, 1e-9);
  EXPECT_DOUBLE_EQ(t["overlapped_s"], t["compute_s"]);  // compute is the longest term here
  EXPECT_NEAR(t["tokens_per_s_per_gpu"].get<double>(), 65536.0 / 8 / serial, 1e-6);  // the rank's share
  EXPECT_NEAR(t["mfu"].get<double>(), e["flops"]["model"].get<double>() / (serial * 989.5e12), 1e-12);
  // The ring's kinds are all there: gradients, the loss, K/V and dK/dV, the optimizer's norm and gather.
  std::vector<std::string> whats;
  for (const auto& c : e["comm"]) whats.push_back(c["what"]);
  EXPECT_EQ(whats, (std::vector<std::string>{"gradients", "loss normalisers and loss", "K/V round the ring",
                                             "dK/dV round the ring", "gradient norm", "new weights"}));
}

TEST(EstimateTime, TheFlagsMoveExactlyTheirTerm) {
  const json base = estimate_doc(ring_job())["estimates"][0]["time"];
  const json hfu = estimate_doc(ring_job({"--hfu", "0.8"}))["estimates"][0]["time"];
  EXPECT_DOUBLE_EQ(hfu["compute_s"], base["compute_s"].get<double>() / 2);
  EXPECT_DOUBLE_EQ(hfu["nvlink_s"], base["nvlink_s"]);
  const json links =
      estimate_doc(ring_job({"--nvlink-gbps", "900", "--pcie-gbps", "32"}))["estimates"][0]["time"];
  EXPECT_DOUBLE_EQ(links["nvlink_s"], base["nvlink_s"].get<double>() / 2);
  EXPECT_DOUBLE_EQ(links["pcie_s"], base["pcie_s"].get<double>() * 2);
  EXPECT_DOUBLE_EQ(links["compute_s"], base["compute_s"]);
  // Four GPUs a node: the 8 ranks span two nodes, and every collective of the world goes at the IB rate.
  const json nodes = estimate_doc(ring_job({"--gpus-per-node", "4"}))["estimates"][0]["time"];
  EXPECT_DOUBLE_EQ(nodes["nvlink_s"], 0.0);
  EXPECT_NEAR(nodes["ib_s"].get<double>(), base["nvlink_s"].get<double>() * 450 / 50, 1e-9);
}

TEST(EstimateTime, OnTheMeshTheUlyssesGroupStaysInItsNode) {
  // 16 ranks as 2 x 8: Ulysses over pairs (in a node of 8), the ring over 8 ranks that span both nodes.
  const json e =
      estimate_doc({"--model", "qwen3-0.6b", "--seq-len", "64k", "--impl", "streambp-ring", "--ranks", "16",
                    "--ulysses-degree", "2", "--gpu", "h100-sxm"})["estimates"][0];
  double ulysses = 0, rest = 0;
  for (const auto& c : e["comm"]) (c["group"] == "ulysses" ? ulysses : rest) += c["wire_bytes"].get<double>();
  ASSERT_GT(ulysses, 0);
  EXPECT_NEAR(e["time"]["nvlink_s"].get<double>(), ulysses / 450e9, 1e-12);
  EXPECT_NEAR(e["time"]["ib_s"].get<double>(), rest / 50e9, 1e-12);
}

TEST(EstimateTime, NoTimeWithoutOneGpuOfKnownPeak) {
  const std::vector<std::string> budget = {"--model", "small", "--seq-len", "1k", "--budget", "80GB"};
  const json e = estimate_doc(budget)["estimates"][0];
  EXPECT_TRUE(e["time"].is_null());
  EXPECT_TRUE(e["comm"].empty());  // one process
  EXPECT_TRUE(
      estimate_doc({"--model", "small", "--seq-len", "1k", "--gpu", "rtx-4090"})["estimates"][0]["time"]
          .is_null());  // no peak in the table
  EXPECT_TRUE(estimate_doc({"--model", "small", "--seq-len", "1k", "--gpu", "all"})["estimates"][0]["time"]
                  .is_null());  // which GPU's?
}

TEST(EstimateTime, BadRatesAreOneLineErrors) {
  EXPECT_EQ(error_of(ring_job({"--hfu", "0"})), "estimate: --hfu must be in (0, 1], got 0");
  EXPECT_EQ(error_of(ring_job({"--hfu", "1.5"})), "estimate: --hfu must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of(ring_job({"--hfu", "half"})), "estimate: --hfu expects a number, got 'half'");
  EXPECT_EQ(error_of(ring_job({"--nvlink-gbps", "-1"})), "estimate: --nvlink-gbps must be above 0, got -1");
  EXPECT_EQ(error_of(ring_job({"--ib-gbps", "0"})), "estimate: --ib-gbps must be above 0, got 0");
  EXPECT_EQ(error_of(ring_job({"--gpus-per-node", "0"})), "estimate: --gpus-per-node must be >= 1, got 0");
}

}  // namespace
}  // namespace bpbench::test_estimate_time
