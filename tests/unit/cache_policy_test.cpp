// Every cache policy and wrapper through the Cache interface (common/cache/cache.h): the contract they
// share is one set of typed tests; what tells them apart (LRU recency, LFU frequency, SIEVE's
// hand and visited bits) has tests of its own. Single-threaded; the threaded tests are in
// cache_concurrency_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "cache/cache.h"
#include "cache/cache_factory.h"
#include "cache/concurrent_sieve_cache.h"
#include "cache/lfu_cache.h"
#include "cache/locked_cache.h"
#include "cache/lru_cache.h"
#include "cache/null_cache.h"
#include "cache/sharded_cache.h"
#include "cache/sieve_cache.h"

namespace proxy {
namespace {

constexpr std::string_view kHead = "HTTP/1.1 200 OK\r\n";

std::shared_ptr<const CachedResponse> response(std::string body) {
  return std::make_shared<const CachedResponse>(
      CachedResponse{std::string(kHead), std::move(body)});
}

// A response that, stored under `key`, is charged exactly `bytes` (at least key + head).
std::shared_ptr<const CachedResponse> charging(std::string_view key, std::size_t bytes) {
  return response(std::string(bytes - key.size() - kHead.size(), 'b'));
}

// Whether `key` is present. A find() — so it counts, and under LRU, LFU and SIEVE a hit
// changes the policy's state: scenarios probe for absence mid-way and for presence at the end.
bool cached(Cache& cache, std::string_view key) {
  return cache.find(key) != nullptr;
}

// ---- the shared contract, typed over every policy and wrapper ----------------------------------

// Each maker builds one kind of cache from (capacity, max object). Wrappers and the
// one-shard ShardedCache must behave exactly like the policy inside them.
struct Lru {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LruCache>(c, m);
  }
};
struct Lfu {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LfuCache>(c, m);
  }
};
struct Sieve {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<SieveCache>(c, m);
  }
};
struct ConcurrentSieve {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<ConcurrentSieveCache>(c, m);
  }
};
struct LockedLru {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LockedCache>(std::make_unique<LruCache>(c, m));
  }
};
struct LockedLfu {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return std::make_unique<LockedCache>(std::make_unique<LfuCache>(c, m));
  }
};
struct OneShardSieve {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return make_concurrent_cache("sieve", 1, c, m);
  }
};
struct OneShardLfu {
  static std::unique_ptr<Cache> make(std::size_t c, std::size_t m) {
    return make_concurrent_cache("lfu", 1, c, m);
  }
};

template <typename Maker>
class CachePolicyTest : public ::testing::Test {
 protected:
  static std::unique_ptr<Cache> make(std::size_t capacity, std::size_t max_object) {
    return Maker::make(capacity, max_object);
  }
};

struct MakerNames {
  template <typename T>
  // GoogleTest calls the name generator by this name.
  // NOLINTNEXTLINE(readability-identifier-naming)
  static std::string GetName(int /*index*/) {
    if (std::is_same_v<T, Lru>) return "Lru";
    if (std::is_same_v<T, Lfu>) return "Lfu";
    if (std::is_same_v<T, Sieve>) return "Sieve";
    if (std::is_same_v<T, ConcurrentSieve>) return "ConcurrentSieve";
    if (std::is_same_v<T, LockedLru>) return "LockedLru";
    if (std::is_same_v<T, LockedLfu>) return "LockedLfu";
    if (std::is_same_v<T, OneShardSieve>) return "OneShardSieve";
    if (std::is_same_v<T, OneShardLfu>) return "OneShardLfu";
    return "Unknown";
  }
};

using Makers = ::testing::Types<Lru, Lfu, Sieve, ConcurrentSieve, LockedLru, LockedLfu,
                                OneShardSieve, OneShardLfu>;
TYPED_TEST_SUITE(CachePolicyTest, Makers, MakerNames);

