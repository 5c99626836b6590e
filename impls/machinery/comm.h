// comm.h: the process group of the distributed strategies, and a Communicator that counts every collective.
//
// The engine is c10d from LibTorch: Gloo on CPU, NCCL on GPU (only in a CUDA build). Rendezvous goes through
// c10d's TCPStore (or a FileStore), configured the torchrun way (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT), so torchrun, mpirun wrappers, a batch scheduler or `bpbench run` (world_size > 1) can start
// it.
//
// Every collective is counted per kind: logical calls and bytes (what the algorithm asked for), and the
// physical op that carried it (Gloo in LibTorch 1.13 has no reduce_scatter: it runs as an all_reduce whose
// local shard is kept; that is one logical reduce_scatter call and one physical all_reduce call). Byte
// conventions, per call, n = elements of the FULL (unsharded) buffer, s = element size:
//   reduce_scatter  n*s (the input)      all_gather  n*s (the output)    all_reduce, broadcast  n*s
//   all_to_all      n*s (the input, = the output)                       barrier                0
//   send_recv       n*s (the tensor sent, = the one received)
// wire_bytes estimates what this rank sends with ring algorithms over R ranks: reduce_scatter and all_gather
// (R-1)/R n s, all_reduce 2 (R-1)/R n s, broadcast n s at the root; all_to_all sends (R-1)/R n s directly,
// send_recv n s to its one peer.
//
// Failures are bounded and loud: the store and the process group time out (default 60 s; env
// BPBENCH_DIST_TIMEOUT_S), and any failure is rethrown as one CommError line naming the rank, the collective
// and its context ("rank 1 of 2 (gloo): reduce_scatter 'layer 3 gradients' of 1.2 MB failed ...").
//
// Where the host waits, and what `seconds` is, per backend:
//   gloo  Every collective completes on the host before its call returns (bounded by the timeout), so
//         `seconds` is host wall time inside the call, waiting for peers included.
//   nccl  A call queues the collective on NCCL's stream and makes the current (compute) stream wait for it
//         (work->wait() without a timeout: a timeout would block the host until the collective is done, so
//         that the GPU drains at every collective). `seconds` is device time, from two CUDA timing events on
//         the current stream around the collective: the first completes when the collective's inputs are
//         ready (where NCCL's stream starts from), the second when the current stream may go on past it.
//         NCCL's stream is idle at each start (every earlier collective was joined at once), so this is the
//         collective's own span on the device, waiting for peers included, and never the compute queued
//         before it. One collective is in flight at a time: before queuing one, the host waits until the
//         previous one has run and adds its seconds. By then the compute between the two is already queued,
//         so the GPU never runs dry; and the host stays at most one collective ahead of the GPU, which
//         matters because NCCL's watchdog counts a collective's timeout from when it was queued. The last
//         collective's seconds are added by settle(), which the step calls once it is over. A collective
//         that never finishes is ended by NCCL's watchdog after the process group's timeout; the host's own
//         waits give up after the same timeout with a CommError naming the collective.
//         barrier is the exception: a host rendezvous (the runner aligns the ranks' clocks with it), so it
//         blocks the host, bounded by the timeout, and counts host wall time.
//
// NCCL cannot run two ranks on one GPU: rank LOCAL_RANK uses GPU LOCAL_RANK, and a LOCAL_RANK at or past the
// number of visible GPUs is a CommError naming both numbers (never a hang in NCCL's initialisation).
#pragma once

#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace bpbench::dist {

// send_recv is point-to-point, not a collective, but it is counted, bounded and named like one.
enum class Collective : uint8_t {
  reduce_scatter,
  all_gather,
  all_reduce,
  broadcast,
  all_to_all,
  barrier,
  send_recv
};
inline constexpr int kCollectiveCount = 7;
const char* collective_name(Collective c);

// avg: the sum divided by the world size.
enum class ReduceOp : uint8_t { sum, avg };

struct CollectiveStats {
  int64_t calls = 0;           // logical calls
  int64_t bytes = 0;           // logical bytes (conventions above)
  int64_t wire_bytes = 0;      // estimated bytes this rank sent (ring algorithms)
  std::string physical;        // the engine op that carried it ("all_reduce" for Gloo's reduce_scatter)
  int64_t physical_calls = 0;  // engine calls
  int64_t physical_bytes = 0;  // bytes of the engine op's buffer
  double seconds = 0;          // gloo: host wall time; nccl: device time (see the header)
};

struct CommStats {
  std::array<CollectiveStats, kCollectiveCount> by_kind{};

  const CollectiveStats& operator[](Collective c) const { return by_kind[static_cast<int>(c)]; }
  CollectiveStats& operator[](Collective c) { return by_kind[static_cast<int>(c)]; }
  int64_t total_calls() const;
  int64_t total_bytes() const;
  CommStats since(const CommStats& before) const;  // this minus `before` (physical names kept)
  CommStats& operator+=(const CommStats& other);   // both ranks' (or groups') counts together
  nlohmann::json to_json() const;                  // {"reduce_scatter": {"calls":..,"bytes":..,...}, ...}
};

// A failed rendezvous or collective: one line, naming the rank and the operation.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CommConfig {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string store_file;  // non-empty: rendezvous through a c10d FileStore at this path
  // Non-empty: join a store that is already served at MASTER_ADDR:MASTER_PORT (every rank a client), under
  // this key prefix. A grid over launched ranks runs each distributed cell so (harness/run/grid_ranks.h).
  std::string store_prefix;
  std::string backend = "auto";              // auto (nccl on cuda, else gloo) | gloo | nccl
  std::string device = "cpu";                // where the tensors handed to collectives live: cpu | cuda
  std::chrono::milliseconds timeout{60000};  // store and process group

  // From RANK, WORLD_SIZE, LOCAL_RANK (default RANK), MASTER_ADDR (default 127.0.0.1), MASTER_PORT
  // (default 29500), BPBENCH_DIST_TIMEOUT_S (default 60), BPBENCH_DIST_BACKEND (default auto),
  // BPBENCH_DIST_STORE_FILE (default: TCPStore), BPBENCH_DIST_STORE_PREFIX (default: rank 0 serves). Throws
  // CommError naming a missing or malformed variable.
  static CommConfig from_env();
  static bool env_present();  // RANK and WORLD_SIZE are both set
};

