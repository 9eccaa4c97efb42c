// SIEVE shared between threads with a reader-writer lock: because a SIEVE hit changes nothing
// but an atomic flag, hits can run in parallel — which an LRU's hits cannot (locked_cache.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <shared_mutex>

#include "cache/cache.h"
#include "cache/cache_line.h"
#include "cache/sieve_cache.h"

namespace proxy {

/// A thread-safe SIEVE cache (Zhang et al., "SIEVE is Simpler than LRU", NSDI '24) whose hits
/// take the lock shared: find() looks the key up and sets the entry's atomic visited bit, and
/// any number of find()s run at once. insert() and erase() take it exclusively, since they
/// move the hand and change the queue and the index. Eviction order is exactly SieveCache's.
/// Guarantees, for every member called from any thread: a found entry is the complete,
/// byte-exact response some insert() stored, and stays valid for as long as the caller holds
/// the pointer, evicted or not; bytes never exceed capacity_bytes(). stats() is a snapshot in
/// which hits and misses (counted outside the lock) may be a few calls ahead of the rest.
/// Writers can wait: glibc's rwlock prefers readers, so a steady stream of hits on one lock
/// delays an insert until the readers pause. ShardedCache keeps each lock's stream thin.
/// Aligned to a cache line so that shards allocated side by side share no line.
class alignas(kCacheLineBytes) ConcurrentSieveCache final : public Cache {
 public:
  /// `capacity_bytes` total and `max_object_bytes` per entry; both may be 0 (caches nothing).
  ConcurrentSieveCache(std::size_t capacity_bytes, std::size_t max_object_bytes)
      : sieve_(capacity_bytes, max_object_bytes) {}

  std::shared_ptr<const CachedResponse> find(std::string_view key) override;
  bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override;
  void erase(std::string_view key) override;
  [[nodiscard]] CacheStats stats() const override;
  // Limits never change after construction, so they need no lock.
  [[nodiscard]] std::size_t capacity_bytes() const override { return sieve_.capacity_bytes(); }
  [[nodiscard]] std::size_t max_object_bytes() const override { return sieve_.max_object_bytes(); }

 private:
  // find() holds it shared and calls only sieve_.mark_visited(); insert() and erase() hold it
  // exclusively. Guards the queue, the hand and the index inside sieve_.
  mutable std::shared_mutex mutex_;
  SieveCache sieve_;

  // Hits and misses are counted outside the lock (mark_visited() counts nothing, so hits under
  // a shared lock do not race on SieveCache's plain counters), each thread in its own stripe on
  // its own cache line: one pair of counters written by every hit on every core would bounce
  // between the cores and cost more than the lookup. stats() adds the stripes up.
  struct alignas(kCacheLineBytes) Counters {
    std::atomic<std::uint64_t> hits{0};
    std::atomic<std::uint64_t> misses{0};
  };
  static constexpr std::size_t kCounterStripes = 8;
  std::array<Counters, kCounterStripes> counters_;
};

}  // namespace proxy
