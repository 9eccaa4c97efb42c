#include "cache/lru_cache.h"

#include <stdexcept>

#include "server/lab_stub.h"

namespace proxy {

std::shared_ptr<const CachedResponse> LruCache::find(std::string_view key) {
  // LAB(1) BEGIN LruCache::find
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
  // LAB(1) STUB
  // (void)key;
  // proxy::todo_student("TODO(student) lab 1: LruCache::find (common/cache/lru_cache.cpp)");
  // LAB(1) END
}

bool LruCache::insert(std::string_view key, std::shared_ptr<const CachedResponse> response) {
  // LAB(1) BEGIN LruCache::insert
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
  // LAB(1) STUB
  // (void)key;
  // (void)response;
  // proxy::todo_student("TODO(student) lab 1: LruCache::insert (common/cache/lru_cache.cpp)");
  // LAB(1) END
}

void LruCache::erase(std::string_view key) {
  // LAB(1) BEGIN LruCache::erase
  if (auto it = index_.find(key); it != index_.end()) remove(it->second);
  // LAB(1) STUB
  // (void)key;
  // proxy::todo_student("TODO(student) lab 1: LruCache::erase (common/cache/lru_cache.cpp)");
  // LAB(1) END
}

void LruCache::remove(Recency::iterator it) {
  // LAB(1) BEGIN LruCache::remove
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(it->key);
  recency_.erase(it);
  // LAB(1) STUB
  // (void)it;
  // proxy::todo_student("TODO(student) lab 1: LruCache::remove (common/cache/lru_cache.cpp)");
  // LAB(1) END
}

}  // namespace proxy
