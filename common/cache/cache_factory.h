// Choosing a cache policy by name, as `--cache-policy` does in every stage.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache.h"

namespace proxy {

/// The policy names make_cache accepts, in the order --help lists them: lru, lfu, sieve, none.
std::vector<std::string> cache_policy_names();

/// Builds the cache named by `policy` with the given byte limits: LruCache, LfuCache,
/// SieveCache, or NullCache for "none". Not thread-safe (NullCache aside): stages that share it
/// between threads wrap it in LockedCache.
/// Throws std::invalid_argument for a name not in cache_policy_names().
std::unique_ptr<Cache> make_cache(const std::string& policy, std::size_t capacity_bytes,
                                  std::size_t max_object_bytes);

/// Builds the low-contention thread-safe cache stage 4 uses: a ShardedCache of `shards` shards,
/// each with capacity_bytes / shards bytes (see sharded_cache.h for what that means for the
/// largest object). "sieve" shards are ConcurrentSieveCache, whose hits share a lock; the other
/// policies' shards are LockedCache, since their hits are writes; "none" is one NullCache.
/// Throws std::invalid_argument for an unknown policy or zero shards.
std::unique_ptr<Cache> make_concurrent_cache(const std::string& policy, std::size_t shards,
                                             std::size_t capacity_bytes,
                                             std::size_t max_object_bytes);

}  // namespace proxy
