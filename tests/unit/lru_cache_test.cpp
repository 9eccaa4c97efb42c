// LruCache (common/cache/lru_cache.h) through the Cache interface (common/cache/cache.h): eviction order,
// byte accounting, size limits and counters.
#include "cache/lru_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "cache/cache.h"

namespace proxy {
namespace {

constexpr std::string_view kHead = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n";

std::shared_ptr<const CachedResponse> response(std::string body,
                                               std::string head = std::string(kHead)) {
  return std::make_shared<const CachedResponse>(CachedResponse{std::move(head), std::move(body)});
}

// A response that, stored under `key`, is charged exactly `bytes`.
std::shared_ptr<const CachedResponse> response_charging(std::string_view key, std::size_t bytes) {
  return response(std::string(bytes - key.size() - kHead.size(), 'b'));
}

bool cached(Cache& cache, std::string_view key) {
  return cache.find(key) != nullptr;
}

TEST(EntryBytes, ChargesKeyHeadAndBody) {
  const CachedResponse r{"HTTP/1.1 200 OK\r\n", "hello"};
  EXPECT_EQ(entry_bytes("http://h/", r), 9u + 17u + 5u);
  EXPECT_EQ(entry_bytes("", CachedResponse{}), 0u);
}

// ---- eviction order ---------------------------------------------------------------------------

TEST(LruCache, EvictsTheLeastRecentlyInsertedWhenNothingWasRead) {
  LruCache cache(300, 100);
  ASSERT_TRUE(cache.insert("a", response_charging("a", 100)));
  ASSERT_TRUE(cache.insert("b", response_charging("b", 100)));
  ASSERT_TRUE(cache.insert("c", response_charging("c", 100)));
  ASSERT_TRUE(cache.insert("d", response_charging("d", 100)));
  EXPECT_FALSE(cached(cache, "a"));
  EXPECT_TRUE(cached(cache, "b"));
  EXPECT_TRUE(cached(cache, "c"));
  EXPECT_TRUE(cached(cache, "d"));
}

TEST(LruCache, AHitMakesTheEntryMostRecentlyUsed) {
  LruCache cache(300, 100);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  cache.insert("c", response_charging("c", 100));
  ASSERT_TRUE(cached(cache, "a"));  // now b is the least recently used
  cache.insert("d", response_charging("d", 100));
  EXPECT_FALSE(cached(cache, "b"));
  EXPECT_TRUE(cached(cache, "a"));
  cache.insert("e", response_charging("e", 100));  // c was used least recently
  EXPECT_FALSE(cached(cache, "c"));
  EXPECT_TRUE(cached(cache, "d"));
  EXPECT_TRUE(cached(cache, "e"));
}

TEST(LruCache, AMissDoesNotChangeRecency) {
  LruCache cache(200, 100);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  EXPECT_FALSE(cached(cache, "zzz"));
  cache.insert("c", response_charging("c", 100));
  EXPECT_FALSE(cached(cache, "a"));
  EXPECT_TRUE(cached(cache, "b"));
}

TEST(LruCache, ALargeInsertEvictsSeveralEntriesOldestFirst) {
  LruCache cache(400, 400);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  cache.insert("c", response_charging("c", 100));
  cache.insert("d", response_charging("d", 100));
  ASSERT_TRUE(cache.insert("big", response_charging("big", 250)));
  EXPECT_EQ(cache.stats().evictions, 3u);
  EXPECT_EQ(cache.stats().bytes, 350u);
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_TRUE(cached(cache, "d"));
  EXPECT_TRUE(cached(cache, "big"));
}

TEST(LruCache, AnEntryFillingTheWholeCapacityEvictsEverythingElse) {
  LruCache cache(300, 300);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  ASSERT_TRUE(cache.insert("all", response_charging("all", 300)));
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().bytes, 300u);
  EXPECT_EQ(cache.stats().evictions, 2u);
}

// ---- byte accounting --------------------------------------------------------------------------

TEST(LruCache, BytesAddUpAcrossInsertsReplacementsErasesAndEvictions) {
  LruCache cache(1000, 500);
  const auto a = response("body-a");
  const auto b = response(std::string(200, 'x'));
  cache.insert("http://h/a", a);
  cache.insert("http://h/b", b);
  std::size_t expected = entry_bytes("http://h/a", *a) + entry_bytes("http://h/b", *b);
  EXPECT_EQ(cache.stats().bytes, expected);
  EXPECT_EQ(cache.stats().entries, 2u);

  const auto a2 = response(std::string(300, 'y'), "HTTP/1.1 200 OK\r\n");
  cache.insert("http://h/a", a2);  // replaces
  expected = expected - entry_bytes("http://h/a", *a) + entry_bytes("http://h/a", *a2);
  EXPECT_EQ(cache.stats().bytes, expected);
  EXPECT_EQ(cache.stats().entries, 2u);

  cache.erase("http://h/b");
  expected -= entry_bytes("http://h/b", *b);
  EXPECT_EQ(cache.stats().bytes, expected);
  EXPECT_EQ(cache.stats().entries, 1u);

  // Fill past capacity: the oldest entries go, and bytes stays the sum of what is left.
  std::size_t sum_of_last_three = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string key = "http://h/fill" + std::to_string(i);
    const auto r = response(std::string(250, 'f'));
    cache.insert(key, r);
    if (i >= 2) sum_of_last_three += entry_bytes(key, *r);
    EXPECT_LE(cache.stats().bytes, cache.capacity_bytes());
  }
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.stats().bytes, sum_of_last_three);

  for (int i = 2; i < 5; ++i) cache.erase("http://h/fill" + std::to_string(i));
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(LruCache, FillsExactlyToCapacityWithoutEvicting) {
  LruCache cache(300, 100);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  cache.insert("c", response_charging("c", 100));
  EXPECT_EQ(cache.stats().bytes, 300u);
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.stats().entries, 3u);
}

