#include "cache/concurrent_sieve_cache.h"

#include <mutex>

namespace proxy {
namespace {

// The calling thread's counter stripe: threads take stripes in turn as they first count, so up
// to `stripes` threads never share one.
std::size_t counter_stripe(std::size_t stripes) {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t stripe = next.fetch_add(1, std::memory_order_relaxed);
  return stripe % stripes;
}

}  // namespace

std::shared_ptr<const CachedResponse> ConcurrentSieveCache::find(std::string_view key) {
  std::shared_ptr<const CachedResponse> response;
  {
    std::shared_lock lock(mutex_);
    response = sieve_.mark_visited(key);
  }
  Counters& mine = counters_[counter_stripe(kCounterStripes)];
  (response ? mine.hits : mine.misses).fetch_add(1, std::memory_order_relaxed);
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
  for (const Counters& stripe : counters_) {
    stats.hits += stripe.hits.load(std::memory_order_relaxed);
    stats.misses += stripe.misses.load(std::memory_order_relaxed);
  }
  return stats;
}

}  // namespace proxy
