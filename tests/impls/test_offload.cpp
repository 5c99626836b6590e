// test_offload.cpp: the checkpoint stores of impls/machinery/offload.h on the CPU: names, what each store
// holds where (device bytes vs host bytes, exactly), buffer reuse across steps, and misuse refused. Offloaded
// strategies' exactness is in test_exactness.cpp (Offloaded/*), their peaks against the estimate in
// test_estimate.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "impls/interface/strategy.h"
#include "impls/machinery/offload.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"

namespace bpbench::test_offload {
namespace {

using profiles::MemoryRecorder;

TEST(Offload, NamesParseAndUnknownOnesAreRefused) {
  EXPECT_EQ(offload_names(),
            (std::vector<std::string>{"none", "checkpoints", "optimizer", "parameters",
                                      "checkpoints,optimizer", "checkpoints,parameters",
                                      "optimizer,parameters", "checkpoints,optimizer,parameters"}));
  for (const auto& name : offload_names()) {  // the plan, and its checkpoints' part
    const OffloadPlan plan = parse_offload_plan(name);
    EXPECT_EQ(plan.checkpoints, name.find("checkpoints") != std::string::npos) << name;
    EXPECT_EQ(plan.optimizer, name.find("optimizer") != std::string::npos) << name;
    EXPECT_EQ(plan.parameters, name.find("parameters") != std::string::npos) << name;
    EXPECT_EQ(offload_name(parse_offload(name)), std::string(plan.checkpoints ? "checkpoints" : "none"));
  }
  try {
    parse_offload("activations");
    FAIL() << "accepted an unknown offload";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown offload 'activations' (valid: none, checkpoints, optimizer, parameters, "
              "checkpoints,optimizer, checkpoints,parameters, optimizer,parameters, "
              "checkpoints,optimizer,parameters)");
  }
  EXPECT_THROW(parse_offload_plan("parameters,optimizer"), std::invalid_argument);  // one spelling a plan
  EXPECT_EQ(offloading_strategy_names(),
            (std::vector<std::string>{"checkpoint", "checkpoint-chunked-head", "mst", "streambp",
                                      "streambp-ulysses", "streambp-ring"}));
}

// Three "layer inputs" of 3 x 5 x 7 float32 (420 bytes each) through each store, twice (two steps).
TEST(Offload, HostStoreHoldsCheckpointsAsHostBytesAndReusesThem) {
  auto& rec = MemoryRecorder::instance();
  const int64_t bytes = 3 * 5 * 7 * 4;
  for (const Offload offload : {Offload::none, Offload::checkpoints}) {
    SCOPED_TRACE(offload_name(offload));
    const bool off = offload == Offload::checkpoints;
    const int64_t live0 = rec.live_bytes(), host0 = profiles::host_live_bytes();
    auto store = make_checkpoint_store(offload, torch::kCPU);
    EXPECT_EQ(store->offload(), offload);
    for (int step = 0; step < 2; ++step) {
      std::vector<torch::Tensor> expected;
      for (int64_t i = 0; i < 3; ++i) {
        auto x = torch::randn({3, 5, 7});
        expected.push_back(x.clone());
        store->put(i, std::move(x));
      }
      // Held on the device without offload; with it, the device holds only the test's own copies.
      EXPECT_EQ(rec.live_bytes() - live0, (off ? 3 : 6) * bytes);
      EXPECT_EQ(profiles::host_live_bytes() - host0, off ? 3 * bytes : 0) << "buffers reused, never doubled";
      store->prefetch(2);
      store->prefetch(2);  // already coming: nothing more
      EXPECT_EQ(rec.live_bytes() - live0, (off ? 4 : 6) * bytes);
      for (int64_t i = 2; i >= 0; --i) {
        auto x = store->take(i);
        store->prefetch(i - 1);  // i - 1 = -1 at the bottom: nothing
        EXPECT_TRUE(torch::equal(x, expected[static_cast<size_t>(i)])) << "layer " << i;
      }
      EXPECT_THROW(store->take(1), std::logic_error) << "taken twice";
    }
    EXPECT_EQ(rec.live_bytes(), live0);
    store.reset();
    EXPECT_EQ(profiles::host_live_bytes(), host0) << "host buffers die with their store";
  }
}

TEST(Offload, AShapeChangeReplacesTheHostBuffer) {
  const int64_t host0 = profiles::host_live_bytes();
  auto store = make_checkpoint_store(Offload::checkpoints, torch::kCPU);
  store->put(0, torch::ones({2, 4, 8}));
  EXPECT_EQ(profiles::host_live_bytes() - host0, 2 * 4 * 8 * 4);
  EXPECT_TRUE(torch::equal(store->take(0), torch::ones({2, 4, 8})));
  store->put(0, torch::full({2, 6, 8}, 3.0, torch::kDouble));  // a longer sequence, another dtype
  EXPECT_EQ(profiles::host_live_bytes() - host0, 2 * 6 * 8 * 8);
  EXPECT_TRUE(torch::equal(store->take(0), torch::full({2, 6, 8}, 3.0, torch::kDouble)));
  EXPECT_THROW(store->prefetch(5), std::logic_error) << "never put";
}

}  // namespace
}  // namespace bpbench::test_offload
