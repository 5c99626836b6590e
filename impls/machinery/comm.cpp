// comm.cpp: c10d process group creation (TCPStore/FileStore rendezvous; Gloo, or NCCL in a CUDA build) and
// the counted, bounded, loudly failing collectives of the Communicator (see comm.h for the conventions). The
// counters, the configuration from the environment and the process-wide group: comm_setup.cpp; the device
// timing of NCCL collectives: comm_spans.h.
//
// The engines are c10d::Backend objects (ProcessGroupGloo, ProcessGroupNCCL). On Gloo a reduce_scatter runs
// as an in-place all_reduce of the full buffer followed by copying out the local shard: Gloo's own
// reduce_scatter takes lists of tensors, and the counted "physical" collective stays the one the paper's
// bandwidth model assumes.
//
// The wheel's libtorch_cpu exports ProcessGroupGloo but ships no gloo headers: Debian's libgloo-dev provides
// them. Only torch's own functions touch gloo objects (we hold them through shared_ptr), so the header
// version needs to agree with the wheel's only on the declarations ProcessGroupGloo.hpp uses; the 2- and
// 3-rank tests in tests/impls/test_dist.cpp are the proof.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // ProcessGroupGloo.hpp is guarded by this macro
#endif
#include "impls/machinery/comm.h"
#include "impls/machinery/comm_messages.h"
#include "impls/machinery/comm_spans.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include <thread>
#include <vector>

#ifdef BPBENCH_WITH_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace bpbench::dist {
namespace {

// A tensor over `t`'s memory that does not own it, for Gloo. ProcessGroupGloo's worker thread lets go of a
// collective's tensors only after wait() has returned (runLoop resets its work item after marking it
// complete), so a buffer handed over itself may be freed on that thread a moment later, when its owner has
// already dropped it: nondeterministically inside the next phase (a layer's gradient bucket inside the next
// layer's peak, the last one in the next step's base), depending on how the threads were scheduled. Handed
// this alias, the buffer is freed when its owner lets go, as the estimate counts it. The work has finished
// with the memory when wait() returns; only the reference outlives it. (Not for NCCL: its work keeps the
// tensors it was given until the GPU is done with them, which the caching allocator relies on.)
at::Tensor borrowed(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options());
}

using Engine = c10d::Backend;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// A queued NCCL collective whose device seconds are not read yet.
struct PendingSpan {
  Collective kind = Collective::barrier;
  std::string what;
  int64_t bytes = 0;
  SpanEventsPtr events;
};

}  // namespace

// ---- communicator -----------------------------------------------------------------------------------------

struct Communicator::Impl {
  CommConfig config;
  std::string backend;
  torch::Device device{torch::kCPU};
  c10::intrusive_ptr<c10d::Store> store;  // declared before pg: destroyed after it
  c10::intrusive_ptr<Engine> pg;
  CommStats stats;
  std::optional<PendingSpan> pending;  // nccl: the collective in flight, seconds not yet read
  std::vector<SpanEventsPtr> spare;    // events of settled collectives, recorded again later
  // Subgroups made from this group (Communicator::subgroup), by their store prefix; destroyed before the
  // store they share.
  std::map<std::string, std::unique_ptr<Communicator>> subgroups;

  std::string group;  // a subgroup's name (Communicator::subgroup); empty for the whole group

  std::string who() const {
    return group.empty() ? fmt::format("rank {} of {} ({})", config.rank, config.world_size, backend)
                         : fmt::format("rank {} of {} in subgroup '{}' ({})", config.rank, config.world_size,
                                       group, backend);
  }

