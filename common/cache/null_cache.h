// The `none` policy: a cache that stores nothing, so every request takes the miss path.
#pragma once

#include <atomic>
#include <cstdint>

#include "cache/cache.h"

namespace proxy {

/// Caches nothing: find() always misses (and counts the miss), insert() stores nothing and
/// returns false. For measuring the miss path with the same transaction and counters.
/// Capacity and maximum object size both read 0, which is what the contract of insert()
/// implies for a cache that refuses every entry.
/// Thread-safety: every member may be called from any thread; the miss counter is atomic, so
/// stages need no lock around it.
class NullCache final : public Cache {
 public:
  std::shared_ptr<const CachedResponse> find(std::string_view /*key*/) override {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  bool insert(std::string_view /*key*/,
              std::shared_ptr<const CachedResponse> /*response*/) override {
    return false;
  }
  void erase(std::string_view /*key*/) override {}
  [[nodiscard]] CacheStats stats() const override {
    CacheStats stats;
    stats.misses = misses_.load(std::memory_order_relaxed);
    return stats;
  }
  [[nodiscard]] std::size_t capacity_bytes() const override { return 0; }
  [[nodiscard]] std::size_t max_object_bytes() const override { return 0; }

 private:
  std::atomic<std::uint64_t> misses_{0};  // a counter only: no other state to order against
};

}  // namespace proxy
