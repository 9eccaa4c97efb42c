// Black-box tests run against every stage binary: CS:APP Proxy Lab's caching check (hits after
// the origin is gone, one key per resource, what is never stored, LRU eviction) and bodies too
// large to cache, relayed in constant memory. The rest of StageTest: stage_test.cpp,
// stage_lifecycle_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <string>

#include "hardening_support.h"
#include "net/socket.h"
#include "proc_stats.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST_P(StageTest, ServesFromCacheAfterTheOriginIsStopped) {
  start_stage();
  const std::string url = origin_url("/bytes/2000");
  HttpResponse first = fetch(proxy_port(), url);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  origin_->stop();
  HttpResponse second = fetch(proxy_port(), url);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(second.field("Content-Length"), "2000");
}

TEST_P(StageTest, CacheKeyIgnoresHostCaseAndDefaultPortSpelling) {
  start_stage();
  // Same resource, spelled two ways: only the first reaches the origin.
  std::string port = std::to_string(origin_->port());
  fetch(proxy_port(), "http://127.0.0.1:" + port + "/bytes/10");
  HttpResponse again = fetch(proxy_port(), "HTTP://127.0.0.1:" + port + "/bytes/10#fragment");
  EXPECT_EQ(again.field("X-Cache"), "HIT");
  EXPECT_EQ(origin_->request_count("/bytes/10"), 1u);
}

TEST_P(StageTest, RelaysTwentyMegabytesByteExactWithoutCachingThem) {
  start_stage();
  fetch(proxy_port(), origin_url("/bytes/1000"));  // warm up: threads, buffers, cache entry
  const long rss_before = harness::read_proc_stats(stage_->pid()).peak_rss_kib;
  constexpr std::size_t kSize = 20 * 1024 * 1024;
  const std::string url = origin_url("/bytes/" + std::to_string(kSize));
  HttpResponse first = fetch(proxy_port(), url, 60s);
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(first.body.size(), kSize);
  EXPECT_TRUE(first.body == harness::deterministic_bytes(kSize)) << "body differs";
  // Streaming holds one 64 KiB buffer, not the body: the peak may not grow by anything near
  // 20 MB (the bound leaves room for sanitizer shadow memory and allocator slack).
  const long rss_after = harness::read_proc_stats(stage_->pid()).peak_rss_kib;
  ASSERT_GT(rss_before, 0);
  EXPECT_LT(rss_after - rss_before, 8 * 1024) << "peak RSS grew from " << rss_before
                                              << " KiB to " << rss_after << " KiB";
  HttpResponse second = fetch(proxy_port(), url, 60s);
  EXPECT_EQ(second.field("X-Cache"), "MISS");
  EXPECT_EQ(origin_->request_count("/bytes/" + std::to_string(kSize)), 2u);
}

TEST_P(StageTest, NeverCachesATruncatedResponse) {
  start_stage();
  const std::string url = origin_url("/truncate/4000");
  HttpResponse first = fetch(proxy_port(), url);
  EXPECT_EQ(first.status, 200);
  EXPECT_FALSE(first.complete) << "the client must see that the body was cut short";
  EXPECT_LT(first.body.size(), 4000u);
  HttpResponse second = fetch(proxy_port(), url);
  EXPECT_EQ(second.field("X-Cache"), "MISS");
  EXPECT_EQ(origin_->request_count("/truncate/"), 2u);
}

TEST_P(StageTest, NeverCachesAResetResponse) {
  start_stage();
  const std::string url = origin_url("/reset/4000");
  fetch(proxy_port(), url);
  HttpResponse second = fetch(proxy_port(), url);
  EXPECT_EQ(second.field("X-Cache"), "MISS");
  EXPECT_EQ(origin_->request_count("/reset/"), 2u);
}