  // The group's engine on its store: Gloo (on the loopback device where the rendezvous is local, else
  // GLOO_SOCKET_IFNAME's or the default), or NCCL on the rank's GPU (one per local rank, checked by
  // create()), whose own watchdog enforces the timeout on the device side. Every rank of the group calls it.
  void make_engine() {
    if (backend == "gloo") {
      auto opts = c10d::ProcessGroupGloo::Options::create(config.timeout);
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (is_loopback(config.master_addr))
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, config.rank, config.world_size, opts);
    } else {
#ifdef BPBENCH_WITH_CUDA
      c10::cuda::set_device(device.index());
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = config.timeout;
      pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, config.rank, config.world_size, opts);
#endif
    }
  }

  std::string failure(Collective kind, const std::string& what, int64_t bytes, double after,
                      const std::string& msg) const {
    return fmt::format("{}: {} '{}' of {} failed after {:.1f} s: {}{}", who(), collective_name(kind), what,
                       format_bytes(bytes), after, msg, hint_for(msg, config.timeout));
  }

  // Device-timed (comm.h): NCCL's collectives, but not its barrier, a host rendezvous.
  bool device_timed(Collective kind) const {
    return backend == "nccl" && kind != Collective::barrier;
  }

  // Runs one collective: counts it, bounds it, turns any failure into one CommError line.
  template <class Body>
  void run(Collective kind, const std::string& what, int64_t bytes, Body&& body) {
    const bool on_device = device_timed(kind);
    if (on_device) settle_pending();  // one collective in flight: the previous one has run
    const auto t0 = Clock::now();
    SpanEventsPtr span;
    try {
      if (on_device) {
        span = take_events();
        record_start(*span, device);
      }
      body();
      if (on_device) record_end(*span, device);
    } catch (const std::exception& e) {
      if (span) spare.push_back(std::move(span));
      throw CommError(failure(kind, what, bytes, seconds_since(t0), error_text(e)));
    }
    if (on_device)
      pending = PendingSpan{kind, what, bytes, std::move(span)};
    else
      stats[kind].seconds += seconds_since(t0);
  }

  // After queuing a collective. nccl: the current stream waits for NCCL's; the host does not (no timeout
  // argument: with one, WorkNCCL::wait blocks the host until the collective is done). gloo: the host waits,
  // bounded.
  void wait(const c10::intrusive_ptr<c10d::Work>& work) {
    if (backend == "nccl")
      work->wait();
    else
      work->wait(config.timeout);
  }

  SpanEventsPtr take_events() {
    if (spare.empty()) return make_span_events();
    auto e = std::move(spare.back());
    spare.pop_back();
    return e;
  }

  // Waits for the collective in flight to run on the GPU and adds its device seconds. The host yields
  // rather than sleeps: a sleep's latency would hold back the host that feeds the GPU, and where settle()
  // ends a step it would add to the step's time. Bounded by the timeout, a backstop behind NCCL's watchdog,
  // which counts from when the collective was queued.
  void settle_pending() {
    if (!pending) return;
    const auto t0 = Clock::now();
    while (!span_done(*pending->events)) {
      if (Clock::now() - t0 > config.timeout) {
        const PendingSpan p = std::move(*pending);
        pending.reset();
        throw CommError(failure(p.kind, p.what, p.bytes, seconds_since(t0),
                                "still running on the GPU when the timeout passed"));
      }
      std::this_thread::yield();
    }
    stats[pending->kind].seconds += span_seconds(*pending->events);
    spare.push_back(std::move(pending->events));
    pending.reset();
  }

  void count(Collective kind, int64_t bytes, double wire_factor, const char* physical,
             int64_t physical_bytes) {
    auto& s = stats[kind];
    s.calls += 1;
    s.bytes += bytes;
    s.wire_bytes += static_cast<int64_t>(wire_factor * static_cast<double>(bytes));
    s.physical = physical;
    s.physical_calls += 1;
    s.physical_bytes += physical_bytes;
  }

  double ring_fraction() const {  // (R-1)/R
    return static_cast<double>(config.world_size - 1) / config.world_size;
  }
};