// With nothing ever hit, LRU (oldest use), LFU (all at frequency 1, ties by recency) and SIEVE
// (the hand starts at the tail) all evict in insertion order.
TYPED_TEST(CachePolicyTest, WithoutHitsEvictsOldestFirst) {
  auto cache = this->make(300, 100);
  ASSERT_TRUE(cache->insert("a", charging("a", 100)));
  ASSERT_TRUE(cache->insert("b", charging("b", 100)));
  ASSERT_TRUE(cache->insert("c", charging("c", 100)));
  ASSERT_TRUE(cache->insert("d", charging("d", 100)));
  EXPECT_FALSE(cached(*cache, "a"));
  ASSERT_TRUE(cache->insert("e", charging("e", 100)));
  EXPECT_FALSE(cached(*cache, "b"));
  EXPECT_EQ(cache->stats().evictions, 2u);
  EXPECT_TRUE(cached(*cache, "c"));
  EXPECT_TRUE(cached(*cache, "d"));
  EXPECT_TRUE(cached(*cache, "e"));
}

// The one ordering every policy agrees on: a single hit on the oldest entry saves it from the
// next eviction, and the next oldest goes instead.
TYPED_TEST(CachePolicyTest, AHitSavesAnEntryFromTheNextEviction) {
  auto cache = this->make(300, 100);
  cache->insert("a", charging("a", 100));
  cache->insert("b", charging("b", 100));
  cache->insert("c", charging("c", 100));
  ASSERT_TRUE(cached(*cache, "a"));
  cache->insert("d", charging("d", 100));
  EXPECT_FALSE(cached(*cache, "b"));
  EXPECT_TRUE(cached(*cache, "a"));
  EXPECT_TRUE(cached(*cache, "c"));
  EXPECT_TRUE(cached(*cache, "d"));
}

TYPED_TEST(CachePolicyTest, ALargeInsertEvictsAsManyAsItNeeds) {
  auto cache = this->make(400, 400);
  for (const char* key : {"a", "b", "c", "d"}) cache->insert(key, charging(key, 100));
  ASSERT_TRUE(cache->insert("big", charging("big", 250)));
  EXPECT_EQ(cache->stats().evictions, 3u);
  EXPECT_EQ(cache->stats().entries, 2u);
  EXPECT_EQ(cache->stats().bytes, 350u);
  EXPECT_TRUE(cached(*cache, "d"));
  EXPECT_TRUE(cached(*cache, "big"));
}

TYPED_TEST(CachePolicyTest, BytesAddUpAcrossInsertsReplacementsErasesAndEvictions) {
  auto cache = this->make(1000, 600);
  const auto a = response("body-a");
  const auto b = response(std::string(200, 'x'));
  cache->insert("http://h/a", a);
  cache->insert("http://h/b", b);
  EXPECT_EQ(cache->stats().bytes, entry_bytes("http://h/a", *a) + entry_bytes("http://h/b", *b));

  const auto bigger_a = response(std::string(300, 'y'));
  cache->insert("http://h/a", bigger_a);  // replacement: the old charge is returned first
  EXPECT_EQ(cache->stats().bytes,
            entry_bytes("http://h/a", *bigger_a) + entry_bytes("http://h/b", *b));
  EXPECT_EQ(cache->stats().entries, 2u);

  cache->erase("http://h/b");
  EXPECT_EQ(cache->stats().bytes, entry_bytes("http://h/a", *bigger_a));

  // Fill past capacity: whatever the policy evicts, the bytes of what remains add up.
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) {
    keys.push_back("http://h/fill" + std::to_string(i));
    cache->insert(keys.back(), charging(keys.back(), 150));
  }
  keys.emplace_back("http://h/a");
  const CacheStats after = cache->stats();
  EXPECT_LE(after.bytes, 1000u);
  EXPECT_GT(after.evictions, 0u);
  std::uint64_t sum = 0;
  std::uint64_t present = 0;
  for (const auto& key : keys) {
    if (auto found = cache->find(key)) {
      sum += entry_bytes(key, *found);
      ++present;
    }
  }
  EXPECT_EQ(sum, after.bytes);
  EXPECT_EQ(present, after.entries);
}

TYPED_TEST(CachePolicyTest, FillsExactlyToCapacityWithoutEvicting) {
  auto cache = this->make(300, 300);
  for (const char* key : {"a", "b", "c"}) ASSERT_TRUE(cache->insert(key, charging(key, 100)));
  EXPECT_EQ(cache->stats().bytes, 300u);
  EXPECT_EQ(cache->stats().evictions, 0u);
}

