// Least frequently used, in O(1) per operation: the policy the background study swapped in for
// LRU and saw collapse the hit rate. cache-sim's `shift` workload (tools/cache_sim.cpp) shows
// how: counts that never decay keep yesterday's popular objects in the cache.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>

#include "cache/cache.h"
#include "cache/hashed_key.h"

namespace proxy {

/// Byte-bounded LFU cache: evicts the entry with the fewest hits; among equals, the one whose
/// last use is oldest. Counts never decay, so objects that were popular once keep their place
/// after traffic has moved on — the weakness the `shift` workload of cache-sim shows.
/// A new or replaced entry starts at frequency 1; each hit adds 1. Sizes in bytes as charged by
/// entry_bytes(). O(1) find, insert and erase: frequencies are a list of buckets in ascending
/// order (Shah, Mitra, Matani, "An O(1) algorithm for implementing the LFU cache eviction
/// scheme", 2010), each bucket a recency list.
/// Thread-safety: none — a hit moves the entry to the next bucket. Share it only behind a lock
/// (LockedCache).
class LfuCache final : public BoundedCache {
 public:
  using BoundedCache::BoundedCache;

  std::shared_ptr<const CachedResponse> find(std::string_view key) override;
  bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override;
  void erase(std::string_view key) override;

  /// How many times `key` has been used (1 + hits since it was stored), or 0 if absent.
  /// Does not count as a hit. For tests and teaching.
  [[nodiscard]] std::uint64_t frequency(std::string_view key) const;

 private:
  struct Bucket;
  using Buckets = std::list<Bucket>;  // ascending frequency, no empty bucket
  struct Entry {
    std::string key;
    std::shared_ptr<const CachedResponse> response;
    std::size_t bytes;
    Buckets::iterator bucket;
  };
  using Entries = std::list<Entry>;  // front = most recently used within one frequency
  struct Bucket {
    std::uint64_t frequency;
    Entries entries;
  };

  void remove(Entries::iterator it);
  void evict_one();

  Buckets buckets_;
  // Keys view the key stored in their Entry: list nodes never move, and an entry leaves the
  // index before its node is freed.
  KeyIndex<Entries::iterator> index_;
};

}  // namespace proxy
