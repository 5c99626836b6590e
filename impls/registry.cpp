// registry.cpp: the one list of strategies. Adding a strategy is one file plus one line here.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <utility>

#include "impls/strategy.h"

namespace bpbench {

std::unique_ptr<Strategy> make_plain_strategy();
std::unique_ptr<Strategy> make_checkpoint_strategy();
std::unique_ptr<Strategy> make_checkpoint_chunked_head_strategy();
std::unique_ptr<Strategy> make_mst_strategy();
std::unique_ptr<Strategy> make_streambp_strategy();
std::unique_ptr<Strategy> make_streambp_dist_strategy();     // impls/dist_common.cpp, default options
std::unique_ptr<Strategy> make_checkpoint_dist_strategy();   // impls/dist_common.cpp, default options
std::unique_ptr<Strategy> make_ulysses_strategy();           // impls/dist_common.cpp, default options
std::unique_ptr<Strategy> make_streambp_ulysses_strategy();  // impls/dist_common.cpp, default options

namespace {
using Factory = std::unique_ptr<Strategy> (*)();
const std::vector<std::pair<std::string, Factory>>& strategy_registry() {
  static const std::vector<std::pair<std::string, Factory>> entries = {
      {"plain", make_plain_strategy},
      {"checkpoint", make_checkpoint_strategy},
      {"checkpoint-chunked-head", make_checkpoint_chunked_head_strategy},
      {"mst", make_mst_strategy},
      {"streambp", make_streambp_strategy},
      {"streambp-dist", make_streambp_dist_strategy},
      {"checkpoint-dist", make_checkpoint_dist_strategy},
      {"ulysses", make_ulysses_strategy},
      {"streambp-ulysses", make_streambp_ulysses_strategy},
  };
  return entries;
}
}  // namespace

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : strategy_registry()) names.push_back(name);
  return names;
}

std::vector<std::string> offloading_strategy_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : strategy_registry())
    if (factory()->uses_offload()) names.push_back(name);
  return names;
}

std::vector<std::string> estimated_strategy_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : strategy_registry())
    if (factory()->estimated()) names.push_back(name);
  return names;
}

const std::string& reference_strategy_name() {
  static const std::string name = "plain";
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
  for (const auto& [n, factory] : strategy_registry())
    if (n == name) return factory();
  throw std::invalid_argument(
      fmt::format("unknown impl '{}' (valid: {})", name, fmt::join(strategy_names(), ", ")));
}

}  // namespace bpbench
