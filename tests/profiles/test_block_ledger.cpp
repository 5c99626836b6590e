// test_block_ledger.cpp: the CUDA recorder's categories in the allocator's block sizes (block_ledger.h), fed
// the trace c10's caching allocator produces: ALLOC before the block enters allocated_bytes, FREE_REQUESTED
// after it left, the size the caller asked for in both. A synthetic allocator below plays that part, so
// the bookkeeping is checked here without a GPU; the device test checks it against the real allocator.
#include <gtest/gtest.h>

#include <map>

#include "profiles/block_ledger.h"

namespace bpbench::profiles::test_block_ledger {
namespace {

int64_t sum(const CategoryBytes& c) {
  int64_t s = 0;
  for (int64_t b : c) s += b;
  return s;
}

// The allocated_bytes statistic of an allocator whose blocks are `block` bytes for a request, and the trace
// it sends the ledger, in c10's order.
class FakeAllocator {
 public:
  explicit FakeAllocator(BlockLedger& ledger) : ledger_(ledger) {}
  void alloc(size_t addr, int64_t requested, int64_t block, Category c) {
    ledger_.on_alloc(addr, requested, c, allocated_);  // the hook runs before the statistic moves
    allocated_ += block;
    blocks_[addr] = block;
  }
  void free(size_t addr) {
    allocated_ -= blocks_.at(addr);  // ... and after it moved back
    blocks_.erase(addr);
    ledger_.on_free(addr, allocated_);
  }
  int64_t allocated() const { return allocated_; }

 private:
  BlockLedger& ledger_;
  int64_t allocated_ = 0;
  std::map<size_t, int64_t> blocks_;
};

TEST(BlockLedger, ChargesBlockSizesNotRequestsSoCategoriesSumToTheStatistic) {
  BlockLedger ledger;
  FakeAllocator gpu(ledger);
  gpu.alloc(0x1000, 100, 512, Category::params);                              // rounded up to 512
  gpu.alloc(0x2000, 3 << 20, (3 << 20) + 900 * 1024, Category::activations);  // an unsplit cached block
  gpu.alloc(0x3000, 4096, 4096, Category::kv);
  ledger.settle(gpu.allocated());
  EXPECT_EQ(ledger.live(), gpu.allocated());
  EXPECT_EQ(sum(ledger.categories()), gpu.allocated());
  EXPECT_EQ(ledger.categories()[static_cast<size_t>(Category::activations)], (3 << 20) + 900 * 1024);
  EXPECT_EQ(ledger.categories()[static_cast<size_t>(Category::params)], 512);
  EXPECT_EQ(ledger.peak(), gpu.allocated());

  gpu.free(0x2000);  // settles nothing new (the kv block was settled) and removes the large block whole
  EXPECT_EQ(ledger.live(), gpu.allocated());
  EXPECT_EQ(ledger.categories()[static_cast<size_t>(Category::activations)], 0);
  EXPECT_EQ(ledger.peak(), 512 + (3 << 20) + 900 * 1024 + 4096);
  EXPECT_EQ(sum(ledger.peak_categories()), ledger.peak());
}

TEST(BlockLedger, AnAllocationIsSettledByTheNextEventEvenWhenThatFreesAnotherBlock) {
  BlockLedger ledger;
  FakeAllocator gpu(ledger);
  gpu.alloc(1, 1000, 1024, Category::grads);
  gpu.alloc(2, 2 << 20, (2 << 20) + 512 * 1024, Category::logits);  // pending ...
  gpu.free(1);  // ... settled here: the statistic has lost block 1 already, whose size the ledger knows
  EXPECT_EQ(ledger.live(), gpu.allocated());
  EXPECT_EQ(ledger.categories()[static_cast<size_t>(Category::logits)], (2 << 20) + 512 * 1024);
  EXPECT_EQ(ledger.categories()[static_cast<size_t>(Category::grads)], 0);
  EXPECT_EQ(ledger.peak(), 1024 + (2 << 20) + 512 * 1024);
}

TEST(BlockLedger, ABlockFreedBeforeAnythingElseHappenedIsChargedItsRoundedRequest) {
  BlockLedger ledger;
  FakeAllocator gpu(ledger);
  gpu.alloc(1, 10, 512, Category::other);
  ledger.settle(gpu.allocated());
  gpu.alloc(2, 700, 1024, Category::activations);
  gpu.free(2);  // nothing in between: the statistic is back where it was, the rounded request is the guess
  EXPECT_EQ(ledger.live(), 512);
  EXPECT_EQ(ledger.peak(), 512 + 1024);
  EXPECT_EQ(ledger.peak_categories()[static_cast<size_t>(Category::activations)], 1024);
}

TEST(BlockLedger, ResetPeakAndUnknownFrees) {
  BlockLedger ledger;
  FakeAllocator gpu(ledger);
  gpu.alloc(1, 2048, 2048, Category::params);
  gpu.alloc(2, 4096, 4096, Category::activations);
  gpu.free(2);
  ledger.reset_peak();
  EXPECT_EQ(ledger.peak(), 2048);
  EXPECT_EQ(sum(ledger.peak_categories()), 2048);
  ledger.on_free(0xdead, gpu.allocated());  // a block allocated before the recorder existed
  EXPECT_EQ(ledger.live(), 2048);
  EXPECT_EQ(BlockLedger::rounded(1), 512);
  EXPECT_EQ(BlockLedger::rounded(512), 512);
  EXPECT_EQ(BlockLedger::rounded(513), 1024);
}

TEST(BlockLedger, ReportsEveryChangeForTheTimeline) {
  BlockLedger ledger;
  FakeAllocator gpu(ledger);
  std::vector<int64_t> seen;
  ledger.on_change = [&](const CategoryBytes& c) { seen.push_back(sum(c)); };
  gpu.alloc(1, 100, 512, Category::kv);
  gpu.alloc(2, 100, 512, Category::kv);
  gpu.free(1);
  ledger.settle(gpu.allocated());
  EXPECT_EQ(seen, (std::vector<int64_t>{512, 1024, 512}));
}

}  // namespace
}  // namespace bpbench::profiles::test_block_ledger