// ---- size limits ------------------------------------------------------------------------------

TEST(LruCache, ObjectOfExactlyMaxObjectBytesIsStored) {
  LruCache cache(1000, 100);
  EXPECT_TRUE(cache.insert("k", response_charging("k", 100)));
  EXPECT_TRUE(cached(cache, "k"));
}

TEST(LruCache, ObjectOverMaxObjectBytesIsRefusedAndEvictsNothing) {
  LruCache cache(1000, 100);
  cache.insert("small", response_charging("small", 60));
  const CacheStats before = cache.stats();
  EXPECT_FALSE(cache.insert("k", response_charging("k", 101)));
  EXPECT_FALSE(cached(cache, "k"));
  EXPECT_TRUE(cached(cache, "small"));
  EXPECT_EQ(cache.stats().bytes, before.bytes);
  EXPECT_EQ(cache.stats().entries, before.entries);
  EXPECT_EQ(cache.stats().insertions, before.insertions);
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST(LruCache, TheKeyCountsTowardMaxObjectBytes) {
  LruCache cache(1000, 100);
  const auto r = response(std::string(100 - kHead.size(), 'b'));  // head + body = 100
  EXPECT_FALSE(cache.insert("k", r));
}

TEST(LruCache, ObjectLargerThanCapacityIsRefusedEvenUnderMaxObjectBytes) {
  LruCache cache(100, 1000);
  cache.insert("a", response_charging("a", 50));
  EXPECT_FALSE(cache.insert("k", response_charging("k", 101)));
  EXPECT_TRUE(cached(cache, "a"));
  EXPECT_EQ(cache.stats().evictions, 0u);
}

TEST(LruCache, NullResponseIsRefused) {
  LruCache cache(1000, 1000);
  EXPECT_FALSE(cache.insert("k", nullptr));
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(LruCache, ZeroByteCacheStoresNothing) {
  LruCache cache(0, 0);
  EXPECT_FALSE(cache.insert("http://h/", response("x")));
  EXPECT_FALSE(cached(cache, "http://h/"));
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().insertions, 0u);
}

TEST(LruCache, ZeroByteCacheRefusesEvenAnEntryChargedZeroBytes) {
  using Limits = std::pair<std::size_t, std::size_t>;
  for (auto [capacity, max_object] : {Limits{0, 0}, Limits{0, 100}, Limits{100, 0}}) {
    LruCache cache(capacity, max_object);
    EXPECT_FALSE(cache.insert("", std::make_shared<const CachedResponse>()))
        << "capacity " << capacity << ", max object " << max_object;
    EXPECT_FALSE(cached(cache, ""));
    EXPECT_EQ(cache.stats().entries, 0u);
  }
}

TEST(LruCache, ReportsItsLimits) {
  LruCache cache(1234, 56);
  EXPECT_EQ(cache.capacity_bytes(), 1234u);
  EXPECT_EQ(cache.max_object_bytes(), 56u);
}

// ---- replacing a key --------------------------------------------------------------------------

TEST(LruCache, InsertingAnExistingKeyReplacesItsResponse) {
  LruCache cache(1000, 1000);
  cache.insert("k", response("old"));
  ASSERT_TRUE(cache.insert("k", response("new body")));
  auto found = cache.find("k");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->body, "new body");
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().bytes, entry_bytes("k", *found));
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.stats().insertions, 2u);
}

