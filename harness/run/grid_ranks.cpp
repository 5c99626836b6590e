// grid_ranks.cpp: grid_ranks.h. Store keys, under the sitting's prefix:
//   plan                  rank 0's cells to run, or {"error": line}
//   alive/R               rank R's sign of life, a counter it adds to every half second
//   single/next           the next single-device cell to take (a shared counter)
//   dist/I/ready          ranks at the barrier before distributed cell I
//   dist/I/abort          set by rank 0 once cell I failed on some rank: the others stop theirs
//   file/I/R/PATH         a file that rank R's cell I wrote, for rank 0 to place at DIR/PATH
//   to_leader             a queue of messages to rank 0: start, record, rank_record, done
//   closed                rank 0 has every record: the ranks may leave
#include "harness/run/grid_ranks.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "harness/run/dist_launch.h"
#include "harness/run/run_detail.h"
#include "impls/machinery/comm.h"

namespace bpbench {

using nlohmann::json;
using namespace run_detail;
namespace fs = std::filesystem;

namespace {

constexpr auto kBeat = std::chrono::milliseconds(500);
constexpr auto kPoll = std::chrono::milliseconds(50);

// How long a rank may show no sign of life (and the grid's store calls may take): BPBENCH_GRID_TIMEOUT_S,
// else BPBENCH_DIST_TIMEOUT_S (the collectives' bound), else 60 s; at least 2 s (four missed beats).
std::chrono::milliseconds grid_timeout() {
  const auto t = env_seconds("BPBENCH_GRID_TIMEOUT_S").value_or(dist::default_timeout());
  return std::max<std::chrono::milliseconds>(t, std::chrono::seconds(2));
}

std::string prefix_of(const LaunchedRank& l) {
  return fmt::format("bpbench/grid/sitting-{}/", l.restart);
}

// The GPU a single-device cell of local rank `local_rank` takes: the LOCAL_RANK-th of CUDA_VISIBLE_DEVICES
// where that is set, else GPU LOCAL_RANK.
std::string gpu_of_local_rank(int64_t local_rank, const std::string& visible) {
  if (visible.empty()) return std::to_string(local_rank);
  std::vector<std::string> ids;
  for (size_t start = 0;;) {
    const size_t comma = visible.find(',', start);
    ids.push_back(visible.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return local_rank < static_cast<int64_t>(ids.size()) ? ids[static_cast<size_t>(local_rank)]
                                                       : std::to_string(local_rank);
}

// The other ranks' signs of life, as this rank last saw them change.
class Peers {
 public:
  Peers(GridStore& store, int64_t world, std::chrono::milliseconds stale)
      : store_(store),
        stale_(stale),
        last_(static_cast<size_t>(world), -1),
        changed_(static_cast<size_t>(world), Clock::now()) {}

  // GridError naming the first of `ranks` whose counter has not moved for the timeout.
  void check(const std::vector<int64_t>& ranks) {
    const auto now = Clock::now();
    if (now - checked_ < std::chrono::milliseconds(200)) return;
    checked_ = now;
    for (const int64_t r : ranks) {
      const auto i = static_cast<size_t>(r);
      const int64_t beat = store_.add(fmt::format("alive/{}", r), 0);
      if (beat != last_[i]) {
        last_[i] = beat;
        changed_[i] = now;
      } else if (now - changed_[i] > stale_) {
        throw GridError(fmt::format(
            "rank {} stopped answering: no sign of life for {:.0f} s (BPBENCH_GRID_TIMEOUT_S); it died or "
            "hangs",
            r, std::chrono::duration<double>(now - changed_[i]).count()));
      }
    }
  }

 private:
  GridStore& store_;
  std::chrono::milliseconds stale_;
  std::vector<int64_t> last_;
  std::vector<Clock::time_point> changed_;
  Clock::time_point checked_{};
};

std::vector<int64_t> all_but(int64_t me, int64_t world) {
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < world; ++r)
    if (r != me) ranks.push_back(r);
  return ranks;
}

// A private directory for the files a cell of another rank than 0 writes, sent to rank 0 and removed.
class AsideDir {
 public:
  AsideDir() {
    std::string path = (fs::temp_directory_path() / "bpbench-grid-XXXXXX").string();
    if (!mkdtemp(path.data()))
      throw GridError(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
    path_ = path;
  }
  ~AsideDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sends every file under `dir` to rank 0 (file/I/R/PATH) and returns their paths relative to `dir`.
json send_files(GridStore& store, const std::string& dir, size_t index, int64_t rank) {
  json names = json::array();
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string rel = fs::relative(it->path(), dir).string();
    store.set(fmt::format("file/{}/{}/{}", index, rank, rel), read_file(it->path().string()));
    names.push_back(rel);
  }
  return names;
}

// A rank's part of a distributed cell: its record, and whether its process died of a signal that no rank
// sent (the cause of the cell's failure, where the others only saw a peer go).
struct RankOutcome {
  CellResult record;
  bool died = false;
};

// One distributed cell's process on this rank, torchrun's way, its group meeting in the grid's store under
// the cell's prefix. Bounded: stopped when rank 0 says the cell failed elsewhere, or after
// BPBENCH_DIST_LAUNCH_TIMEOUT_S.
RankOutcome run_rank_of_cell(const GridCell& gc, const LaunchedRank& me, GridStore& store,
                             const std::string& exe, const std::string& visible_gpus,
                             const std::string& dir) {
  CellResult failed = result_for(gc.job, "error");
  const auto t0 = Clock::now();
  CellJob job = gc.job;
  job.timeline_dir = dir;
  const std::string base =
      (fs::temp_directory_path() / fmt::format("bpbench-grid-cell-{}-{}-{}", getpid(), gc.index, me.rank))
          .string();
  job.result_file = base + ".result";
  const std::string job_path = base + ".json", result_path = fmt::format("{}.{}", job.result_file, me.rank);
  write_file_atomically(job_path, job.to_json().dump());
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(me.rank)},
      {"WORLD_SIZE", std::to_string(me.world)},
      {"LOCAL_RANK", std::to_string(me.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(me.local_world)},
      {"MASTER_ADDR", me.master_addr},
      {"MASTER_PORT", std::to_string(me.master_port)},
      {"BPBENCH_DIST_STORE_PREFIX", fmt::format("{}cell-{}/", store.prefix(), gc.index)},
  };
  std::vector<std::string> unset;
  if (visible_gpus.empty())
    unset.push_back("CUDA_VISIBLE_DEVICES");
  else
    vars.emplace_back("CUDA_VISIBLE_DEVICES",
                      visible_gpus);  // every GPU of the node: NCCL takes LOCAL_RANK's
  const std::string binary = resolved_exe(exe);
  pid_t pid = -1;
  const int rc = spawn_process(binary, {binary, "run-cell", job_path}, environment_with(vars, unset), pid);
  if (rc != 0) {
    std::remove(job_path.c_str());
    failed.reason = fmt::format("rank {}: cannot start '{}': {}", me.rank, binary, std::strerror(rc));
    return {failed};
  }
  const auto deadline = t0 + launch_timeout(std::chrono::milliseconds(0));
  const std::string abort_key = fmt::format("dist/{}/abort", gc.index);
  std::string stopped_why;
  Clock::time_point kill_at = Clock::time_point::max(), abort_checked{};
  int status = 0;
  for (;;) {
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) break;
    const auto now = Clock::now();
    if (stopped_why.empty() && now - abort_checked > std::chrono::milliseconds(250)) {
      abort_checked = now;
      if (store.get_if_set(abort_key))
        stopped_why = "stopped after the cell failed on another rank";
      else if (now > deadline)
        stopped_why = "stopped after BPBENCH_DIST_LAUNCH_TIMEOUT_S";
      if (!stopped_why.empty()) {
        kill(pid, SIGTERM);
        kill_at = now + std::chrono::seconds(3);
      }
    } else if (now > kill_at) {
      kill(pid, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(kPoll);
  }
  std::remove(job_path.c_str());
  const std::string text = read_file(result_path);
  std::remove(result_path.c_str());
  if (!text.empty()) {
    try {
      CellResult r = CellResult::from_json(json::parse(text));
      if (r.status != "ok" && !r.reason.empty()) r.reason = fmt::format("rank {}: {}", me.rank, r.reason);
      return {r};
    } catch (const std::exception&) {
    }
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    failed.reason = fmt::format("rank {} (pid {}) {}: cell process killed by signal {} ({}){}", me.rank, pid,
                                host_name(), sig, strsignal(sig),
                                !stopped_why.empty() ? ", " + stopped_why
                                : sig == SIGKILL     ? "; the system's out-of-memory killer sends this"
                                                     : "");
  } else {
    failed.reason = fmt::format("rank {}: cell process exited with status {} and no result", me.rank,
                                WEXITSTATUS(status));
  }
  failed.wall_s = seconds_since(t0);
  return {failed, WIFSIGNALED(status) && stopped_why.empty()};
}

}  // namespace

json GridCell::to_json() const {
  return {
      {"index", index}, {"job", job.to_json()}, {"distributed", distributed}, {"interrupted", interrupted}};
}

GridCell GridCell::from_json(const json& j) {
  GridCell gc;
  gc.index = j.at("index").get<size_t>();
  gc.job = CellJob::from_json(j.at("job"));
  gc.distributed = j.at("distributed").get<bool>();
  gc.interrupted = j.at("interrupted").get<int64_t>();
  return gc;
}

struct GridSession::Impl {
  std::unique_ptr<GridStore> store;
  std::chrono::milliseconds timeout{};
  std::string visible_gpus;  // CUDA_VISIBLE_DEVICES as the launcher set it ("" when unset)
  std::atomic<bool> beating{true};
  std::atomic<bool> stopping{false};  // rank 0 stops the grid: take no further cell
  std::thread heart;

  // This rank's share of the plan: the single-device cells it takes, then every distributed cell. Runs on
  // its own store connection (rank 0 runs it beside its collecting).
  void run_share(const LaunchedRank& me, const std::vector<GridCell>& plan, const std::string& exe,
                 GridStore& s) {
    Peers peers(s, me.world, timeout);
    const std::string host = host_name();
    const std::string device = plan.empty() || plan.front().job.settings.device != "cuda"
                                   ? "cpu"
                                   : fmt::format("cuda:{}", me.local_rank);
    std::vector<const GridCell*> singles, dists;
    for (const auto& gc : plan) (gc.distributed ? dists : singles).push_back(&gc);
    auto send = [&](const char* kind, const GridCell& gc, json extra) {
      extra["kind"] = kind;
      extra["index"] = gc.index;
      extra["rank"] = me.rank;
      extra["host"] = host;
      extra["device"] = device;
      s.push("to_leader", extra.dump(-1, ' ', false, json::error_handler_t::replace));
    };
    auto stopped = [&] { return stopping || s.get_if_set("stop").has_value(); };
    for (;;) {
      if (stopped()) return;
      const int64_t k = s.add("single/next", 1) - 1;
      if (k >= static_cast<int64_t>(singles.size())) break;
      const GridCell& gc = *singles[static_cast<size_t>(k)];
      send("start", gc, json::object());
      std::optional<AsideDir> aside;
      CellJob job = gc.job;
      if (me.rank != 0 && !job.timeline_name.empty()) job.timeline_dir = aside.emplace().path();
      CellResult r =
          job.settings.measure.max_seq_len ? search_cell_max_seq_len(job, exe) : run_cell_isolated(job, exe);
      r.measured_by = {{"rank", me.rank}, {"local_rank", me.local_rank}, {"host", host}, {"device", device}};
      if (r.status == "error") r.reason = fmt::format("rank {} ({}): {}", me.rank, host, r.reason);
      const json files = aside ? send_files(s, aside->path(), gc.index, me.rank) : json::array();
      send("record", gc, {{"record", r.to_json()}, {"files", files}});
    }
    for (const GridCell* gc : dists) {
      const std::string ready = fmt::format("dist/{}/ready", gc->index);
      s.add(ready, 1);
      while (s.add(ready, 0) < me.world) {
        if (stopped()) return;
        peers.check(all_but(me.rank, me.world));
        std::this_thread::sleep_for(kPoll);
      }
      send("start", *gc, json::object());
      std::optional<AsideDir> aside;
      const std::string dir = me.rank == 0 ? gc->job.timeline_dir : aside.emplace().path();
      const RankOutcome outcome = run_rank_of_cell(*gc, me, s, exe, visible_gpus, dir);
      const json files = aside ? send_files(s, aside->path(), gc->index, me.rank) : json::array();
      send("rank_record", *gc,
           {{"record", outcome.record.to_json()}, {"files", files}, {"died", outcome.died}});
    }
    s.push("to_leader", json{{"kind", "done"}, {"rank", me.rank}}.dump());
  }
};

GridSession::GridSession(const LaunchedRank& launched, const std::string& device)
    : launched_(launched), impl_(std::make_unique<Impl>()) {
  impl_->timeout = grid_timeout();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  impl_->visible_gpus = visible ? visible : "";
  // Before any thread: a single-device cell's process (and a search's probes) inherit it.
  if (device == "cuda")
    ::setenv("CUDA_VISIBLE_DEVICES", gpu_of_local_rank(launched.local_rank, impl_->visible_gpus).c_str(), 1);
  impl_->store = std::make_unique<GridStore>(launched, prefix_of(launched), impl_->timeout);
  auto beat_store = impl_->store->another_connection();
  impl_->heart = std::thread([this, s = std::move(beat_store), key = fmt::format("alive/{}", launched.rank)] {
    try {
      while (impl_->beating) {
        s->add(key, 1);
        std::this_thread::sleep_for(kBeat);
      }
    } catch (const std::exception&) {  // the store is gone: the peers see this rank stop
    }
  });
}

GridSession::~GridSession() {
  impl_->beating = false;
  if (impl_->heart.joinable()) impl_->heart.join();
}

void GridSession::fail(const std::string& line) {
  GridStore& s = *impl_->store;
  s.set("plan", json{{"error", line}}.dump());
  // Rank 0 may serve the store: it stays until every rank has read the line, or the timeout.
  const auto until = Clock::now() + impl_->timeout;
  while (s.add("plan/read", 0) < launched_.world - 1 && Clock::now() < until)
    std::this_thread::sleep_for(kPoll);
}

void GridSession::follow(const std::string& exe, std::ostream* progress) {
  GridStore& s = *impl_->store;
  Peers peers(s, launched_.world, impl_->timeout);
  std::optional<std::string> plan_text;
  while (!(plan_text = s.get_if_set("plan"))) {
    peers.check({0});
    std::this_thread::sleep_for(kPoll);
  }
  s.add("plan/read", 1);
  const json plan = json::parse(*plan_text);
  if (plan.contains("error")) throw InputError(plan.at("error").get<std::string>());
  std::vector<GridCell> cells;
  for (const auto& c : plan.at("cells")) cells.push_back(GridCell::from_json(c));
  if (progress)
    *progress << fmt::format("rank {} of {} ({}): running its share of {} cells; rank 0 writes {}\n",
                             launched_.rank, launched_.world, host_name(), cells.size(),
                             plan.at("dir").get<std::string>())
              << std::flush;
  impl_->run_share(launched_, cells, exe, s);
  while (!s.get_if_set("closed")) {
    if (auto why = s.get_if_set("stop")) throw GridError(fmt::format("rank 0 stopped the grid: {}", *why));
    peers.check({0});
    std::this_thread::sleep_for(kPoll);
  }
  s.add("closed/read", 1);
}

void GridSession::lead(const std::vector<GridCell>& cells, const std::string& exe, GridLeader& leader) {
  GridStore& s = *impl_->store;
  json plan = {{"cells", json::array()}, {"dir", leader.dir}};
  std::map<size_t, const GridCell*> by_index;
  for (const auto& gc : cells) {
    plan["cells"].push_back(gc.to_json());
    by_index.emplace(gc.index, &gc);
  }
  s.set("plan", plan.dump());

  // Rank 0's own share, beside the collecting, on a connection of its own.
  std::exception_ptr share_failed;
  std::atomic<bool> share_over{false};
  auto share_store = s.another_connection();
  std::thread share([&] {
    try {
      impl_->run_share(launched_, cells, exe, *share_store);
    } catch (...) {
      share_failed = std::current_exception();
    }
    share_over = true;
  });

  const int64_t world = launched_.world;
  Peers peers(s, world, impl_->timeout);
  std::set<int64_t> done;
  std::set<size_t> recorded;
  std::map<size_t, std::map<int64_t, json>> running;  // cell -> rank -> where it runs (a start message)
  std::map<size_t, std::map<int64_t, CellResult>> rank_records;
  std::map<size_t, std::optional<size_t>> first_failure;
  std::map<size_t, bool> cause_known;                     // first_failure's process died
  std::map<size_t, std::map<int64_t, json>> rank_places;  // cell -> rank -> {"host", "device"}

  auto place_files = [&](const json& msg, CellResult& r) {
    for (const auto& name : msg.value("files", json::array())) {
      const std::string rel = name.get<std::string>();
      const std::string key =
          fmt::format("file/{}/{}/{}", msg.at("index").get<size_t>(), msg.at("rank").get<int64_t>(), rel);
      try {
        const auto bytes = s.get_if_set(key);
        if (!bytes) throw std::runtime_error("it did not arrive from its rank");
        fs::create_directories((fs::path(leader.dir) / rel).parent_path());
        s.erase(key);
        write_file_atomically(fs::path(leader.dir) / rel, *bytes);
      } catch (const GridError&) {
        throw;
      } catch (const std::exception& e) {
        if (r.memory) {
          if (!r.memory->files_not_written.is_object()) r.memory->files_not_written = json::object();
          r.memory->files_not_written[rel] = one_line(e.what());
        }
      }
    }
  };
  auto finish = [&](size_t index, const CellResult& r) {
    recorded.insert(index);
    running.erase(index);
    leader.finished(*by_index.at(index), r);
  };
  auto handle = [&](const json& msg) {
    const std::string kind = msg.at("kind").get<std::string>();
    const int64_t rank = msg.at("rank").get<int64_t>();
    if (kind == "done") {
      done.insert(rank);
      return;
    }
    const size_t index = msg.at("index").get<size_t>();
    const GridCell& gc = *by_index.at(index);
    if (kind == "start") {
      const bool first = running[index].empty();
      running[index][rank] = msg;
      if (!first || recorded.count(index)) return;
      CellResult placeholder = result_for(gc.job, "error");
      placeholder.reason = fmt::format(
          "running on rank {} ({}) since {}: a sitting that stops during the cell leaves this record, and a "
          "restart runs it again",
          rank, msg.value("host", std::string("?")), iso8601_utc_now());
      placeholder.interrupted = gc.interrupted + 1;
      leader.started(gc, placeholder);
      return;
    }
    CellResult r = CellResult::from_json(msg.at("record"));
    place_files(msg, r);
    if (kind == "record") {
      finish(index, r);
      return;
    }
    // A rank of a distributed cell: the cell is recorded once every rank's is in.
    rank_places[index][rank] = {{"host", msg.value("host", std::string())},
                                {"device", msg.value("device", std::string())}};
    // The cell's reason: a rank whose process died, else the first rank that failed (the others may only
    // have seen a peer go).
    if (r.status == "error" && (!first_failure[index] || (msg.value("died", false) && !cause_known[index]))) {
      if (!first_failure[index]) s.set(fmt::format("dist/{}/abort", index), "1");
      first_failure[index] = static_cast<size_t>(rank);
      cause_known[index] = msg.value("died", false);
    }
    rank_records[index].emplace(rank, std::move(r));
    if (static_cast<int64_t>(rank_records[index].size()) < world) return;
    std::vector<CellResult> ranks;
    for (auto& [q, rr] : rank_records[index]) ranks.push_back(std::move(rr));
    CellResult merged = merge_rank_results(ranks, first_failure[index]);
    for (size_t q = 0; q < merged.ranks.size(); ++q)
      merged.ranks[q].update(rank_places[index][static_cast<int64_t>(q)]);
    rank_records.erase(index);
    finish(index, merged);
  };

  // A rank that stopped answering (or a store that failed) stops the grid: no rank takes another cell, the
  // distributed cells under way are stopped, and rank 0 takes the records that still come until its own
  // share is over.
  std::string stop_why;
  auto stop = [&](const std::string& why) {
    if (!stop_why.empty()) return;
    stop_why = one_line(why);
    impl_->stopping = true;
    try {
      s.set("stop", stop_why);
      for (const auto& [index, where] : running)
        if (by_index.at(index)->distributed) s.set(fmt::format("dist/{}/abort", index), "1");
    } catch (const std::exception&) {  // the store itself failed: the ranks see rank 0 go
    }
  };
  for (;;) {
    if (stop_why.empty() && static_cast<int64_t>(done.size()) == world && recorded.size() == cells.size())
      break;
    if (!stop_why.empty() && share_over) break;
    try {
      if (auto msg = s.pop("to_leader")) {
        handle(json::parse(*msg));
        continue;
      }
      if (share_over && share_failed && stop_why.empty()) std::rethrow_exception(share_failed);
      if (stop_why.empty()) {
        std::vector<int64_t> waiting;
        for (int64_t r = 1; r < world; ++r)
          if (!done.count(r)) waiting.push_back(r);
        peers.check(waiting);
      }
    } catch (const std::exception& e) {
      stop(e.what());
    }
    std::this_thread::sleep_for(kPoll);
  }
  share.join();
  if (!stop_why.empty()) {
    // The cells still running stay failed in the file, with why; the sitting ends (a restart or --resume
    // runs them).
    const size_t unfinished = cells.size() - recorded.size();
    for (const auto& [index, where] : running) {
      CellResult r = result_for(by_index.at(index)->job, "error");
      r.reason = fmt::format("the grid stopped during this cell: {}", stop_why);
      r.interrupted = by_index.at(index)->interrupted + 1;
      leader.finished(*by_index.at(index), r);
    }
    impl_->beating = false;  // the other ranks see rank 0 stop
    throw GridError(
        fmt::format("run over {} ranks stopped: {}; {} of {} cells are not finished (a restart, "
                    "or bpbench run --resume, runs them)",
                    world, stop_why, unfinished, cells.size()));
  }
  s.set("closed", "1");
  // Rank 0 may serve the store: it stays until every rank has seen the grid closed, or the timeout.
  const auto until = Clock::now() + impl_->timeout;
  while (s.add("closed/read", 0) < world - 1 && Clock::now() < until) std::this_thread::sleep_for(kPoll);
}

}  // namespace bpbench
