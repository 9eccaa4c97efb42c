#include "cache/cache_factory.h"

#include <stdexcept>

#include "cache/concurrent_sieve_cache.h"
#include "cache/lfu_cache.h"
#include "cache/locked_cache.h"
#include "cache/lru_cache.h"
#include "cache/null_cache.h"
#include "cache/sharded_cache.h"
#include "cache/sieve_cache.h"

namespace proxy {

std::vector<std::string> cache_policy_names() {
  return {"lru", "lfu", "sieve", "none"};
}

std::unique_ptr<Cache> make_cache(const std::string& policy, std::size_t capacity_bytes,
                                  std::size_t max_object_bytes) {
  if (policy == "lru") return std::make_unique<LruCache>(capacity_bytes, max_object_bytes);
  if (policy == "lfu") return std::make_unique<LfuCache>(capacity_bytes, max_object_bytes);
  if (policy == "sieve") return std::make_unique<SieveCache>(capacity_bytes, max_object_bytes);
  if (policy == "none") return std::make_unique<NullCache>();
  throw std::invalid_argument("unknown cache policy '" + policy + "'");
}

std::unique_ptr<Cache> make_concurrent_cache(const std::string& policy, std::size_t shards,
                                             std::size_t capacity_bytes,
                                             std::size_t max_object_bytes) {
  if (shards == 0) throw std::invalid_argument("a sharded cache needs at least one shard");
  // Already thread-safe and stateless: nothing to spread.
  if (policy == "none") return std::make_unique<NullCache>();
  const std::size_t shard_bytes = capacity_bytes / shards;
  std::vector<std::unique_ptr<Cache>> parts;
  parts.reserve(shards);
  for (std::size_t i = 0; i < shards; ++i) {
    if (policy == "sieve") {
      parts.push_back(std::make_unique<ConcurrentSieveCache>(shard_bytes, max_object_bytes));
    } else {
      parts.push_back(
          std::make_unique<LockedCache>(make_cache(policy, shard_bytes, max_object_bytes)));
    }
  }
  return std::make_unique<ShardedCache>(std::move(parts));
}

}  // namespace proxy
