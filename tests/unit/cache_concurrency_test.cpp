// The thread-safe caches under threads (common/cache/locked_cache.h, concurrent_sieve_cache.h,
// sharded_cache.h): a bounded stress test whose invariants are checked once the threads are
// joined, and the relay scenario the shared_ptr entries exist for. Run under ThreadSanitizer
// (`make tsan`) these are also race tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <future>
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "cache/cache.h"
#include "cache/cache_factory.h"
#include "cache/concurrent_sieve_cache.h"
#include "cache/locked_cache.h"
#include "cache/sharded_cache.h"

namespace proxy {
namespace {

// Each maker builds one thread-safe cache from (capacity, max object).
struct LockedLru {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LockedCache>(make_cache("lru", c, m));
  }
};
struct LockedLfu {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LockedCache>(make_cache("lfu", c, m));
  }
};
struct LockedSieve {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LockedCache>(make_cache("sieve", c, m));
  }
};
struct ConcurrentSieve {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<ConcurrentSieveCache>(c, m);
  }
};
struct ShardedSieve {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return make_concurrent_cache("sieve", 4, c, m);
  }
};
struct ShardedLru {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return make_concurrent_cache("lru", 4, c, m);
  }
};

struct MakerNames {
  template <typename T>
  // GoogleTest calls the name generator by this name.
  // NOLINTNEXTLINE(readability-identifier-naming)
  static std::string GetName(int /*index*/) {
    if (std::is_same_v<T, LockedLru>) return "LockedLru";
    if (std::is_same_v<T, LockedLfu>) return "LockedLfu";
    if (std::is_same_v<T, LockedSieve>) return "LockedSieve";
    if (std::is_same_v<T, ConcurrentSieve>) return "ConcurrentSieve";
    if (std::is_same_v<T, ShardedSieve>) return "ShardedSieve";
    if (std::is_same_v<T, ShardedLru>) return "ShardedLru";
    return "Unknown";
  }
};

template <typename Maker>
class CacheConcurrencyTest : public ::testing::Test {
 protected:
  static std::unique_ptr<Cache> make(std::size_t capacity, std::size_t max_object) {
    return Maker::make(capacity, max_object);
  }
};

using Makers =
    ::testing::Types<LockedLru, LockedLfu, LockedSieve, ConcurrentSieve, ShardedSieve, ShardedLru>;
TYPED_TEST_SUITE(CacheConcurrencyTest, Makers, MakerNames);

// A response that names its own key and version in its head and whose body is a pattern derived
// from both, so a reader can tell a byte-exact entry from a torn, mixed or misfiled one.
std::string body_for(std::string_view key, std::uint32_t version, std::size_t length) {
  std::string body(length, '\0');
  std::uint32_t state = version * 2654435761u + static_cast<std::uint32_t>(key.size());
  for (char c : key) state = state * 31u + static_cast<unsigned char>(c);
  for (auto& byte : body) {
    state = state * 1103515245u + 12345u;
    byte = static_cast<char>(state >> 24);
  }
  return body;
}

std::shared_ptr<const CachedResponse> versioned(std::string_view key, std::uint32_t version,
                                                std::size_t length) {
  std::string head = "HTTP/1.1 200 OK\r\nX-Key: " + std::string(key) +
                     "\r\nX-Version: " + std::to_string(version) +
                     "\r\nX-Length: " + std::to_string(length) + "\r\n";
  return std::make_shared<const CachedResponse>(
      CachedResponse{std::move(head), body_for(key, version, length)});
}

// Whether `found`, returned for `key`, is exactly some versioned(key, v, n).
bool byte_exact(std::string_view key, const CachedResponse& found) {
  const std::string prefix = "HTTP/1.1 200 OK\r\nX-Key: " + std::string(key) + "\r\nX-Version: ";
  if (found.head.rfind(prefix, 0) != 0) return false;
  std::size_t pos = prefix.size();
  const std::uint32_t version = static_cast<std::uint32_t>(std::stoul(found.head.substr(pos)));
  return found.head == versioned(key, version, found.body.size())->head &&
         found.body == body_for(key, version, found.body.size());
}

std::string key_name(unsigned index) {
  return "http://origin.test/object/" + std::to_string(index);
}

