// The low-contention cache stage 4 uses: the key space split into shards, each behind its own
// lock, so threads serving different URLs rarely meet on the same lock.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "cache/cache.h"

namespace proxy {

/// Routes each key to one of N thread-safe caches by a hash of the key. Each shard runs its own
/// policy over its own slice of the keys, so eviction order is per shard: the entry evicted is
/// the one its shard's policy picks, not the one a single cache of the whole capacity would.
/// Shards are usually ConcurrentSieveCache (hits under a shared lock) or LockedCache around any
/// policy; make_concurrent_cache() builds either.
/// Limits: capacity_bytes() is the sum of the shards' capacities. A single entry must fit its
/// shard, so although max_object_bytes() reports what the shards were given, an entry larger
/// than one shard's capacity (capacity / N) is refused: with Proxy Lab's 1,049,000-byte cache
/// and 102,400-byte objects, up to 10 shards keep every object cacheable, and 8 is a good choice.
/// Thread-safety: as safe as its shards — with thread-safe shards every member may be called
/// from any thread. The shard list never changes after construction and needs no lock.
/// stats() sums the shards' snapshots one after another, so under traffic it is not one instant.
class ShardedCache final : public Cache {
 public:
  /// Takes ownership of `shards`. Throws std::invalid_argument if it is empty or holds nullptr.
  explicit ShardedCache(std::vector<std::unique_ptr<Cache>> shards);

  std::shared_ptr<const CachedResponse> find(std::string_view key) override;
  bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override;
  void erase(std::string_view key) override;
  [[nodiscard]] CacheStats stats() const override;
  [[nodiscard]] std::size_t capacity_bytes() const override;
  [[nodiscard]] std::size_t max_object_bytes() const override;

  /// How many shards the keys are spread over.
  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }
  /// The shard `key` belongs to, in [0, shard_count()).
  [[nodiscard]] std::size_t shard_index(std::string_view key) const noexcept;
  /// Shard `index` (< shard_count()), for tests and per-shard reports.
  [[nodiscard]] const Cache& shard(std::size_t index) const { return *shards_.at(index); }

 private:
  std::vector<std::unique_ptr<Cache>> shards_;
};

}  // namespace proxy