// The default timeout: BPBENCH_DIST_TIMEOUT_S when set, else 60 s.
std::chrono::milliseconds default_timeout();

// nccl: throws CommError unless GPU `local_rank` exists among `visible_gpus` (NCCL cannot run two ranks on
// one GPU); `who` starts the message ("rank 1 of 2 (nccl)"). Communicator::create calls it before the
// rendezvous.
void check_nccl_gpu(const std::string& who, int local_rank, int visible_gpus);

class Communicator {
 public:
  // Joins the group: blocks until every rank has arrived or the timeout passes (then throws CommError).
  // nccl: first makes GPU LOCAL_RANK current; a LOCAL_RANK with no GPU of its own is a CommError.
  static std::unique_ptr<Communicator> create(const CommConfig& config);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  const std::string& backend() const;  // "gloo" | "nccl"
  std::chrono::milliseconds timeout() const;
  // Where this rank's tensors live: cuda:LOCAL_RANK for nccl (made the current device by create()); for gloo
  // the configured device, cpu (or cuda, the current one, where a caller hands Gloo CUDA tensors). The
  // runner creates the rank's memory recorder and timer for this device.
  torch::Device device() const;

  // `input` (n) contiguous, n a multiple of world_size. Returns this rank's shard (n / R): elements
  // [rank n/R, (rank+1) n/R) of the elementwise reduction over ranks. `input` is clobbered (Gloo reduces it
  // in place). `what` names the buffer in errors.
  torch::Tensor reduce_scatter(torch::Tensor input, ReduceOp op, const std::string& what);
  // `shard` (m) contiguous -> (R m): rank r's shard at [r m, (r+1) m).
  torch::Tensor all_gather(const torch::Tensor& shard, const std::string& what);
  void all_reduce(torch::Tensor& tensor, ReduceOp op, const std::string& what);  // in place, contiguous
  void broadcast(torch::Tensor& tensor, int root, const std::string& what);      // in place, contiguous
  // `input` contiguous, its first dimension a multiple of R: block r of it (rows [r n0/R, (r+1) n0/R) of the
  // first dimension) goes to rank r, and block r of the result (same shape) came from rank r. Sequence
  // parallelism's exchange of sequence shards for head shards (impls/machinery/sequence_parallel.h).
  torch::Tensor all_to_all(const torch::Tensor& input, const std::string& what);
  // Sends `send` (contiguous) to rank `to` and receives a tensor of its shape and dtype from rank `from`,
  // both at once (Gloo: a send and a receive in flight together; NCCL: one coalesced group, which is what
  // keeps a ring of them from deadlocking). Every rank in the exchange calls it with matching peers: ring
  // context parallelism passes K/V blocks with to = r + 1, from = r - 1 (mod R). `to` and `from` are other
  // ranks.
  torch::Tensor send_recv(const torch::Tensor& send, int to, int from, const std::string& what);
  void barrier(const std::string& what);
  // A communicator over some of this group's ranks: `members`, distinct ranks of this group with this rank
  // among them, every member passing the same list and `name` (and only members calling), joined through this
  // group's store under that name and the list (disjoint groups may share a name). Its rank is this rank's
  // index in `members`, its collectives are counted in its own stats(), and its errors name the subgroup. The
  // 2-D mesh's Ulysses and ring groups. Owned by this communicator: a later call with the same name and list
  // returns the same subgroup (a store's keys are joined once; every step of a run shares the groups). A list
  // without this rank, with a rank twice or out of range: CommError in one line.
  Communicator& subgroup(const std::vector<int>& members, const std::string& name);
  // Ends the process group (NCCL: its communicators and watchdog) now; nothing may be called after it. The
  // destructor does not: a rank calls this before it returns (shutdown_owned_communicator).
  void shutdown();

  // Counts of every collective so far on this group; seconds of every collective but the last one queued on
  // nccl, whose seconds settle() adds.
  const CommStats& stats() const;
  // What this rank did on this group and on every subgroup made from it (a step's traffic, whatever group
  // carried it).
  CommStats stats_with_subgroups() const;
  // nccl: waits (host, bounded by the timeout) until the last collective queued has run on the GPU, and adds
  // its device seconds to stats(); the subgroups' too. Call it when a step is over, never inside one: the
  // wait drains the GPU. Throws CommError naming a collective that has not finished within the timeout.
  // gloo: nothing to do.
  void settle();
  void reset_stats();  // zeroes stats() (the subgroups' too) and forgets collectives not yet settled

 private:
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The process group the distributed strategies use: set by whoever created it (a test, the runner). Null when
// none.
Communicator* current_communicator();
void set_current_communicator(Communicator* comm);

// current_communicator(), or when there is none and the torchrun environment is present, a process-wide one
// created from it (and made current) for tensors on `device` (cpu | cuda). Throws CommError when there is
// neither.
Communicator& communicator_or_init_from_env(const std::string& device = "cpu");
// Shuts down and frees the group communicator_or_init_from_env made, if any (no longer current): called by a
// rank before it returns, so that NCCL is not torn down in static destructors at exit, where it can hang.
void shutdown_owned_communicator();

}  // namespace bpbench::dist
