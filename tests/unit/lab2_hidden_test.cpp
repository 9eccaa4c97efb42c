// Lab 2's hidden tests (labs/manifest.json): run by the grader (make grade LAB=2), never shipped
// in a handout. The shared cache's counters must add up after threads hammer the same keys.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache.h"
#include "cache/locked_cache.h"
#include "cache/lru_cache.h"

namespace proxy {
namespace {

TEST(Lab2HiddenLockedCache, CountersAddUpAfterFourThreadsShareTheSameKeys) {
  constexpr int kThreads = 4, kRounds = 2000;
  LockedCache cache(std::make_unique<LruCache>(2000, 400));
  const auto body = std::make_shared<const CachedResponse>(CachedResponse{"HTTP/1.1 200 OK\r\n", std::string(150, 'b')});
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kRounds; ++i) {
          const std::string key = "http://h/" + std::to_string((i * 7 + t) % 24);
          if (!cache.find(key)) cache.insert(key, body);
          if (i % 50 == 0) cache.erase(key);
        }
      });
    }
  }
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.hits + stats.misses, static_cast<std::uint64_t>(kThreads) * kRounds);
  EXPECT_LE(stats.bytes, cache.capacity_bytes());
  // The counters must describe what is really stored: the entries still there, and their bytes.
  std::size_t stored = 0, stored_bytes = 0;
  for (int k = 0; k < 24; ++k) {
    const std::string key = "http://h/" + std::to_string(k);
    if (cache.find(key)) {
      ++stored;
      stored_bytes += entry_bytes(key, *body);
    }
  }
  EXPECT_EQ(stats.entries, stored);
  EXPECT_EQ(stats.bytes, stored_bytes);
}

}  // namespace
}  // namespace proxy
