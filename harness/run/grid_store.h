// grid_store.h: the c10d store through which the ranks of a launched grid (harness/run/grid_ranks.h) share
// the plan, hand out cells, send rank 0 their records and files, and show that they are alive.
//
// It is the store the launcher points at (MASTER_ADDR:MASTER_PORT): torchrun's agent serves one; under srun
// or mpirun rank 0 serves it. Every key lives under a prefix that names the sitting (the launcher's restart
// count), so a restarted job never reads the keys of the attempt before it. Every call is bounded by the
// store's timeout, and a failure is a GridError in one line naming the rank, the key and the address.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "harness/run/launcher_env.h"

namespace bpbench {

class GridError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GridStore {
 public:
  // Connects this rank (rank 0 serves the store unless the launcher's agent does). GridError, one line,
  // when MASTER_ADDR or MASTER_PORT is not set or the store cannot be reached within `timeout`.
  GridStore(const LaunchedRank& launched, const std::string& prefix, std::chrono::milliseconds timeout);
  ~GridStore();
  GridStore(const GridStore&) = delete;
  GridStore& operator=(const GridStore&) = delete;
  // A second connection to the same store and prefix, for another thread (one connection is not shared).
  std::unique_ptr<GridStore> another_connection() const;

  void set(const std::string& key, const std::string& value);
  std::optional<std::string> get_if_set(const std::string& key);
  void erase(const std::string& key);  // what is read and placed leaves the store (a file can be large)
  int64_t add(const std::string& key, int64_t delta);
  void push(const std::string& queue, const std::string& value);
  std::optional<std::string> pop(const std::string& queue);  // never blocks: nullopt when empty

  const std::string& prefix() const { return prefix_; }

 private:
  GridStore() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string prefix_, where_;
  int64_t rank_ = 0;
  template <typename F>
  auto guarded(const char* op, const std::string& key, F&& f) -> decltype(f());
};

}  // namespace bpbench