TYPED_TEST(CachePolicyTest, AnObjectOverMaxObjectBytesIsRefusedAndEvictsNothing) {
  auto cache = this->make(1000, 150);
  cache->insert("a", charging("a", 100));
  EXPECT_FALSE(cache->insert("big", charging("big", 151)));
  EXPECT_FALSE(cached(*cache, "big"));
  EXPECT_EQ(cache->stats().entries, 1u);
  EXPECT_EQ(cache->stats().bytes, 100u);
  EXPECT_EQ(cache->stats().evictions, 0u);
  EXPECT_EQ(cache->stats().insertions, 1u);
  EXPECT_TRUE(cache->insert("max", charging("max", 150)));  // exactly the limit is allowed
}

TYPED_TEST(CachePolicyTest, AnObjectOverCapacityIsRefusedEvenUnderMaxObjectBytes) {
  auto cache = this->make(200, 1000);
  cache->insert("a", charging("a", 100));
  EXPECT_FALSE(cache->insert("big", charging("big", 201)));
  EXPECT_TRUE(cached(*cache, "a"));
  EXPECT_EQ(cache->stats().evictions, 0u);
}

TYPED_TEST(CachePolicyTest, ReplacingAKeyStoresTheNewResponseWithoutAnEviction) {
  auto cache = this->make(1000, 1000);
  cache->insert("http://h/x", response("old"));
  ASSERT_TRUE(cache->insert("http://h/x", response("new, and longer")));
  auto found = cache->find("http://h/x");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->body, "new, and longer");
  const CacheStats stats = cache->stats();
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_EQ(stats.insertions, 2u);
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(stats.bytes, entry_bytes("http://h/x", *found));
}

// Replacing b with a larger response needs room: b's old charge is returned first, then the
// oldest other entry (a) goes — never the entry being replaced, never the newer c.
TYPED_TEST(CachePolicyTest, ReplacingWithALargerResponseEvictsTheOldestOther) {
  auto cache = this->make(300, 300);
  for (const char* key : {"a", "b", "c"}) cache->insert(key, charging(key, 100));
  ASSERT_TRUE(cache->insert("b", charging("b", 200)));
  EXPECT_FALSE(cached(*cache, "a"));
  EXPECT_EQ(cache->stats().evictions, 1u);
  EXPECT_TRUE(cached(*cache, "c"));
  auto b = cache->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(entry_bytes("b", *b), 200u);
}

TYPED_TEST(CachePolicyTest, AZeroByteCacheStoresNothing) {
  for (auto [capacity, max_object] : {std::pair{0, 0}, std::pair{0, 100}, std::pair{100, 0}}) {
    auto cache = this->make(capacity, max_object);
    EXPECT_FALSE(cache->insert("http://h/", response("x")));
    // Not even an entry charged 0 bytes: a zero limit means "cache nothing".
    EXPECT_FALSE(cache->insert("", std::make_shared<const CachedResponse>()));
    EXPECT_FALSE(cached(*cache, "http://h/"));
    EXPECT_FALSE(cached(*cache, ""));
    EXPECT_EQ(cache->stats().entries, 0u);
    EXPECT_EQ(cache->stats().bytes, 0u);
    EXPECT_EQ(cache->stats().misses, 2u);
  }
}

TYPED_TEST(CachePolicyTest, ANullResponseIsRefused) {
  auto cache = this->make(1000, 1000);
  EXPECT_FALSE(cache->insert("k", nullptr));
  EXPECT_EQ(cache->stats().entries, 0u);
}

TYPED_TEST(CachePolicyTest, EraseRemovesTheEntryWithoutCountingAnEviction) {
  auto cache = this->make(1000, 1000);
  cache->insert("a", response("1"));
  cache->insert("b", response("2"));
  cache->erase("a");
  cache->erase("never stored");
  EXPECT_FALSE(cached(*cache, "a"));
  EXPECT_TRUE(cached(*cache, "b"));
  EXPECT_EQ(cache->stats().entries, 1u);
  EXPECT_EQ(cache->stats().evictions, 0u);
}

