// block_ledger.cpp: block sizes settled from the allocator's statistic (why and how: block_ledger.h).
#include "profiles/block_ledger.h"

namespace bpbench::profiles {

int64_t BlockLedger::rounded(int64_t requested) {
  constexpr int64_t kMinBlock = 512;
  return requested < kMinBlock ? kMinBlock : (requested + kMinBlock - 1) / kMinBlock * kMinBlock;
}

void BlockLedger::charge(size_t addr, const Block& block) {
  blocks_[addr] = block;
  categories_[static_cast<size_t>(block.category)] += block.bytes;
  live_ += block.bytes;
  if (live_ > peak_) {
    peak_ = live_;
    peak_categories_ = categories_;
  }
  if (on_change) on_change(categories_);
  if (on_charge) on_charge(addr, block.bytes);
}

void BlockLedger::resolve(int64_t allocated_now, int64_t freed_since) {
  if (!pending_) return;
  const Pending p = *pending_;
  pending_.reset();
  int64_t bytes = allocated_now - p.allocated_before + freed_since;
  // Below the request, the statistic moved for a reason the trace did not show: trust the request's block.
  if (bytes < p.requested) bytes = rounded(p.requested);
  charge(p.addr, Block{bytes, p.category});
}

void BlockLedger::on_alloc(size_t addr, int64_t requested, Category category, int64_t allocated_now) {
  resolve(allocated_now, 0);
  pending_ = Pending{addr, requested, category, allocated_now};
}

void BlockLedger::on_free(size_t addr, int64_t allocated_now) {
  if (pending_ && pending_->addr == addr) {
    // Freed before anything else happened: the statistic is back where the allocation found it.
    const Pending p = *pending_;
    pending_.reset();
    charge(p.addr, Block{rounded(p.requested), p.category});
  } else {
    auto it = blocks_.find(addr);
    resolve(allocated_now, it != blocks_.end() ? it->second.bytes : 0);
  }
  auto it = blocks_.find(addr);
  if (it == blocks_.end()) return;
  categories_[static_cast<size_t>(it->second.category)] -= it->second.bytes;
  live_ -= it->second.bytes;
  blocks_.erase(it);
  if (on_change) on_change(categories_);
}

std::optional<Category> BlockLedger::category_of(size_t addr) const {
  const auto it = blocks_.find(addr);
  if (it == blocks_.end()) return std::nullopt;
  return it->second.category;
}

void BlockLedger::settle(int64_t allocated_now) {
  resolve(allocated_now, 0);
}

void BlockLedger::reset_peak() {
  peak_ = live_;
  peak_categories_ = categories_;
}

}  // namespace bpbench::profiles