std::unique_ptr<Communicator> Communicator::create(const CommConfig& config) {
  if (config.world_size < 1 || config.rank < 0 || config.rank >= config.world_size)
    throw CommError(
        fmt::format("distributed run: RANK={} is not in [0, WORLD_SIZE={})", config.rank, config.world_size));
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  const bool cuda = config.device == "cuda";
  impl->backend = config.backend == "auto" ? (cuda ? "nccl" : "gloo") : config.backend;
  if (impl->backend != "gloo" && impl->backend != "nccl")
    throw CommError(
        fmt::format("distributed run: unknown backend '{}' (valid: auto, gloo, nccl)", config.backend));
#ifndef BPBENCH_WITH_CUDA
  if (impl->backend == "nccl")
    throw CommError(
        "distributed run: backend nccl needs a CUDA build of bpbench (BPBENCH_WITH_CUDA); use gloo");
#endif
  if (impl->backend == "nccl") {
    // NCCL cannot run two ranks on one GPU (it hangs or fails deep in its initialisation): each local rank
    // needs its own. Checked before the rendezvous, so the rank fails at once.
    check_nccl_gpu(impl->who(), config.local_rank, visible_gpus());
    impl->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(config.local_rank));
  } else {
    impl->device = torch::Device(cuda ? torch::kCUDA : torch::kCPU);
  }
  const std::string where = config.store_file.empty()
                                ? fmt::format("TCPStore {}:{}", config.master_addr, config.master_port)
                                : fmt::format("FileStore {}", config.store_file);
  const auto t0 = Clock::now();
  try {
    if (config.store_file.empty()) {
      c10d::TCPStoreOptions o;
      o.port = static_cast<uint16_t>(config.master_port);
      const bool served = !config.store_prefix.empty();
      o.isServer = config.rank == 0 && !served;
      o.numWorkers = served ? std::nullopt : std::optional<size_t>(static_cast<size_t>(config.world_size));
      o.waitWorkers = !served;
      o.timeout = config.timeout;
      impl->store = c10::make_intrusive<c10d::TCPStore>(config.master_addr, o);
      if (served) impl->store = c10::make_intrusive<c10d::PrefixStore>(config.store_prefix, impl->store);
    } else {
      impl->store = c10::make_intrusive<c10d::FileStore>(config.store_file, config.world_size);
    }
    impl->store->setTimeout(config.timeout);

    impl->make_engine();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string msg = error_text(e);
    throw CommError(
        fmt::format("rank {} of {} ({}): rendezvous through {} failed after {:.1f} s (timeout {} s, "
                    "BPBENCH_DIST_TIMEOUT_S): "
                    "{}; every one of the {} ranks must start and reach the same MASTER_ADDR:MASTER_PORT",
                    config.rank, config.world_size, impl->backend, where, seconds_since(t0),
                    config.timeout.count() / 1000.0, msg, config.world_size));
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator& Communicator::subgroup(const std::vector<int>& members, const std::string& name) {
  const auto me = std::find(members.begin(), members.end(), rank());
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  if (me == members.end() || !distinct || sorted.front() < 0 || sorted.back() >= world_size())
    throw CommError(
        fmt::format("{}: subgroup '{}' of ranks [{}] is not a list of distinct ranks of 0..{} "
                    "that holds this one",
                    impl_->who(), name, fmt::join(members, ", "), world_size() - 1));
  // Disjoint groups of one name (each Ulysses group of a mesh) rendezvous apart: the members are in the key.
  const std::string prefix = fmt::format("subgroup/{}/{}", name, fmt::join(members, ","));
  if (auto it = impl_->subgroups.find(prefix); it != impl_->subgroups.end()) return *it->second;
  auto impl = std::make_unique<Impl>();
  impl->config = impl_->config;
  impl->config.rank = static_cast<int>(me - members.begin());
  impl->config.world_size = static_cast<int>(members.size());
  impl->backend = impl_->backend;
  impl->device = impl_->device;
  impl->group = name;
  impl->store = c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store);
  const auto t0 = Clock::now();
  try {
    impl->make_engine();
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{}: joining subgroup '{}' of ranks [{}] failed after {:.1f} s: {}",
                                impl_->who(), name, fmt::join(members, ", "), seconds_since(t0),
                                error_text(e)));
  }
  auto& group = impl_->subgroups[prefix];
  group.reset(new Communicator(std::move(impl)));
  return *group;
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

void Communicator::shutdown() {
  for (auto& [prefix, group] : impl_->subgroups) group->shutdown();
  if (!impl_->pg) return;
  try {
    impl_->settle_pending();
    // NCCL's communicators and watchdog thread end here, while the CUDA runtime is still up; left to the
    // group's destructor at static teardown they can hang the rank's exit (after the CUDA context is gone).
    impl_->pg->shutdown();
  } catch (const std::exception&) {
    // Shutting down after a failed collective may throw again; the rank is leaving either way.
  }
  impl_->pg.reset();
}

