// registry.cpp: the strategies (from strategies.def) and the peers' names (from impls/peers/registry.py), and
// the step every caller runs around a strategy's forward_backward.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "impls/interface/strategy.h"
#include "impls/machinery/dist_common.h"

namespace bpbench {

// The factories' declarations, from the one list (strategies.def; each is defined in its strategy's file). A
// distributed strategy's factory takes the options of its step (dist_common.h); the registry gives it
// default_dist_options().
#define BPBENCH_STRATEGY(name, factory) std::unique_ptr<Strategy> factory();
#define BPBENCH_DIST_STRATEGY(name, factory) \
  std::unique_ptr<dist::DistStrategy> factory(const dist::DistOptions& options);
#include "impls/strategies.def"
#undef BPBENCH_STRATEGY
#undef BPBENCH_DIST_STRATEGY

namespace {
using Factory = std::unique_ptr<Strategy> (*)();
using DistFactory = std::unique_ptr<dist::DistStrategy> (*)(const dist::DistOptions&);
struct StrategyEntry {
  std::string name;
  Factory make = nullptr;           // a single-process strategy
  DistFactory make_dist = nullptr;  // a distributed one

  std::unique_ptr<Strategy> operator()() const {
    return make ? make() : make_dist(dist::default_dist_options());
  }
};

const std::vector<StrategyEntry>& strategy_registry() {
  static const std::vector<StrategyEntry> entries = {
#define BPBENCH_STRATEGY(name, factory) {name, factory},
#define BPBENCH_DIST_STRATEGY(name, factory) {name, nullptr, factory},
#include "impls/strategies.def"
#undef BPBENCH_STRATEGY
#undef BPBENCH_DIST_STRATEGY
  };
  return entries;
}
}  // namespace

torch::Tensor Strategy::step(const StepInputs& in) const {
  RouterBalance& balance = *in.model.router_balance;
  balance.begin_step();
  const torch::Tensor loss = forward_backward(in);
  return balance.on() ? loss + balance.loss() : loss;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& entry : strategy_registry()) names.push_back(entry.name);
  return names;
}

std::vector<std::string> mesh_strategy_names() {
  std::vector<std::string> names;
  for (const auto& entry : strategy_registry())
    if (entry()->runs_on_mesh()) names.push_back(entry.name);
  return names;
}

std::vector<std::string> offloading_strategy_names() {
  std::vector<std::string> names;
  for (const auto& entry : strategy_registry())
    if (entry()->uses_offload()) names.push_back(entry.name);
  return names;
}

std::vector<std::string> estimated_strategy_names() {
  std::vector<std::string> names;
  for (const auto& entry : strategy_registry())
    if (entry()->estimated()) names.push_back(entry.name);
  return names;
}

std::vector<std::string> strategies_where_sequence_parallel(const std::vector<std::string>& names,
                                                            bool sequence_parallel) {
  std::vector<std::string> out;
  for (const auto& name : names)
    if (make_strategy(name)->sequence_parallel() == sequence_parallel) out.push_back(name);
  return out;
}

const std::string& reference_strategy_name() {
  static const std::string name = "plain";
  return name;
}

const std::string& peer_comparison_strategy_name() {
  static const std::string name = "streambp";
  return name;
}

std::vector<PhaseEstimate> Strategy::memory_phases(const MemoryTerms&, const Partitioning&) const {
  throw std::logic_error(fmt::format("{} has no memory estimate", name()));
}

// The one list of peers is impls/peers/registry.py's PEERS; the build reads their names from it
// (scripts/cmake/peer_names.cmake).
std::vector<std::string> peer_names() {
  return {
#include "peer_names.inc"  // generated in the build folder
  };
}

bool is_peer(const std::string& impl) {
  const auto peers = peer_names();
  return std::find(peers.begin(), peers.end(), impl) != peers.end();
}

std::vector<std::string> recorded_impl_names() {
  std::vector<std::string> names = strategy_names();
  for (auto& peer : peer_names()) names.push_back(std::move(peer));
  return names;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name) {
  for (const auto& entry : strategy_registry())
    if (entry.name == name) return entry();
  throw std::invalid_argument(
      fmt::format("unknown impl '{}' (valid: {})", name, fmt::join(strategy_names(), ", ")));
}

std::unique_ptr<dist::DistStrategy> make_distributed_strategy(const std::string& name,
                                                              const dist::DistOptions& options) {
  std::vector<std::string> distributed;
  for (const auto& entry : strategy_registry()) {
    if (entry.make_dist && entry.name == name) return entry.make_dist(options);
    if (entry.make_dist) distributed.push_back(entry.name);
  }
  throw std::invalid_argument(
      fmt::format("unknown distributed impl '{}' (valid: {})", name, fmt::join(distributed, ", ")));
}

}  // namespace bpbench
