// offload.cpp: the offload names, the device store and the CPU's host-copy store (offload.h).
#include "impls/machinery/offload.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "profiles/host_memory.h"
#include "profiles/memory.h"

namespace bpbench {
namespace {

using profiles::Category;
using profiles::HostMemoryScope;
using profiles::MemoryScope;

// Removes and returns layer i's tensor from `slots`.
torch::Tensor take_from(std::map<int64_t, torch::Tensor>& slots, int64_t i) {
  auto it = slots.find(i);
  if (it == slots.end()) throw std::logic_error(fmt::format("checkpoint store: layer {} was not put", i));
  torch::Tensor x = std::move(it->second);
  slots.erase(it);
  return x;
}

// offload none: the checkpoints never leave the device.
class DeviceStore final : public CheckpointStore {
 public:
  Offload offload() const override { return Offload::none; }
  void put(int64_t i, torch::Tensor x) override { kept_[i] = std::move(x); }
  void prefetch(int64_t) override {}
  torch::Tensor take(int64_t i) override { return take_from(kept_, i); }

 private:
  std::map<int64_t, torch::Tensor> kept_;
};

// offload checkpoints on the CPU: the same traffic as on a GPU, done by synchronous copies. What it brings
// back is allocated as checkpoints; its buffers are host bytes.
class HostCopyStore final : public CheckpointStore {
 public:
  // A HostMemoryScope only routes bytes through the tracking allocator; without it installed the host
  // buffers would be counted nowhere.
  HostCopyStore() { profiles::MemoryRecorder::instance(); }

  Offload offload() const override { return Offload::checkpoints; }

  void put(int64_t i, torch::Tensor x) override {
    torch::NoGradGuard no_grad;
    torch::Tensor& buffer = host_[i];
    if (!host_buffer_fits(buffer, x)) {
      buffer = torch::Tensor();  // a different shape: release the old one first
      HostMemoryScope host;
      buffer = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    }
    buffer.copy_(x);
    profiles::count_host_transfer(static_cast<int64_t>(x.nbytes()));
    held_.insert(i);
  }

  void prefetch(int64_t i) override {
    if (i < 0 || fetched_.count(i)) return;
    // The buffer outlives take() for reuse, but its contents belong to one put: a second take is a bug.
    if (!held_.count(i)) throw std::logic_error(fmt::format("checkpoint store: layer {} was not put", i));
    torch::NoGradGuard no_grad;
    MemoryScope scope(Category::checkpoints);
    fetched_[i] = host_.at(i).clone();
    profiles::count_host_transfer(static_cast<int64_t>(fetched_[i].nbytes()));
  }

  torch::Tensor take(int64_t i) override {
    prefetch(i);
    held_.erase(i);
    return take_from(fetched_, i);
  }

 private:
  std::map<int64_t, torch::Tensor> host_;     // one per layer, reused by every step
  std::set<int64_t> held_;                    // put and not yet taken
  std::map<int64_t, torch::Tensor> fetched_;  // back on the device, waiting for take()
};

}  // namespace

const std::vector<std::string>& offload_names() {
  static const std::vector<std::string> names = {"none",
                                                 "checkpoints",
                                                 "optimizer",
                                                 "parameters",
                                                 "checkpoints,optimizer",
                                                 "checkpoints,parameters",
                                                 "optimizer,parameters",
                                                 "checkpoints,optimizer,parameters"};
  return names;
}

OffloadPlan parse_offload_plan(const std::string& name) {
  const auto& names = offload_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw std::invalid_argument(
        fmt::format("unknown offload '{}' (valid: {})", name, fmt::join(offload_names(), ", ")));
  OffloadPlan plan;
  plan.checkpoints = name.find("checkpoints") != std::string::npos;
  plan.optimizer = name.find("optimizer") != std::string::npos;
  plan.parameters = name.find("parameters") != std::string::npos;
  return plan;
}

Offload parse_offload(const std::string& name) {
  return parse_offload_plan(name).checkpoints ? Offload::checkpoints : Offload::none;
}

const char* offload_name(Offload o) {
  return o == Offload::checkpoints ? "checkpoints" : "none";
}

std::unique_ptr<CheckpointStore> make_checkpoint_store(Offload offload, const torch::Device& device) {
  if (offload == Offload::none) return std::make_unique<DeviceStore>();
  if (device.is_cuda()) return make_pinned_checkpoint_store();
  return std::make_unique<HostCopyStore>();
}

}  // namespace bpbench