int Communicator::rank() const {
  return impl_->config.rank;
}
int Communicator::world_size() const {
  return impl_->config.world_size;
}
const std::string& Communicator::backend() const {
  return impl_->backend;
}
std::chrono::milliseconds Communicator::timeout() const {
  return impl_->config.timeout;
}
torch::Device Communicator::device() const {
  return impl_->device;
}
const CommStats& Communicator::stats() const {
  return impl_->stats;
}
CommStats Communicator::stats_with_subgroups() const {
  CommStats all = impl_->stats;
  for (const auto& [prefix, group] : impl_->subgroups) all += group->stats_with_subgroups();
  return all;
}
void Communicator::settle() {
  impl_->settle_pending();
  for (auto& [prefix, group] : impl_->subgroups) group->settle();
}
void Communicator::reset_stats() {
  Impl& s = *impl_;
  if (s.pending) s.spare.push_back(std::move(s.pending->events));
  s.pending.reset();
  s.stats = CommStats{};
  for (auto& [prefix, group] : s.subgroups) group->reset_stats();
}

torch::Tensor Communicator::reduce_scatter(torch::Tensor input, ReduceOp op, const std::string& what) {
  Impl& s = *impl_;
  const int64_t R = world_size(), n = input.numel(), m = n / R;
  TORCH_CHECK(input.dim() == 1 && input.is_contiguous() && n % R == 0,
              "reduce_scatter needs a contiguous 1-d input whose size is a multiple of the world size, got ",
              input.sizes());
  const int64_t bytes = n * static_cast<int64_t>(input.element_size());
  torch::Tensor shard;
  s.run(Collective::reduce_scatter, what, bytes, [&] {
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = s.config.timeout;
    if (s.backend == "gloo") {
      // No reduce_scatter in Gloo: reduce everything in place, keep our shard.
      std::vector<at::Tensor> tensors{borrowed(input)};
      s.wait(s.pg->allreduce(tensors, o));
      shard = input.narrow(0, rank() * m, m).clone();
    } else {
      c10d::ReduceScatterOptions ro;
      ro.reduceOp = c10d::ReduceOp::SUM;
      ro.timeout = s.config.timeout;
      shard = torch::empty({m}, input.options());
      s.wait(s.pg->_reduce_scatter_base(shard, input, ro));
    }
  });
  if (op == ReduceOp::avg) shard.div_(static_cast<double>(R));
  const bool gloo = s.backend == "gloo";
  s.count(Collective::reduce_scatter, bytes, gloo ? 2 * s.ring_fraction() : s.ring_fraction(),
          gloo ? "all_reduce" : "reduce_scatter", bytes);
  return shard;
}

torch::Tensor Communicator::all_gather(const torch::Tensor& shard, const std::string& what) {
  Impl& s = *impl_;
  const int64_t R = world_size(), m = shard.numel();
  TORCH_CHECK(shard.dim() == 1 && shard.is_contiguous(), "all_gather needs a contiguous 1-d shard, got ",
              shard.sizes());
  auto out = torch::empty({R * m}, shard.options());
  const int64_t bytes = R * m * static_cast<int64_t>(shard.element_size());
  s.run(Collective::all_gather, what, bytes, [&] {
    c10d::AllgatherOptions o;
    o.timeout = s.config.timeout;
    if (s.backend == "gloo") {
      std::vector<std::vector<at::Tensor>> outputs(1);
      for (int64_t r = 0; r < R; ++r) outputs[0].push_back(borrowed(out.narrow(0, r * m, m)));
      std::vector<at::Tensor> inputs{borrowed(shard)};
      s.wait(s.pg->allgather(outputs, inputs, o));
    } else {
      auto in = shard;
      s.wait(s.pg->_allgather_base(out, in, o));
    }
  });
  s.count(Collective::all_gather, bytes, s.ring_fraction(), "all_gather", bytes);
  return out;
}

void Communicator::all_reduce(torch::Tensor& tensor, ReduceOp op, const std::string& what) {
  Impl& s = *impl_;
  TORCH_CHECK(tensor.is_contiguous(), "all_reduce needs a contiguous tensor");
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  s.run(Collective::all_reduce, what, bytes, [&] {
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = s.config.timeout;
    std::vector<at::Tensor> tensors{s.backend == "gloo" ? borrowed(tensor) : tensor};  // nccl keeps its own
    s.wait(s.pg->allreduce(tensors, o));
  });
  if (op == ReduceOp::avg) tensor.div_(static_cast<double>(world_size()));
  s.count(Collective::all_reduce, bytes, 2 * s.ring_fraction(), "all_reduce", bytes);
}

