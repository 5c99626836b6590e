// offload.h: where the layer checkpoints wait for the backward: on the device, or offloaded to host memory.
//
// The layerwise strategies (checkpoint, checkpoint-chunked-head, mst, streambp) keep each layer's input x_i
// (N, T, d) from the forward to that layer's backward. With `offload: checkpoints` they hand them to a
// CheckpointStore that moves them to host memory, so the device holds two of them at a time (the layer being
// backpropagated and the next one, prefetched) instead of L; StreamBP's device floor then moves from
// (L - 1) x N*T*d*s bytes of checkpoints (it keeps no x_0) to host memory.
//
// The order a strategy follows, whatever the store:
//   forward:   put(0, x_0) ... put(L-1, x_{L-1})       each once x_{i+1} is computed from it
//   backward:  after the head, for i = L-1..0: x_i = take(i); prefetch(i-1)
// StreamBP puts no x_0 (layerwise.h: FirstInputRecomputed stands in front of the store and makes it again),
// so its store sees layers 1..L-1 only.
// Layer L-1's is not prefetched during the head: the head is often the peak phase, and holding no layer
// input through it is worth one exposed copy per step.
// Prefetch depth is 1: one checkpoint in flight while a layer computes. At the lengths offload is for,
// attention makes a layer's backward far longer than one checkpoint's copy, so a deeper prefetch would hold
// more device memory and hide nothing more.
//
// Three stores, one interface (make_checkpoint_store picks):
// - offload none:                 the tensors stay on the device (a vector);
// - offload checkpoints, CPU:     copies into host buffers allocated under a HostMemoryScope (host bytes,
//                                  profiles/host_memory.h) and back: synchronous, exact, and the
//                                  device-category memory it frees is what the same code frees on a GPU;
// - offload checkpoints, CUDA:    pinned host buffers, a dedicated copy stream, events (offload_cuda.cpp).
// Host buffers are allocated on first use and reused by every later step of the cell (the store lives as
// long as the cell), so a timed step never pays for pinning memory.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace bpbench {

enum class Offload { none, checkpoints };

// A cell's `offload`: "none", or what goes to host memory as a comma-separated list, in this order:
// checkpoints (the layer inputs, in a CheckpointStore below), optimizer (a training run's AdamW tensors and
// its step on the host's CPU, harness/run/train_optimizer.h), parameters (ZeRO-3's layer shards, each copied
// to the device for its gather, as ZeRO-Infinity's offload_param: dist_common.h).
struct OffloadPlan {
  bool checkpoints = false, optimizer = false, parameters = false;
  bool any() const { return checkpoints || optimizer || parameters; }
};

// "none", then every non-empty list of checkpoints, optimizer, parameters in that order.
const std::vector<std::string>& offload_names();
OffloadPlan parse_offload_plan(const std::string& name);  // throws std::invalid_argument listing the names
Offload parse_offload(const std::string& name);           // the checkpoints' part of the plan
const char* offload_name(Offload o);

class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  virtual Offload offload() const = 0;
  // Keeps x_i, layer i's input (N, T, d), until take(i). The caller drops its own references to x.
  virtual void put(int64_t i, torch::Tensor x) = 0;
  // Starts bringing x_i back to the device; a no-op where it never left or is already coming.
  virtual void prefetch(int64_t i) = 0;
  // x_i on the device, ready for the current stream; the store forgets it (its host buffer stays for the
  // next step).
  virtual torch::Tensor take(int64_t i) = 0;
};

// Whether a store's host buffer can take x as it is (reused from the last step) or must be replaced: a
// longer sequence or another dtype.
inline bool host_buffer_fits(const torch::Tensor& buffer, const torch::Tensor& x) {
  return buffer.defined() && buffer.sizes() == x.sizes() && buffer.dtype() == x.dtype();
}

// A store for `device`; offload checkpoints on CUDA needs a CUDA-enabled build (else std::runtime_error).
std::unique_ptr<CheckpointStore> make_checkpoint_store(Offload offload, const torch::Device& device);

// The CUDA store (offload_cuda.cpp; offload_nocuda.cpp throws): used by make_checkpoint_store.
std::unique_ptr<CheckpointStore> make_pinned_checkpoint_store();

}  // namespace bpbench
