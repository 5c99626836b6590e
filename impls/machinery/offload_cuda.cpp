// offload_cuda.cpp: offload checkpoints on CUDA (offload.h): pinned host buffers, a dedicated copy stream,
// and events, so the compute stream only ever waits for a copy it needs now.
//
//   put(i, x):     compute --(x ready)--> copy stream: host_i <- x (async);  x's block is not reused until
//                  that copy is done (recordStream), so dropping x frees it without a sync
//   prefetch(i):   a device tensor is allocated on the compute stream; the copy stream waits for that point
//                  (the block's earlier users are done), then device <- host_i (async), event "fetched"
//   take(i):       compute waits for "fetched" of layer i, nothing else
// Every copy is on one copy stream, so a step's put(i) into host_i is ordered after the previous step's
// prefetch out of it.
//
// A step that throws (out of memory in a layer's backward) leaves a prefetched tensor that take() never
// handed over: its block belongs to the compute stream, and the copy stream may still be writing it. The
// store then records the copy stream on it before letting it go, so the allocator reuses the block only once
// that copy is done (recording it at every prefetch would do the same, but would also hold back the block of
// every taken checkpoint until the next prefetch's copy is done). The store lives on after such a step: the
// next put(i) starts layer i afresh. Destroying the store waits for the copy stream first: its pinned
// buffers may still be a copy's source or target.
//
// Pinned buffers are cudaHostAlloc'ed at their exact size, once per cell, not taken from PyTorch's pinned
// caching allocator: that one rounds each block up to a power of two, which for offload's sizes (a 300k-token
// Qwen3-8B checkpoint is 2.3 GiB) nearly doubles the host memory needed. The events are created once per
// store (the cell's) and recorded again at every put and prefetch.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "impls/machinery/offload.h"
#include "profiles/host_memory.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::Category;
using profiles::MemoryScope;

// Exactly `bytes` of pinned host memory as a CPU tensor shaped like `like`; charged to the host ledger until
// the tensor dies. A failure is an out-of-memory result, as a device allocation's is.
torch::Tensor pinned_like(const torch::Tensor& like) {
  const int64_t bytes = static_cast<int64_t>(like.nbytes());
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, static_cast<size_t>(bytes), cudaHostAllocDefault);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so the next cell starts clean
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        fmt::format("offload: cudaHostAlloc of {} bytes of pinned host memory failed ({}) with {} "
                    "host bytes already pinned",
                    bytes, cudaGetErrorString(err), profiles::host_live_bytes()));
  }
  profiles::charge_host_bytes(bytes);
  return torch::from_blob(
      ptr, like.sizes(),
      [bytes](void* p) {
        cudaFreeHost(p);
        profiles::release_host_bytes(bytes);
      },
      torch::TensorOptions().dtype(like.dtype()).device(torch::kCPU));
}

class PinnedStreamStore final : public CheckpointStore {
 public:
  PinnedStreamStore() = default;
  PinnedStreamStore(const PinnedStreamStore&) = delete;
  PinnedStreamStore& operator=(const PinnedStreamStore&) = delete;

  ~PinnedStreamStore() override {
    // The pinned buffers die with the slots: no copy may still read or write them. (A destructor must not
    // throw; a failed synchronize leaves nothing better to do than carry on.)
    try {
      if (copy_) copy_->synchronize();
    } catch (...) {
    }
  }

  Offload offload() const override { return Offload::checkpoints; }

  void put(int64_t i, torch::Tensor x) override {
    torch::NoGradGuard no_grad;
    Slot& s = slot(i);
    const auto index = x.device().index();
    const auto compute = c10::cuda::getCurrentCUDAStream(index);
    const auto copy = copy_stream(index);
    abandon_fetch(s, copy);  // a step that threw may have left one: it holds an earlier put's contents
    if (!host_buffer_fits(s.host, x)) {
      // The old buffer may be a pending copy's source (a prefetch that a failed step never took).
      if (s.host.defined()) copy.synchronize();
      s.host = torch::Tensor();
      s.host = pinned_like(x);
    }
    s.options = x.options();
    computed_.record(compute);
    computed_.block(copy);
    {
      c10::cuda::CUDAStreamGuard on_copy(copy);
      s.host.copy_(x, /*non_blocking=*/true);
    }
    profiles::count_host_transfer(static_cast<int64_t>(x.nbytes()));
    c10::cuda::CUDACachingAllocator::recordStream(x.storage().data_ptr(), copy);
    s.held = true;
  }

  void prefetch(int64_t i) override {
    if (i < 0) return;
    Slot& s = slot(i);
    if (s.coming) return;
    // The pinned buffer outlives take() for reuse, but its contents belong to one put.
    if (!s.held) throw std::logic_error(fmt::format("checkpoint store: layer {} was not put", i));
    torch::NoGradGuard no_grad;
    const auto index = s.options.device().index();
    const auto compute = c10::cuda::getCurrentCUDAStream(index);
    const auto copy = copy_stream(index);
    {
      MemoryScope scope(Category::checkpoints);
      s.device = torch::empty(s.host.sizes(), s.options);
    }
    allocated_.record(compute);
    allocated_.block(copy);
    {
      c10::cuda::CUDAStreamGuard on_copy(copy);
      s.device.copy_(s.host, /*non_blocking=*/true);
    }
    profiles::count_host_transfer(static_cast<int64_t>(s.device.nbytes()));
    s.fetched.record(copy);
    s.coming = true;
  }

  torch::Tensor take(int64_t i) override {
    prefetch(i);
    Slot& s = slot(i);
    s.fetched.block(c10::cuda::getCurrentCUDAStream(s.options.device().index()));
    s.coming = false;
    s.held = false;
    return std::move(s.device);
  }

 private:
  struct Slot {
    torch::Tensor host;    // pinned (N, T, d), reused by every step of the cell
    torch::Tensor device;  // the prefetched copy, until take()
    torch::TensorOptions options;
    at::cuda::CUDAEvent fetched;  // on the copy stream: `device` holds x_i
    bool coming = false;
    bool held = false;  // put and not yet taken
  };

  Slot& slot(int64_t i) {
    auto& p = slots_[i];
    if (!p) p = std::make_unique<Slot>();
    return *p;
  }

  c10::cuda::CUDAStream copy_stream(c10::DeviceIndex index) {
    if (!copy_) copy_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    return *copy_;
  }

  // Lets go of a prefetched tensor that take() never handed over. Its block was allocated on the compute
  // stream and is written on the copy stream; recording the copy stream on it keeps the allocator from
  // reusing the block before that write is done.
  static void abandon_fetch(Slot& s, const c10::cuda::CUDAStream& copy) {
    if (s.device.defined()) {
      c10::cuda::CUDACachingAllocator::recordStream(s.device.storage().data_ptr(), copy);
      s.device = torch::Tensor();
    }
    s.coming = false;
  }

  std::map<int64_t, std::unique_ptr<Slot>> slots_;  // events are not copyable
  std::optional<c10::cuda::CUDAStream> copy_;
  // Recorded again by every put (compute: x is ready) and prefetch (compute: the new block is free to
  // write); a wait already queued on an event keeps the point it was queued for.
  at::cuda::CUDAEvent computed_, allocated_;
};

}  // namespace

std::unique_ptr<CheckpointStore> make_pinned_checkpoint_store() {
  return std::make_unique<PinnedStreamStore>();
}

}  // namespace bpbench