// Eight threads, each a fixed number of mixed operations on a small key space in a cache that
// holds about a fifth of it, so evictions run constantly alongside hits. Bounded by operation
// count, not time: under TSan on two cores it takes a second or two per cache.
TYPED_TEST(CacheConcurrencyTest, EightThreadsOfMixedTrafficKeepEveryInvariant) {
  constexpr unsigned kThreads = 8;
  constexpr unsigned kOpsPerThread = 3000;
  constexpr unsigned kKeys = 96;
  constexpr std::size_t kCapacity = 16'000;
  constexpr std::size_t kMaxObject = 1'200;
  auto cache = this->make(kCapacity, kMaxObject);

  struct Tally {
    std::uint64_t finds = 0;
    std::uint64_t hits = 0;
    std::uint64_t corrupt = 0;
    std::uint64_t oversized_accepted = 0;
  };
  std::vector<Tally> tallies(kThreads);
  std::latch start(kThreads);
  {
    std::vector<std::jthread> threads;
    for (unsigned t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 random(1234 + t);
        Tally& tally = tallies[t];
        start.arrive_and_wait();  // all threads contend from the first operation
        for (unsigned op = 0; op < kOpsPerThread; ++op) {
          const std::string key = key_name(random() % kKeys);
          const unsigned dice = random() % 100;
          if (dice < 70) {
            ++tally.finds;
            if (auto found = cache->find(key)) {
              ++tally.hits;
              if (!byte_exact(key, *found)) ++tally.corrupt;
            }
          } else if (dice < 95) {
            const std::size_t length = 100 + random() % 1'200;  // some exceed kMaxObject
            auto response = versioned(key, t * kOpsPerThread + op, length);
            const bool fits = entry_bytes(key, *response) <= kMaxObject;
            if (cache->insert(key, response) && !fits) ++tally.oversized_accepted;
          } else {
            cache->erase(key);
          }
        }
      });
    }
  }  // joined

  Tally total;
  for (const Tally& t : tallies) {
    total.finds += t.finds;
    total.hits += t.hits;
    total.corrupt += t.corrupt;
    total.oversized_accepted += t.oversized_accepted;
  }
  EXPECT_EQ(total.corrupt, 0u) << "a find returned an entry that was not byte-exact";
  EXPECT_EQ(total.oversized_accepted, 0u);

  const CacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits + stats.misses, total.finds);
  EXPECT_EQ(stats.hits, total.hits);
  EXPECT_LE(stats.bytes, cache->capacity_bytes());
  EXPECT_GT(stats.evictions, 0u) << "the scenario should have forced evictions";
  EXPECT_GT(total.hits, 0u) << "the scenario should have produced hits";

  // Quiescent now: every entry still present must be byte-exact and their charges must add up
  // to the bytes the cache reports.
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
  for (unsigned i = 0; i < kKeys; ++i) {
    const std::string key = key_name(i);
    if (auto found = cache->find(key)) {
      EXPECT_TRUE(byte_exact(key, *found)) << key;
      bytes += entry_bytes(key, *found);
      ++entries;
    }
  }
  EXPECT_EQ(bytes, stats.bytes);
  EXPECT_EQ(entries, stats.entries);

  if (auto* sharded = dynamic_cast<ShardedCache*>(cache.get())) {
    for (std::size_t i = 0; i < sharded->shard_count(); ++i) {
      EXPECT_LE(sharded->shard(i).stats().bytes, sharded->shard(i).capacity_bytes()) << i;
    }
  }
}

// A worker found an entry and is halfway through relaying it when another worker's insert
// evicts it. The relay must finish byte-exact from the worker's own reference, and once it lets
// go, the entry must be freed: the cache kept no hidden reference.
TYPED_TEST(CacheConcurrencyTest, AnEntryEvictedDuringARelayStillArrivesIntact) {
  constexpr std::size_t kCapacity = 40'000;
  auto cache = this->make(kCapacity, kCapacity);
  const std::string key = key_name(0);
  auto stored = versioned(key, 1, 8'000);
  const std::string expected_head = stored->head;
  const std::string expected_body = stored->body;
  ASSERT_TRUE(cache->insert(key, stored));
  const std::weak_ptr<const CachedResponse> watch = stored;
  stored.reset();  // from here on only the cache and the relay may hold the entry

  // With a sharded cache only an insert into the same shard can evict the entry; the filler
  // charges that shard's whole share, which leaves room for nothing else.
  std::string filler_key = key_name(1);
  std::size_t share = kCapacity;
  if (auto* sharded = dynamic_cast<ShardedCache*>(cache.get())) {
    const std::size_t shard = sharded->shard_index(key);
    for (unsigned i = 2; sharded->shard_index(filler_key) != shard; ++i) filler_key = key_name(i);
    share = sharded->shard(shard).capacity_bytes();
  }
  const std::string filler_head = "HTTP/1.1 200 OK\r\n";
  const auto filler = std::make_shared<const CachedResponse>(CachedResponse{
      filler_head, std::string(share - filler_key.size() - filler_head.size(), 'f')});
  ASSERT_EQ(entry_bytes(filler_key, *filler), share);

  std::promise<void> halfway;
  std::future<void> halfway_reached = halfway.get_future();
  std::promise<void> evicted;
  std::string relayed_head;
  std::string relayed_body;
  std::jthread relay([&, go_on = evicted.get_future()] {
    std::shared_ptr<const CachedResponse> entry = cache->find(key);
    if (!entry) {
      halfway.set_value();
      return;
    }
    // Relay in 1 KiB pieces, as relay_response writes to a socket.
    constexpr std::size_t kPiece = 1024;
    relayed_head = entry->head;
    std::size_t sent = 0;
    for (; sent < entry->body.size() / 2; sent += kPiece) {
      relayed_body.append(entry->body, sent, kPiece);
    }
    halfway.set_value();
    go_on.wait();
    for (; sent < entry->body.size(); sent += kPiece) {
      relayed_body.append(entry->body, sent, kPiece);
    }
  });

  halfway_reached.wait();
  EXPECT_TRUE(cache->insert(filler_key, filler));
  EXPECT_EQ(cache->find(key), nullptr) << "the filler should have evicted the relayed entry";
  EXPECT_GE(cache->stats().evictions, 1u);
  EXPECT_FALSE(watch.expired()) << "the relay still holds the entry";
  evicted.set_value();
  relay.join();

  EXPECT_EQ(relayed_head, expected_head);
  EXPECT_EQ(relayed_body.size(), expected_body.size());
  EXPECT_TRUE(relayed_body == expected_body) << "the relayed body is not byte-exact";
  EXPECT_TRUE(watch.expired()) << "the evicted entry outlived its last reader";
}

}  // namespace
}  // namespace proxy
