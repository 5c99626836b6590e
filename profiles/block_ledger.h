// block_ledger.h: live bytes by category in a caching allocator's block sizes, from a trace that names only
// the requested sizes.
//
// The CUDA recorder (cuda_recorder_cuda.cpp) charges each block to the MemoryScope category current when it
// was allocated. c10's trace hook reports the size the caller asked for, while the allocated_bytes statistic
// (torch.cuda.memory_allocated, our peak_bytes) grows by the block's size: rounded up to 512 bytes, and a
// cached block that is not split can exceed the request by up to 1 MiB. Charging requests would leave the
// categories short of peak_bytes. The block's size is not in the trace, but the statistic is readable inside
// the hook, and c10 (2.x, CUDACachingAllocator.cpp) records ALLOC before it adds the block to the statistic
// and FREE_REQUESTED after it has removed it. So an allocation's block size is settled at the next moment
// the statistic is read: the statistic then, minus the statistic the allocation saw, plus the known block
// size freed in between. One allocation is pending at a time; until it settles it counts nowhere.
//
// The one case the statistic cannot tell is a block freed before anything else happened (its free then sees
// the statistic it was allocated at); it is charged its request rounded up to 512 bytes, the size the
// allocator gives every block it splits. The ledger is plain bookkeeping, not thread-safe: the recorder
// calls it under its lock, and the tests call it with synthetic traces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>

#include "profiles/recorder.h"

namespace bpbench::profiles {

class BlockLedger {
 public:
  // An allocation at `addr` of `requested` bytes, charged to `category`; `allocated_now` is the statistic as
  // the hook reads it (this block not yet in it).
  void on_alloc(size_t addr, int64_t requested, Category category, int64_t allocated_now);
  // A free of the block at `addr`; `allocated_now` is the statistic as the hook reads it (the block already
  // out of it). Blocks the ledger never saw allocated are ignored.
  void on_free(size_t addr, int64_t allocated_now);
  // Settles the pending allocation with the statistic read now (outside a hook: after a step, before
  // reading).
  void settle(int64_t allocated_now);

  // The category a settled live block was charged to; nullopt for a block this ledger does not hold.
  std::optional<Category> category_of(size_t addr) const;
  int64_t live() const { return live_; }
  int64_t peak() const { return peak_; }
  const CategoryBytes& categories() const { return categories_; }
  const CategoryBytes& peak_categories() const { return peak_categories_; }
  void reset_peak();  // peak := live

  // Called with the categories after every change of live bytes (the recorder's timeline).
  std::function<void(const CategoryBytes&)> on_change;
  // Called when a block's size is settled (its allocation charged): the recorder's allocation events.
  std::function<void(size_t addr, int64_t bytes)> on_charge;

  // The size c10 gives a block it splits off for a request: kMinBlockSize (512) granularity.
  static int64_t rounded(int64_t requested);

 private:
  struct Block {
    int64_t bytes;
    Category category;
  };
  struct Pending {
    size_t addr;
    int64_t requested;
    Category category;
    int64_t allocated_before;
  };
  // Settles `pending_` given the statistic now and the bytes known to have left it since.
  void resolve(int64_t allocated_now, int64_t freed_since);
  void charge(size_t addr, const Block& block);

  std::unordered_map<size_t, Block> blocks_;
  std::optional<Pending> pending_;
  CategoryBytes categories_{}, peak_categories_{};
  int64_t live_ = 0, peak_ = 0;
};

}  // namespace bpbench::profiles