TYPED_TEST(CachePolicyTest, CountsHitsAndMisses) {
  auto cache = this->make(1000, 1000);
  cache->insert("a", response("1"));
  cached(*cache, "a");
  cached(*cache, "a");
  cached(*cache, "b");
  EXPECT_EQ(cache->stats().hits, 2u);
  EXPECT_EQ(cache->stats().misses, 1u);
}

TYPED_TEST(CachePolicyTest, FindsByAKeyViewIntoAnotherBuffer) {
  auto cache = this->make(1000, 1000);
  cache->insert("http://h/a", response("a"));
  const std::string request_line = "GET http://h/a HTTP/1.1";
  EXPECT_NE(cache->find(std::string_view(request_line).substr(4, 10)), nullptr);
  EXPECT_EQ(cache->find(std::string_view(request_line).substr(4, 9)), nullptr);
}

TYPED_TEST(CachePolicyTest, ReportsItsLimits) {
  auto cache = this->make(1234, 56);
  EXPECT_EQ(cache->capacity_bytes(), 1234u);
  EXPECT_EQ(cache->max_object_bytes(), 56u);
}

TYPED_TEST(CachePolicyTest, AResponseHeldByAReaderSurvivesItsEviction) {
  auto cache = this->make(200, 200);
  cache->insert("a", response("the body being relayed"));
  std::shared_ptr<const CachedResponse> relaying = cache->find("a");
  ASSERT_NE(relaying, nullptr);
  cache->insert("b", charging("b", 200));  // evicts a
  ASSERT_FALSE(cached(*cache, "a"));
  EXPECT_EQ(relaying->body, "the body being relayed");
  EXPECT_EQ(relaying.use_count(), 1);  // the cache let go of it; the reader did not
}

// ---- LRU: recency decides ----------------------------------------------------------------------

TEST(LruRecency, RecencyNotFrequencyDecides) {
  LruCache cache(300, 100);
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  for (int i = 0; i < 5; ++i) cached(cache, "a");  // popular, but long ago
  cached(cache, "b");
  cached(cache, "c");
  cache.insert("d", charging("d", 100));
  EXPECT_FALSE(cached(cache, "a"));
}

// ---- LFU: frequency decides, recency breaks ties -----------------------------------------------

TEST(LfuCache, EvictsTheLeastFrequentlyUsedFirst) {
  LfuCache cache(400, 100);
  for (const char* key : {"a", "b", "c", "d"}) cache.insert(key, charging(key, 100));
  for (int i = 0; i < 3; ++i) cached(cache, "a");
  for (int i = 0; i < 2; ++i) cached(cache, "b");
  cached(cache, "c");
  EXPECT_EQ(cache.frequency("a"), 4u);
  EXPECT_EQ(cache.frequency("b"), 3u);
  EXPECT_EQ(cache.frequency("c"), 2u);
  EXPECT_EQ(cache.frequency("d"), 1u);
  EXPECT_EQ(cache.frequency("absent"), 0u);

  // Room for one new entry at a time: d (never hit) goes first, then each newcomer in turn,
  // because a newcomer starts at frequency 1 — below everything that was ever hit.
  cache.insert("e", charging("e", 100));
  EXPECT_FALSE(cached(cache, "d"));
  cache.insert("f", charging("f", 100));
  EXPECT_FALSE(cached(cache, "e"));
  // A large entry clears the three rarest: f, then c, then b; a, the most used, stays.
  LfuCache wide(400, 400);
  for (const char* key : {"a", "b", "c", "f"}) wide.insert(key, charging(key, 100));
  for (int i = 0; i < 3; ++i) cached(wide, "a");
  for (int i = 0; i < 2; ++i) cached(wide, "b");
  cached(wide, "c");
  wide.insert("big", charging("big", 300));
  EXPECT_EQ(wide.stats().evictions, 3u);
  EXPECT_EQ(wide.frequency("a"), 4u);
  EXPECT_EQ(wide.frequency("b"), 0u);
}

