#include "concurrent_sieve_cache.h"

#include <mutex>

namespace proxy {

std::shared_ptr<const CachedResponse> ConcurrentSieveCache::find(std::string_view key) {
  std::shared_ptr<const CachedResponse> response;
  {
    std::shared_lock lock(mutex_);
    response = sieve_.mark_visited(key);
  }
  (response ? hits_ : misses_).fetch_add(1, std::memory_order_relaxed);
  return response;
}

bool ConcurrentSieveCache::insert(std::string_view key,
                                  std::shared_ptr<const CachedResponse> response) {
  std::unique_lock lock(mutex_);
  return sieve_.insert(key, std::move(response));
}

void ConcurrentSieveCache::erase(std::string_view key) {
  std::unique_lock lock(mutex_);
  sieve_.erase(key);
}

CacheStats ConcurrentSieveCache::stats() const {
  CacheStats stats;
  {
    std::shared_lock lock(mutex_);
    stats = sieve_.stats();
  }
  stats.hits = hits_.load(std::memory_order_relaxed);
  stats.misses = misses_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace proxy
