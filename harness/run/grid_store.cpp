// grid_store.cpp: grid_store.h over c10d's TCPStore and PrefixStore.
#include "harness/run/grid_store.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace bpbench {

struct GridStore::Impl {
  c10::intrusive_ptr<c10d::Store> store;
};

template <typename F>
auto GridStore::guarded(const char* op, const std::string& key, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw GridError(fmt::format("grid rank {}: store {} of '{}{}' at {} failed: {}", rank_, op, prefix_, key,
                                where_, what));
  }
}

GridStore::GridStore(const LaunchedRank& launched, const std::string& prefix,
                     std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()), prefix_(prefix), rank_(launched.rank) {
  if (launched.master_addr.empty() || launched.master_port <= 0)
    throw GridError(fmt::format(
        "run: rank {} of {} ({}) needs MASTER_ADDR and MASTER_PORT, where rank 0 serves the grid's store "
        "(torchrun sets them; under {} export them, e.g. MASTER_ADDR=the first node, MASTER_PORT=29500)",
        launched.rank, launched.world, launched.launcher, launched.launcher));
  where_ = fmt::format("{}:{}", launched.master_addr, launched.master_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(launched.master_port);
  o.isServer = launched.rank == 0 && !launched.agent_store;
  o.waitWorkers = false;
  o.timeout = timeout;
  guarded("connection", "", [&] {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(launched.master_addr, o);
    tcp->setTimeout(timeout);
    impl_->store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
    return 0;
  });
}

GridStore::~GridStore() = default;

std::unique_ptr<GridStore> GridStore::another_connection() const {
  std::unique_ptr<GridStore> s(new GridStore());
  s->impl_ = std::make_unique<Impl>();
  s->prefix_ = prefix_;
  s->where_ = where_;
  s->rank_ = rank_;
  s->impl_->store = s->guarded("connection", "", [&] { return impl_->store->clone(); });
  return s;
}

namespace {
std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text_of(const std::vector<uint8_t>& b) {
  return {b.begin(), b.end()};
}
}  // namespace

void GridStore::set(const std::string& key, const std::string& value) {
  guarded("set", key, [&] {
    impl_->store->set(key, bytes_of(value));
    return 0;
  });
}

std::optional<std::string> GridStore::get_if_set(const std::string& key) {
  return guarded("get", key, [&]() -> std::optional<std::string> {
    if (!impl_->store->check({key})) return std::nullopt;
    return text_of(impl_->store->get(key));
  });
}

void GridStore::erase(const std::string& key) {
  guarded("delete", key, [&] { return impl_->store->deleteKey(key); });
}

int64_t GridStore::add(const std::string& key, int64_t delta) {
  return guarded("add", key, [&] { return impl_->store->add(key, delta); });
}

void GridStore::push(const std::string& queue, const std::string& value) {
  guarded("push", queue, [&] {
    impl_->store->queuePush(queue, bytes_of(value));
    return 0;
  });
}

std::optional<std::string> GridStore::pop(const std::string& queue) {
  return guarded("pop", queue, [&]() -> std::optional<std::string> {
    if (impl_->store->queueLen(queue) == 0) return std::nullopt;
    return text_of(impl_->store->queuePop(queue, /*block=*/false));
  });
}

}  // namespace bpbench