TEST(LfuCache, TiesAreBrokenByRecency) {
  LfuCache cache(300, 100);
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  // All three reach frequency 2, in the order c, a, b: c is the least recently used of them.
  cached(cache, "c");
  cached(cache, "a");
  cached(cache, "b");
  cache.insert("d", charging("d", 100));
  EXPECT_EQ(cache.frequency("c"), 0u);
  EXPECT_EQ(cache.frequency("a"), 2u);
  EXPECT_EQ(cache.frequency("b"), 2u);
  // d, at frequency 1, is now the rarest: it goes next although a and b were used before it.
  cache.insert("e", charging("e", 100));
  EXPECT_EQ(cache.frequency("d"), 0u);
  EXPECT_EQ(cache.frequency("a"), 2u);
  EXPECT_EQ(cache.frequency("b"), 2u);
  EXPECT_EQ(cache.frequency("e"), 1u);
}

TEST(LfuCache, ReplacingAKeyRestartsItsCount) {
  LfuCache cache(1000, 1000);
  cache.insert("a", response("1"));
  for (int i = 0; i < 4; ++i) cached(cache, "a");
  ASSERT_EQ(cache.frequency("a"), 5u);
  cache.insert("a", response("2"));
  EXPECT_EQ(cache.frequency("a"), 1u);
}

// ---- SIEVE: a hit sets a bit; the hand does the rest (NSDI '24, Algorithm 1) ------------------

TEST(SieveCache, AHitOnlySetsTheVisitedBit) {
  SieveCache cache(300, 100);
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  EXPECT_FALSE(cache.visited("a"));
  ASSERT_TRUE(cached(cache, "a"));
  EXPECT_TRUE(cache.visited("a"));
  EXPECT_FALSE(cache.visited("b"));
  EXPECT_FALSE(cache.hand().has_value());  // nothing moved, the hand has not swept yet
}

TEST(SieveCache, TheHandClearsVisitedEntriesAndEvictsTheFirstUnvisited) {
  // Queue, tail to head: a b c d.
  SieveCache cache(400, 100);
  for (const char* key : {"a", "b", "c", "d"}) cache.insert(key, charging(key, 100));
  cached(cache, "a");
  cached(cache, "c");

  // The hand starts at the tail: a is visited (cleared, kept), b is not — b goes.
  cache.insert("e", charging("e", 100));
  EXPECT_FALSE(cache.visited("a"));
  EXPECT_EQ(cache.hand(), "c");  // it rests just past its victim, toward the head
  EXPECT_FALSE(cached(cache, "b"));

  // It resumes at c (visited: cleared, kept) and evicts d. a sits behind the hand unvisited,
  // but the hand does not go back for it: old survivors stay until the hand comes round.
  cache.insert("f", charging("f", 100));
  EXPECT_FALSE(cache.visited("c"));
  EXPECT_EQ(cache.hand(), "e");
  EXPECT_FALSE(cached(cache, "d"));
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(cache.stats().entries, 4u);
}

TEST(SieveCache, TheHandWrapsFromTheHeadToTheTail) {
  SieveCache cache(300, 100);
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  for (const char* key : {"a", "b", "c"}) cached(cache, key);
  // Every entry is visited: the hand clears a, b, c, wraps to the tail and evicts a.
  cache.insert("d", charging("d", 100));
  EXPECT_FALSE(cache.visited("b"));
  EXPECT_FALSE(cache.visited("c"));
  EXPECT_EQ(cache.hand(), "b");
  EXPECT_FALSE(cached(cache, "a"));
}

TEST(SieveCache, EvictingTheHeadSendsTheHandBackToTheTail) {
  SieveCache cache(200, 100);
  cache.insert("a", charging("a", 100));
  cache.insert("b", charging("b", 100));
  cached(cache, "a");
  // a is cleared, b (the head) evicted; nothing lies past the head, so the hand rests at the
  // tail again.
  cache.insert("c", charging("c", 100));
  EXPECT_FALSE(cache.hand().has_value());
  EXPECT_FALSE(cached(cache, "b"));
  cache.insert("d", charging("d", 100));  // the tail is a, now unvisited
  EXPECT_FALSE(cached(cache, "a"));
}

TEST(SieveCache, ErasingTheEntryUnderTheHandMovesTheHandOn) {
  SieveCache cache(300, 100);
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  cache.insert("d", charging("d", 100));  // evicts a; the hand rests on b
  ASSERT_EQ(cache.hand(), "b");
  cache.erase("b");
  EXPECT_EQ(cache.hand(), "c");
  cache.insert("e", charging("e", 100));  // room for e: nothing evicted
  cache.insert("f", charging("f", 100));  // the hand is on c
  EXPECT_FALSE(cached(cache, "c"));
  EXPECT_TRUE(cached(cache, "d"));
}