TEST_P(StageTest, NeverCachesANon200Response) {
  start_stage();
  fetch(proxy_port(), origin_url("/status/404"));
  HttpResponse second = fetch(proxy_port(), origin_url("/status/404"));
  EXPECT_EQ(second.status, 404);
  EXPECT_EQ(second.field("X-Cache"), "MISS");
}

TEST_P(StageTest, DoesNotCacheObjectsOverTheMaximumSize) {
  start_stage({"--max-object-bytes", "5000"});
  fetch(proxy_port(), origin_url("/bytes/6000"));
  EXPECT_EQ(fetch(proxy_port(), origin_url("/bytes/6000")).field("X-Cache"), "MISS");
  fetch(proxy_port(), origin_url("/bytes/3000"));
  EXPECT_EQ(fetch(proxy_port(), origin_url("/bytes/3000")).field("X-Cache"), "HIT");
}

TEST_P(StageTest, EvictsTheLeastRecentlyUsedObjectWhenFull) {
  // Room for two 4000-byte objects (plus their URL and head), not three.
  start_stage({"--cache-bytes", "9500", "--max-object-bytes", "5000"});
  fetch(proxy_port(), origin_url("/bytes/4000?a"));
  fetch(proxy_port(), origin_url("/bytes/4000?b"));
  fetch(proxy_port(), origin_url("/bytes/4000?a"));  // a is now more recent than b
  fetch(proxy_port(), origin_url("/bytes/4000?c"));  // evicts b
  EXPECT_EQ(fetch(proxy_port(), origin_url("/bytes/4000?a")).field("X-Cache"), "HIT");
  EXPECT_EQ(fetch(proxy_port(), origin_url("/bytes/4000?c")).field("X-Cache"), "HIT");
  EXPECT_EQ(fetch(proxy_port(), origin_url("/bytes/4000?b")).field("X-Cache"), "MISS");
}

TEST_P(StageTest, HoldsNoMoreThanTheCacheCanStoreWhileRelaying) {
  // A huge per-object limit with a tiny cache: nothing can be stored, so nothing is held.
  start_stage({"--cache-bytes", "1000", "--max-object-bytes", "100000000"});
  fetch(proxy_port(), origin_url("/bytes/1000"));
  const long rss_before = harness::read_proc_stats(stage_->pid()).peak_rss_kib;
  HttpResponse r = fetch(proxy_port(), origin_url("/bytes/20000000"), 60s);
  ASSERT_EQ(r.body.size(), 20000000u);
  EXPECT_LT(harness::read_proc_stats(stage_->pid()).peak_rss_kib - rss_before, 8 * 1024);
}

// RFC 9112 §8: a close-delimited body cannot show that it was cut, so when the origin's chunked
// body breaks off before its last chunk, an HTTP/1.0 client must see a reset, not a clean end.
TEST_P(StageTest, ResetsAnHttp10ClientWhenAChunkedOriginBodyBreaksOff) {
  start_stage();
  RawOrigin broken("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
  const std::string url = "http://127.0.0.1:" + std::to_string(broken.port()) + "/";
  proxy::Socket client = send_request(proxy_port(), proxy_get(url, {}, 0));
  std::string received;
  std::array<char, 4096> buf;
  proxy::IoResult got;
  while ((got = client.read_some(buf, 20s)).status == proxy::IoStatus::ok) {
    received.append(buf.data(), got.bytes);
  }
  EXPECT_EQ(got.status, proxy::IoStatus::error) << "expected a reset, got a clean end after: "
                                                << received;
  EXPECT_EQ(got.error, ECONNRESET);
  // The cut response was not stored: asking again goes to the origin again (and breaks again).
  proxy::Socket again = send_request(proxy_port(), proxy_get(url, {}, 0));
  std::string second;
  while ((got = again.read_some(buf, 20s)).status == proxy::IoStatus::ok) second.append(buf.data(), got.bytes);
  EXPECT_THAT(second, HasSubstr("X-Cache: MISS"));
}

}  // namespace
}  // namespace testing_support