TEST(LruCache, ReplacingWithALargerResponseReusesTheOldEntrysRoom) {
  LruCache cache(300, 300);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  cache.insert("c", response_charging("c", 100));
  // 150 fits once a's own 100 are given back plus one more entry evicted (b, the oldest left).
  ASSERT_TRUE(cache.insert("a", response_charging("a", 150)));
  EXPECT_FALSE(cached(cache, "b"));
  EXPECT_TRUE(cached(cache, "c"));
  EXPECT_TRUE(cached(cache, "a"));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().bytes, 250u);
}

TEST(LruCache, ReplacingMakesTheKeyMostRecentlyUsed) {
  LruCache cache(300, 100);
  cache.insert("a", response_charging("a", 100));
  cache.insert("b", response_charging("b", 100));
  cache.insert("c", response_charging("c", 100));
  cache.insert("a", response_charging("a", 100));
  cache.insert("d", response_charging("d", 100));
  EXPECT_FALSE(cached(cache, "b"));
  EXPECT_TRUE(cached(cache, "a"));
}

// ---- erase ------------------------------------------------------------------------------------

TEST(LruCache, EraseRemovesTheEntryWithoutCountingAnEviction) {
  LruCache cache(1000, 1000);
  cache.insert("k", response("body"));
  cache.erase("k");
  EXPECT_FALSE(cached(cache, "k"));
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
  cache.erase("k");  // absent: nothing happens
  cache.erase("never");
  EXPECT_EQ(cache.stats().bytes, 0u);
}

// ---- counters ---------------------------------------------------------------------------------

TEST(LruCache, CountsHitsAndMisses) {
  LruCache cache(1000, 1000);
  EXPECT_EQ(cache.find("http://h/a"), nullptr);
  cache.insert("http://h/a", response("a"));
  EXPECT_NE(cache.find("http://h/a"), nullptr);
  EXPECT_NE(cache.find("http://h/a"), nullptr);
  EXPECT_EQ(cache.find("http://h/b"), nullptr);
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_EQ(cache.stats().misses, 2u);
  EXPECT_EQ(cache.stats().insertions, 1u);
}

TEST(LruCache, CountsOneEvictionPerEntryRemovedForRoom) {
  LruCache cache(200, 100);
  for (int i = 0; i < 6; ++i) cache.insert(std::to_string(i), response_charging("0", 100));
  EXPECT_EQ(cache.stats().evictions, 4u);
  EXPECT_EQ(cache.stats().insertions, 6u);
  EXPECT_EQ(cache.stats().entries, 2u);
}

TEST(LruCache, FindsByAKeyViewIntoAnotherBuffer) {
  LruCache cache(1000, 1000);
  cache.insert("http://h/a", response("a"));
  const std::string request_line = "GET http://h/a HTTP/1.1";
  EXPECT_NE(cache.find(std::string_view(request_line).substr(4, 10)), nullptr);
  EXPECT_EQ(cache.find(std::string_view(request_line).substr(4, 9)), nullptr);
}

// ---- shared ownership -------------------------------------------------------------------------

TEST(LruCache, AResponseHeldByAReaderSurvivesItsEviction) {
  LruCache cache(200, 200);
  cache.insert("a", response("the body being relayed"));
  std::shared_ptr<const CachedResponse> relaying = cache.find("a");
  ASSERT_NE(relaying, nullptr);
  cache.insert("b", response_charging("b", 200));  // evicts a
  ASSERT_FALSE(cached(cache, "a"));
  EXPECT_EQ(relaying->body, "the body being relayed");
  EXPECT_EQ(relaying->head, kHead);
  EXPECT_EQ(relaying.use_count(), 1);  // the cache let go of it
}

TEST(LruCache, AResponseHeldByAReaderSurvivesErase) {
  LruCache cache(1000, 1000);
  cache.insert("a", response("still here"));
  auto relaying = cache.find("a");
  cache.erase("a");
  EXPECT_EQ(relaying->body, "still here");
}

}  // namespace
}  // namespace proxy