TEST(SieveCache, AReplacedEntryJoinsTheHeadUnvisited) {
  SieveCache cache(300, 100);
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  cached(cache, "a");
  cache.insert("a", charging("a", 100));  // a is now the newest, and unvisited
  EXPECT_FALSE(cache.visited("a"));
  cache.insert("d", charging("d", 100));  // tail is b
  EXPECT_FALSE(cached(cache, "b"));
  EXPECT_TRUE(cached(cache, "a"));
}

// ---- the three policies side by side -----------------------------------------------------------

// The background study's finding in miniature (cache-sim's `shift` workload at scale): a, b
// and c were popular yesterday; today only x and y are asked for, alternately. LFU keeps
// yesterday's entries — their counts are high and never decay — and x and y keep evicting each
// other from the one free slot. LRU and SIEVE let the old entries go and recover.
std::uint64_t hits_after_shift(Cache& cache) {
  for (const char* key : {"a", "b", "c"}) cache.insert(key, charging(key, 100));
  for (int round = 0; round < 10; ++round) {
    for (const char* key : {"a", "b", "c"}) cached(cache, key);
  }
  const std::uint64_t before = cache.stats().hits;
  for (int request = 0; request < 20; ++request) {
    const char* key = request % 2 == 0 ? "x" : "y";
    if (!cached(cache, key)) cache.insert(key, charging(key, 100));
  }
  return cache.stats().hits - before;
}

TEST(PopularityShift, LfuNeverLetsYesterdaysFavouritesGo) {
  LruCache lru(400, 100);
  LfuCache lfu(400, 100);
  SieveCache sieve(400, 100);
  EXPECT_EQ(hits_after_shift(lfu), 0u);
  EXPECT_GE(hits_after_shift(lru), 18u);
  EXPECT_GE(hits_after_shift(sieve), 16u);
  EXPECT_EQ(lfu.frequency("a"), 11u);
}

// ---- ConcurrentSieveCache is SIEVE, exactly --------------------------------------------------

TEST(ConcurrentSieveCache, MakesTheSameChoicesAsSieveCache) {
  SieveCache plain(2000, 500);
  ConcurrentSieveCache concurrent(2000, 500);
  std::mt19937 random(7);
  for (int i = 0; i < 5000; ++i) {
    const std::string key = "k" + std::to_string(random() % 40);
    switch (random() % 4) {
      case 0: {
        auto r = charging(key, 50 + random() % 300);
        EXPECT_EQ(plain.insert(key, r), concurrent.insert(key, r));
        break;
      }
      case 1:
        plain.erase(key);
        concurrent.erase(key);
        break;
      default:
        EXPECT_EQ(plain.find(key), concurrent.find(key)) << "request " << i << " for " << key;
    }
  }
  const CacheStats a = plain.stats();
  const CacheStats b = concurrent.stats();
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.misses, b.misses);
  EXPECT_EQ(a.evictions, b.evictions);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.entries, b.entries);
}

// ---- ShardedCache ------------------------------------------------------------------------------

