// The coarse-grained thread-safe cache: one mutex around any policy. Stages 2 and 3 use it.
#pragma once

#include <memory>
#include <mutex>
#include <stdexcept>

#include "cache/cache.h"
#include "cache/cache_line.h"
#include "server/lab_stub.h"

namespace proxy {

/// Makes any Cache safe to share by holding one mutex for every call.
/// Why not a reader-writer lock so hits could run in parallel? Because under LRU (and LFU) a
/// hit is a write: find() moves the entry to the front of the recency list. Two "readers"
/// splicing the same list at once corrupt it. A shared lock is only enough for a policy whose
/// hits change nothing but an atomic flag: SIEVE, in ConcurrentSieveCache
/// (concurrent_sieve_cache.h), which ShardedCache (sharded_cache.h) spreads over N locks.
/// Entries are shared_ptr<const CachedResponse>: the lock is released before the caller relays
/// the body, and an entry evicted meanwhile stays alive until that caller lets go of it.
/// Thread-safety: every member may be called from any thread; calls run one at a time, in the
/// order they take the lock, so the inner policy sees a sequential history.
/// Aligned to a cache line so that LockedCache shards of a ShardedCache share no line.
class alignas(kCacheLineBytes) LockedCache final : public Cache {
 public:
  /// Takes ownership of `inner`, which must not be used elsewhere.
  explicit LockedCache(std::unique_ptr<Cache> inner) : inner_(std::move(inner)) {}

  // LAB(2) BEGIN LockedCache
  std::shared_ptr<const CachedResponse> find(std::string_view key) override {
    std::lock_guard lock(mutex_);
    return inner_->find(key);
  }
  bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override {
    std::lock_guard lock(mutex_);
    return inner_->insert(key, std::move(response));
  }
  void erase(std::string_view key) override {
    std::lock_guard lock(mutex_);
    inner_->erase(key);
  }
  [[nodiscard]] CacheStats stats() const override {
    std::lock_guard lock(mutex_);
    return inner_->stats();
  }
  // LAB(2) STUB
  // std::shared_ptr<const CachedResponse> find(std::string_view key) override {
  //   (void)key;
  //   proxy::todo_student("TODO(student) lab 2: LockedCache::find (common/cache/locked_cache.h)");
  // }
  // bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override {
  //   (void)key;
  //   (void)response;
  //   proxy::todo_student("TODO(student) lab 2: LockedCache::insert (common/cache/locked_cache.h)");
  // }
  // void erase(std::string_view key) override {
  //   (void)key;
  //   proxy::todo_student("TODO(student) lab 2: LockedCache::erase (common/cache/locked_cache.h)");
  // }
  // [[nodiscard]] CacheStats stats() const override {
  //   proxy::todo_student("TODO(student) lab 2: LockedCache::stats (common/cache/locked_cache.h)");
  // }
  // LAB(2) END
  // Limits never change after construction, so they need no lock.
  [[nodiscard]] std::size_t capacity_bytes() const override { return inner_->capacity_bytes(); }
  [[nodiscard]] std::size_t max_object_bytes() const override { return inner_->max_object_bytes(); }

 private:
  mutable std::mutex mutex_;  // guards every call into inner_
  std::unique_ptr<Cache> inner_;
};

}  // namespace proxy
