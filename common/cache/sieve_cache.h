// SIEVE: a FIFO queue, one visited bit per entry and a hand that sweeps from the oldest entry
// toward the newest. Source: Zhang, Yang, Yue, Vigfusson, Rashmi, "SIEVE is Simpler than LRU: an
// Efficient Turn-Key Eviction Algorithm for Web Caches", NSDI '24.
#pragma once

#include <atomic>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include "cache/cache.h"
#include "cache/hashed_key.h"

namespace proxy {

/// Byte-bounded SIEVE cache. A hit only sets the entry's visited bit; nothing moves. New
/// entries join the head of the queue unvisited. To make room, the hand starts where it last
/// stopped (the tail, at first), clears the bit of each visited entry it passes, moving toward
/// the head and wrapping to the tail, and evicts the first unvisited entry it meets (NSDI '24,
/// Algorithm 1). An entry not hit again before the hand reaches it is evicted there, at the
/// first pass (quick demotion of one-hit wonders); a popular one survives every sweep without
/// being moved. Replacing a key stores the new entry at the head,
/// unvisited. Sizes in bytes as charged by entry_bytes().
/// Thread-safety: find(), insert(), erase() and stats() are not thread-safe; share them only
/// behind a lock. mark_visited() is the exception ConcurrentSieveCache builds on.
class SieveCache final : public BoundedCache {
 public:
  using BoundedCache::BoundedCache;

  std::shared_ptr<const CachedResponse> find(std::string_view key) override;
  bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override;
  void erase(std::string_view key) override;

  /// find() without counting a hit or a miss: the entry for `key`, or nullptr, with its
  /// visited bit set. It writes nothing but that atomic bit, so any number of threads may call
  /// it at once provided none is inside a non-const member meanwhile (a shared lock against
  /// insert/erase's exclusive one).
  std::shared_ptr<const CachedResponse> mark_visited(std::string_view key) const;

  /// Whether `key` is present with its visited bit set. Counts nothing; for tests and teaching.
  [[nodiscard]] bool visited(std::string_view key) const;
  /// The key the hand points at, or nullopt while it rests at the tail (before the first
  /// eviction, or after it evicted the head). For tests and teaching.
  [[nodiscard]] std::optional<std::string> hand() const;

 private:
  struct Entry {
    Entry(std::string_view entry_key, std::shared_ptr<const CachedResponse> entry_response,
          std::size_t entry_bytes)
        : key(entry_key), response(std::move(entry_response)), bytes(entry_bytes) {}
    std::string key;
    std::shared_ptr<const CachedResponse> response;
    std::size_t bytes;
    // Atomic because hits under a shared lock may set it from several threads at once; the
    // hand reads and clears it only under the exclusive lock, so relaxed order is enough.
    mutable std::atomic<bool> visited{false};
  };
  using Queue = std::list<Entry>;  // front = head (newest), back = tail (oldest)

  void evict_one();
  void remove(Queue::iterator it);
  // The entry one step from `it` toward the head, wrapping from the head to the tail.
  Queue::iterator toward_head(Queue::iterator it);

  Queue queue_;
  Queue::iterator hand_ = queue_.end();  // end() = start the next sweep at the tail
  // Keys view the key stored in their Entry: list nodes never move, and an entry leaves the
  // index before its node is freed.
  KeyIndex<Queue::iterator> index_;
};

}  // namespace proxy
