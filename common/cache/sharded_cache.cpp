#include "cache/sharded_cache.h"

#include <cstdint>
#include <functional>
#include <stdexcept>

namespace proxy {

ShardedCache::ShardedCache(std::vector<std::unique_ptr<Cache>> shards)
    : shards_(std::move(shards)) {
  if (shards_.empty()) throw std::invalid_argument("a sharded cache needs at least one shard");
  for (const auto& shard : shards_) {
    if (!shard) throw std::invalid_argument("a sharded cache was given a null shard");
  }
}

std::size_t ShardedCache::shard_index(std::string_view key) const noexcept {
  // Each shard's hash table hashes the same key with the same std::hash. Mixing the bits first
  // (MurmurHash3's finalizer) keeps the choice of shard from correlating with the choice of
  // bucket inside it, and spreads keys that differ only in their last characters.
  std::uint64_t h = std::hash<std::string_view>{}(key);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  // Lemire's multiply-shift maps the high 32 bits onto [0, shards) without a 64-bit division,
  // the slowest instruction on the routing path. The result is below shards_.size() for any
  // count (the product's top 32 bits are below it).
  return static_cast<std::size_t>(((h >> 32) * shards_.size()) >> 32);
}

std::shared_ptr<const CachedResponse> ShardedCache::find(std::string_view key) {
  return shards_[shard_index(key)]->find(key);
}

bool ShardedCache::insert(std::string_view key, std::shared_ptr<const CachedResponse> response) {
  return shards_[shard_index(key)]->insert(key, std::move(response));
}

void ShardedCache::erase(std::string_view key) {
  shards_[shard_index(key)]->erase(key);
}

CacheStats ShardedCache::stats() const {
  CacheStats total;
  for (const auto& shard : shards_) {
    const CacheStats s = shard->stats();
    total.hits += s.hits;
    total.misses += s.misses;
    total.insertions += s.insertions;
    total.evictions += s.evictions;
    total.bytes += s.bytes;
    total.entries += s.entries;
  }
  return total;
}

std::size_t ShardedCache::capacity_bytes() const {
  std::size_t total = 0;
  for (const auto& shard : shards_) total += shard->capacity_bytes();
  return total;
}

std::size_t ShardedCache::max_object_bytes() const {
  return shards_.front()->max_object_bytes();
}

}  // namespace proxy
