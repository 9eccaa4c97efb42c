#include "lru_cache.h"

namespace proxy {

LruCache::LruCache(std::size_t capacity_bytes, std::size_t max_object_bytes)
    : capacity_bytes_(capacity_bytes), max_object_bytes_(max_object_bytes) {}

std::shared_ptr<const CachedResponse> LruCache::find(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  // A hit is a write: the entry moves to the front. This is why an LRU shared between threads
  // needs an exclusive lock even for lookups.
  recency_.splice(recency_.begin(), recency_, it->second);
  ++stats_.hits;
  return it->second->response;
}

bool LruCache::insert(std::string_view key, std::shared_ptr<const CachedResponse> response) {
  if (!response) return false;
  const std::size_t bytes = entry_bytes(key, *response);
  if (!fits_limits(bytes, capacity_bytes_, max_object_bytes_)) return false;
  if (auto it = index_.find(key); it != index_.end()) remove(it->second);
  while (stats_.bytes + bytes > capacity_bytes_) {
    remove(std::prev(recency_.end()));
    ++stats_.evictions;
  }
  recency_.push_front(Entry{std::string(key), std::move(response), bytes});
  index_.emplace(recency_.front().key, recency_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.insertions;
  return true;
}

void LruCache::erase(std::string_view key) {
  if (auto it = index_.find(key); it != index_.end()) remove(it->second);
}

void LruCache::remove(Recency::iterator it) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(it->key);
  recency_.erase(it);
}

}  // namespace proxy
