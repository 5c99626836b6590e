// registry.cpp: the one list of strategies, and the peers' names.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "impls/machinery/dist_common.h"
#include "impls/strategy.h"

namespace bpbench {

// One row per strategy, beside its factory's declaration (the factory is defined in the strategy's file):
// adding a strategy is its file plus its line here. A distributed strategy's factory takes the options of
// its step (dist_common.h); the registry gives it default_dist_options().
std::unique_ptr<Strategy> make_plain_strategy();
std::unique_ptr<Strategy> make_checkpoint_strategy();
std::unique_ptr<Strategy> make_checkpoint_chunked_head_strategy();
std::unique_ptr<Strategy> make_mst_strategy();
std::unique_ptr<Strategy> make_streambp_strategy();
std::unique_ptr<dist::DistStrategy> make_streambp_dist(const dist::DistOptions& options);
std::unique_ptr<dist::DistStrategy> make_checkpoint_dist(const dist::DistOptions& options);
std::unique_ptr<dist::DistStrategy> make_ulysses(const dist::DistOptions& options);
std::unique_ptr<dist::DistStrategy> make_streambp_ulysses(const dist::DistOptions& options);

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
      {"plain", make_plain_strategy},
      {"checkpoint", make_checkpoint_strategy},
      {"checkpoint-chunked-head", make_checkpoint_chunked_head_strategy},
      {"mst", make_mst_strategy},
      {"streambp", make_streambp_strategy},
      {"streambp-dist", nullptr, make_streambp_dist},
      {"checkpoint-dist", nullptr, make_checkpoint_dist},
      {"ulysses", nullptr, make_ulysses},
      {"streambp-ulysses", nullptr, make_streambp_ulysses},
  };
  return entries;
}
}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& entry : strategy_registry()) names.push_back(entry.name);
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

std::vector<std::string> peer_names() {
  return {"hf-checkpoint", "hf",         "hf-checkpoint-offload", "streambp-official", "liger-flce",
          "cce",           "alst-tiled", "alst-ulysses"};
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
