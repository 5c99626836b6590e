// comm_setup.cpp: what surrounds the Communicator (comm.h): the counters of its collectives, its
// configuration from torchrun-style environment variables, and the process-wide group that the distributed
// strategies use when no launcher set one.
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "impls/machinery/comm.h"

namespace bpbench::dist {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, std::optional<int> fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (fallback) return *fallback;
    throw CommError(
        fmt::format("distributed run: environment variable {} is not set (torchrun-style "
                    "launch needs RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)",
                    name));
  }
  try {
    size_t used = 0;
    const int value = std::stoi(v, &used);
    if (used != std::strlen(v)) throw std::invalid_argument(v);
    return value;
  } catch (const std::exception&) {
    throw CommError(fmt::format("distributed run: environment variable {}='{}' is not an integer", name, v));
  }
}

std::atomic<Communicator*> g_current{nullptr};
std::mutex g_owned_mutex;
std::unique_ptr<Communicator> g_owned;  // the group communicator_or_init_from_env made, until shut down

}  // namespace

// ---- stats ------------------------------------------------------------------------------------------------

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_gather:
      return "all_gather";
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::broadcast:
      return "broadcast";
    case Collective::all_to_all:
      return "all_to_all";
    case Collective::barrier:
      return "barrier";
    case Collective::send_recv:
      return "send_recv";
  }
  return "?";
}

int64_t CommStats::total_calls() const {
  int64_t n = 0;
  for (const auto& s : by_kind) n += s.calls;
  return n;
}

int64_t CommStats::total_bytes() const {
  int64_t n = 0;
  for (const auto& s : by_kind) n += s.bytes;
  return n;
}

CommStats CommStats::since(const CommStats& before) const {
  CommStats d = *this;
  for (int k = 0; k < kCollectiveCount; ++k) {
    auto& a = d.by_kind[k];
    const auto& b = before.by_kind[k];
    a.calls -= b.calls;
    a.bytes -= b.bytes;
    a.wire_bytes -= b.wire_bytes;
    a.physical_calls -= b.physical_calls;
    a.physical_bytes -= b.physical_bytes;
    a.seconds -= b.seconds;
  }
  return d;
}

CommStats& CommStats::operator+=(const CommStats& other) {
  for (int k = 0; k < kCollectiveCount; ++k) {
    auto& a = by_kind[k];
    const auto& b = other.by_kind[k];
    a.calls += b.calls;
    a.bytes += b.bytes;
    a.wire_bytes += b.wire_bytes;
    if (a.physical.empty()) a.physical = b.physical;
    a.physical_calls += b.physical_calls;
    a.physical_bytes += b.physical_bytes;
    a.seconds += b.seconds;
  }
  return *this;
}

nlohmann::json CommStats::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (int k = 0; k < kCollectiveCount; ++k) {
    const auto& s = by_kind[k];
    j[collective_name(static_cast<Collective>(k))] = {{"calls", s.calls},
                                                      {"bytes", s.bytes},
                                                      {"wire_bytes", s.wire_bytes},
                                                      {"physical", s.physical},
                                                      {"physical_calls", s.physical_calls},
                                                      {"physical_bytes", s.physical_bytes},
                                                      {"seconds", s.seconds}};
  }
  return j;
}

// ---- configuration ----------------------------------------------------------------------------------------

void check_nccl_gpu(const std::string& who, int local_rank, int visible_gpus) {
  if (visible_gpus == 0)
    throw CommError(
        fmt::format("{}: LOCAL_RANK {} needs a GPU, but 0 CUDA devices are visible (NCCL runs "
                    "on GPUs only; use gloo)",
                    who, local_rank));
  if (local_rank < 0 || local_rank >= visible_gpus)
    throw CommError(fmt::format(
        "{}: LOCAL_RANK {} needs GPU {} of its own, but only {} CUDA device{} visible: NCCL cannot run two "
        "ranks on one GPU; start at most {} rank{} per machine, or use gloo",
        who, local_rank, local_rank, visible_gpus, visible_gpus == 1 ? " is" : "s are", visible_gpus,
        visible_gpus == 1 ? "" : "s"));
}

std::chrono::milliseconds default_timeout() {
  const char* v = std::getenv("BPBENCH_DIST_TIMEOUT_S");
  if (!v || !*v) return std::chrono::milliseconds(60000);
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0))
    throw CommError(fmt::format("BPBENCH_DIST_TIMEOUT_S='{}' is not a positive number of seconds", v));
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

bool CommConfig::env_present() {
  return std::getenv("RANK") && std::getenv("WORLD_SIZE");
}

CommConfig CommConfig::from_env() {
  CommConfig c;
  c.rank = env_int("RANK", std::nullopt);
  c.world_size = env_int("WORLD_SIZE", std::nullopt);
  c.local_rank = env_int("LOCAL_RANK", c.rank);
  c.master_addr = env_or("MASTER_ADDR", "127.0.0.1");
  c.master_port = env_int("MASTER_PORT", 29500);
  c.store_file = env_or("BPBENCH_DIST_STORE_FILE", "");
  c.store_prefix = env_or("BPBENCH_DIST_STORE_PREFIX", "");
  c.backend = env_or("BPBENCH_DIST_BACKEND", "auto");
  c.timeout = default_timeout();
  return c;
}

// ---- the process-wide group -------------------------------------------------------------------------------

Communicator* current_communicator() {
  return g_current.load();
}

void set_current_communicator(Communicator* comm) {
  g_current.store(comm);
}

Communicator& communicator_or_init_from_env(const std::string& device) {
  std::lock_guard<std::mutex> lock(g_owned_mutex);
  auto& owned = g_owned;
  if (Communicator* c = current_communicator()) return *c;
  if (!CommConfig::env_present())
    throw CommError(
        "distributed strategy without a process group: set world_size in the scenario, or launch with "
        "torchrun-style RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  CommConfig config = CommConfig::from_env();
  config.device = device;
  owned = Communicator::create(config);
  set_current_communicator(owned.get());
  return *owned;
}

void shutdown_owned_communicator() {
  std::lock_guard<std::mutex> lock(g_owned_mutex);
  if (!g_owned) return;
  if (current_communicator() == g_owned.get()) set_current_communicator(nullptr);
  g_owned->shutdown();
  g_owned.reset();
}

}  // namespace bpbench::dist