TEST(ShardedCache, SplitsCapacityEvenlyAndSumsStats) {
  auto cache = make_concurrent_cache("sieve", 4, 4000, 1000);
  auto* sharded = dynamic_cast<ShardedCache*>(cache.get());
  ASSERT_NE(sharded, nullptr);
  ASSERT_EQ(sharded->shard_count(), 4u);
  EXPECT_EQ(cache->capacity_bytes(), 4000u);
  EXPECT_EQ(cache->max_object_bytes(), 1000u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(sharded->shard(i).capacity_bytes(), 1000u);

  std::vector<int> per_shard(4);
  for (int i = 0; i < 40; ++i) {
    const std::string key = "http://h/" + std::to_string(i);
    ++per_shard[sharded->shard_index(key)];
    cache->insert(key, charging(key, 60));
  }
  for (int count : per_shard) EXPECT_GT(count, 0) << "a shard got no keys";
  for (int i = 0; i < 40; ++i) cached(*cache, "http://h/" + std::to_string(i));
  const CacheStats total = cache->stats();
  CacheStats sum;
  for (std::size_t i = 0; i < 4; ++i) {
    const CacheStats s = sharded->shard(i).stats();
    EXPECT_LE(s.bytes, 1000u);
    sum.hits += s.hits;
    sum.bytes += s.bytes;
    sum.entries += s.entries;
  }
  EXPECT_EQ(total.hits, sum.hits);
  EXPECT_EQ(total.bytes, sum.bytes);
  EXPECT_EQ(total.entries, sum.entries);
  EXPECT_EQ(total.hits + total.misses, 40u);
  EXPECT_EQ(total.insertions, 40u);
}

TEST(ShardedCache, AnObjectLargerThanOneShardsShareIsRefused) {
  // max_object_bytes says 1000, but each of the 4 shards holds only 250 bytes.
  auto cache = make_concurrent_cache("lru", 4, 1000, 1000);
  EXPECT_FALSE(cache->insert("http://h/big", charging("http://h/big", 251)));
  EXPECT_TRUE(cache->insert("http://h/fits", charging("http://h/fits", 250)));
}

TEST(ShardedCache, RefusesNoShardsAndNullShards) {
  EXPECT_THROW(ShardedCache{std::vector<std::unique_ptr<Cache>>{}}, std::invalid_argument);
  std::vector<std::unique_ptr<Cache>> with_null;
  with_null.push_back(std::make_unique<NullCache>());
  with_null.push_back(nullptr);
  EXPECT_THROW(ShardedCache{std::move(with_null)}, std::invalid_argument);
  EXPECT_THROW(make_concurrent_cache("sieve", 0, 1000, 100), std::invalid_argument);
}

// ---- none --------------------------------------------------------------------------------------

TEST(NullCache, EveryRequestIsAMiss) {
  NullCache cache;
  EXPECT_FALSE(cache.insert("http://h/", response("x")));
  EXPECT_FALSE(cached(cache, "http://h/"));
  EXPECT_FALSE(cached(cache, "http://h/"));
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.insertions, 0u);
  EXPECT_EQ(stats.bytes, 0u);
}

// ---- choosing by name --------------------------------------------------------------------------

TEST(CacheFactory, OffersEveryPolicyInHelpOrder) {
  EXPECT_EQ(cache_policy_names(), (std::vector<std::string>{"lru", "lfu", "sieve", "none"}));
}

TEST(CacheFactory, BuildsThePolicyNamed) {
  EXPECT_NE(dynamic_cast<LruCache*>(make_cache("lru", 100, 10).get()), nullptr);
  EXPECT_NE(dynamic_cast<LfuCache*>(make_cache("lfu", 100, 10).get()), nullptr);
  EXPECT_NE(dynamic_cast<SieveCache*>(make_cache("sieve", 100, 10).get()), nullptr);
  EXPECT_NE(dynamic_cast<NullCache*>(make_cache("none", 100, 10).get()), nullptr);
  EXPECT_THROW(make_cache("fifo", 100, 10), std::invalid_argument);
  EXPECT_THROW(make_cache("LRU", 100, 10), std::invalid_argument);
}

TEST(CacheFactory, BuildsTheConcurrentCacheNamed) {
  for (const auto& policy : cache_policy_names()) {
    auto cache = make_concurrent_cache(policy, 8, 8000, 500);
    ASSERT_NE(cache, nullptr) << policy;
    if (policy == "none") {
      EXPECT_NE(dynamic_cast<NullCache*>(cache.get()), nullptr);
      continue;
    }
    auto* sharded = dynamic_cast<ShardedCache*>(cache.get());
    ASSERT_NE(sharded, nullptr) << policy;
    EXPECT_EQ(sharded->shard_count(), 8u);
    const bool shared_lock_shard =
        dynamic_cast<const ConcurrentSieveCache*>(&sharded->shard(0)) != nullptr;
    EXPECT_EQ(shared_lock_shard, policy == "sieve") << policy;
  }
  EXPECT_THROW(make_concurrent_cache("fifo", 4, 100, 10), std::invalid_argument);
}

}  // namespace
}  // namespace proxy