void Communicator::broadcast(torch::Tensor& tensor, int root, const std::string& what) {
  Impl& s = *impl_;
  TORCH_CHECK(tensor.is_contiguous(), "broadcast needs a contiguous tensor");
  const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
  s.run(Collective::broadcast, what, bytes, [&] {
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = s.config.timeout;
    std::vector<at::Tensor> tensors{s.backend == "gloo" ? borrowed(tensor) : tensor};
    s.wait(s.pg->broadcast(tensors, o));
  });
  s.count(Collective::broadcast, bytes, rank() == root && world_size() > 1 ? 1.0 : 0.0, "broadcast", bytes);
}

torch::Tensor Communicator::all_to_all(const torch::Tensor& input, const std::string& what) {
  Impl& s = *impl_;
  const int64_t R = world_size();
  TORCH_CHECK(input.is_contiguous() && input.dim() >= 1 && input.size(0) % R == 0,
              "all_to_all needs a contiguous tensor whose first dimension is a multiple of the world size, "
              "got ",
              input.sizes());
  auto out = torch::empty_like(input);
  const int64_t bytes = input.numel() * static_cast<int64_t>(input.element_size());
  s.run(Collective::all_to_all, what, bytes, [&] {
    c10d::AllToAllOptions o;
    o.timeout = s.config.timeout;
    std::vector<int64_t> equal_splits;  // empty: R equal blocks of the first dimension
    auto in = s.backend == "gloo" ? borrowed(input) : input;
    auto to = s.backend == "gloo" ? borrowed(out) : out;
    s.wait(s.pg->alltoall_base(to, in, equal_splits, equal_splits, o));
  });
  s.count(Collective::all_to_all, bytes, s.ring_fraction(), "all_to_all", bytes);
  return out;
}

torch::Tensor Communicator::send_recv(const torch::Tensor& send, int to, int from, const std::string& what) {
  Impl& s = *impl_;
  const int R = world_size();
  TORCH_CHECK(send.is_contiguous(), "send_recv needs a contiguous tensor");
  TORCH_CHECK(to >= 0 && to < R && from >= 0 && from < R && to != rank() && from != rank(),
              "send_recv needs two other ranks in [0, ", R, "), got to = ", to, " and from = ", from,
              " on rank ", rank());
  auto received = torch::empty_like(send);
  const int64_t bytes = send.numel() * static_cast<int64_t>(send.element_size());
  s.run(Collective::send_recv, fmt::format("{} (to rank {}, from rank {})", what, to, from), bytes, [&] {
    constexpr int kTag = 0;  // one exchange in flight at a time: each call waits for both halves
    std::vector<at::Tensor> out{s.backend == "gloo" ? borrowed(send) : send};
    std::vector<at::Tensor> in{s.backend == "gloo" ? borrowed(received) : received};
    if (s.backend == "gloo") {
      auto sent = s.pg->send(out, to, kTag);
      auto got = s.pg->recv(in, from, kTag);
      s.wait(sent);
      s.wait(got);
    } else {
      s.pg->startCoalescing();
      s.pg->send(out, to, kTag);
      s.pg->recv(in, from, kTag);
      s.wait(s.pg->endCoalescing());
    }
  });
  s.count(Collective::send_recv, bytes, 1.0, "send_recv", bytes);
  return received;
}

void Communicator::barrier(const std::string& what) {
  Impl& s = *impl_;
  s.run(Collective::barrier, what, 0, [&] {
    c10d::BarrierOptions o;
    o.timeout = s.config.timeout;
    // NCCL's barrier is an all_reduce on a GPU it guesses from the rank unless told: this rank's.
    if (s.backend == "nccl") o.device_ids = {s.device.index()};
    // Both backends: the host waits, bounded (a rendezvous).
    s.pg->barrier(o)->wait(s.config.timeout);
  });
  s.count(Collective::barrier, 0, 0.0, "barrier", 0);
}

}  // namespace bpbench::dist
