// serve_hit_now (common/transaction/proxy.h): stage 4's poller answers a hit without a worker.
// Through real loopback sockets: what it answers, what it leaves to serve_request, and a response
// the client's socket takes only part of.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "cache/cache_factory.h"
#include "http/http_cache_rules.h"
#include "http/uri.h"
#include "loopback_pair.h"
#include "origin_server.h"
#include "transaction/proxy.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;
using namespace loopback;

std::string get(const std::string& url, const std::string& extra = "") {
  return "GET " + url + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

class ServeHitNow : public ::testing::Test {
 protected:
  void SetUp() override { options_.keep_alive = true; }

  // Stores `body` under `url`, fresh for an hour.
  void store(const std::string& url, std::string body) {
    CachedResponse entry;
    entry.head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n";
    entry.body = std::move(body);
    entry.freshness.response_time = unix_now();
    entry.freshness.lifetime = 3600;
    ASSERT_TRUE(cache_->insert(parse_absolute_uri(url)->cache_key(),
                               std::make_shared<const CachedResponse>(std::move(entry))));
  }

  // What the poller does with a head: classify it once (admission.h), then serve_hit_now with
  // the verdict, which front_ keeps for whatever comes next (a worker, in one test).
  HitOutcome hit_now(ClientConnection& connection, std::string& head) {
    ClassifiedRequest judged = classify(head, options_);
    front_.reset();
    if (judged.status != ParseStatus::incomplete) front_ = std::move(judged);
    return serve_hit_now(connection, head, front_, *cache_, options_, stats_);
  }

  std::unique_ptr<Cache> cache_ = make_cache("lru", 1 << 20, 1 << 20);
  ProxyOptions options_;
  ProxyStats stats_;
  std::optional<ClassifiedRequest> front_;
};

TEST_F(ServeHitNow, AnswersAFreshHitWholeAndLeavesAPipelinedRequestInTheHead) {
  store("http://o.test/a", "hello");
  Pair pair = connected_pair();
  std::string head = get("http://o.test/a") + "GET http://o.test/b HTTP/1.1\r\n";
  EXPECT_EQ(hit_now(pair.server, head), HitOutcome::served);
  EXPECT_EQ(head, "GET http://o.test/b HTTP/1.1\r\n") << "only the served request's bytes go";
  const std::string response = read_response_text(pair.client);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200 OK\r\n")) << response;
  EXPECT_NE(response.find("X-Cache: HIT\r\n"), std::string::npos) << response;
  EXPECT_NE(response.find("Content-Length: 5\r\n"), std::string::npos) << response;
  EXPECT_NE(response.find("Age: "), std::string::npos) << response;
  EXPECT_TRUE(response.ends_with("\r\n\r\nhello")) << response;
  EXPECT_EQ(stats_.requests.load(), 1u);
  EXPECT_EQ(pair.server.requests(), 1u);
  EXPECT_EQ(cache_->stats().hits, 1u);
}

TEST_F(ServeHitNow, LeavesEveryOtherRequestAloneWithoutALookup) {
  store("http://o.test/a", "hello");
  const std::string cases[] = {
      "HEAD http://o.test/a HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST http://o.test/a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
      get("http://o.test/a", "Host: y\r\n"),
      get("http://o.test/a", "Range: bytes=0-1\r\n"),
      "GET /a HTTP/1.1\r\nHost: o.test\r\n\r\n",
      "GET http://o.test/a HTTP/1.1\r\nHost: x\r\n",  // incomplete
  };
  for (const std::string& request : cases) {
    Pair pair = connected_pair();
    std::string head = request;
    EXPECT_EQ(hit_now(pair.server, head),
              HitOutcome::not_served)
        << request;
    EXPECT_EQ(head, request);
  }
  EXPECT_EQ(cache_->stats().hits + cache_->stats().misses, 0u) << "a lookup was made";
  EXPECT_EQ(stats_.requests.load(), 0u);
}

// A hit on a connection that closes after it is a worker's to send (it closes the connection),
// but it is looked up here, once: stage 4 lets a stored response skip its origin's limit
// (found_stored), and serve_request goes on from this lookup without counting another.
TEST_F(ServeHitNow, LooksUpAHitOnAClosingConnectionAndLeavesItToAWorker) {
  store("http://o.test/a", "hello");
  const std::string cases[] = {
      get("http://o.test/a", "Connection: close\r\n"),
      "GET http://o.test/a HTTP/1.0\r\n\r\n",  // 1.0 without keep-alive closes too
  };
  std::uint64_t lookups = 0;
  for (const std::string& request : cases) {
    Pair pair = connected_pair();
    std::string head = request;
    EXPECT_EQ(hit_now(pair.server, head), HitOutcome::not_served)
        << request;
    EXPECT_EQ(head, request);
    EXPECT_TRUE(pair.server.found_stored()) << request;
    EXPECT_EQ(cache_->stats().hits, ++lookups) << "one lookup per request: " << request;
  }
  EXPECT_EQ(stats_.requests.load(), 0u) << "not answered here, so not counted here";
  Pair pair = connected_pair();
  std::string head = get("http://o.test/nothing", "Connection: close\r\n");
  EXPECT_EQ(hit_now(pair.server, head), HitOutcome::not_served);
  EXPECT_FALSE(pair.server.found_stored()) << "a miss is not a stored response";
  // One the client wants revalidated goes to the origin: it must take its origin's limit.
  Pair again = connected_pair();
  std::string revalidate = get("http://o.test/a", "Cache-Control: no-cache\r\n");
  EXPECT_EQ(hit_now(again.server, revalidate),
            HitOutcome::not_served);
  EXPECT_FALSE(again.server.found_stored()) << "a revalidation is no hit";
}

// The proxy's own /metrics is answered here as well (stage 4's poller answers it while every
// worker is busy), without a cache lookup; on a connection that would close it is left alone.
TEST_F(ServeHitNow, AnswersMetricsOnAPersistentConnectionOnly) {
  options_.metrics = [] { return std::string("proxy_requests_total 7\n"); };
  Pair pair = connected_pair();
  std::string head = get("/metrics");
  EXPECT_EQ(hit_now(pair.server, head), HitOutcome::served);
  EXPECT_EQ(head, "");
  const std::string response = read_response_text(pair.client);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200 OK\r\n")) << response;
  EXPECT_NE(response.find("text/plain; version=0.0.4"), std::string::npos) << response;
  EXPECT_NE(response.find("Cache-Control: no-store\r\n"), std::string::npos) << response;
  EXPECT_TRUE(response.ends_with("\r\n\r\nproxy_requests_total 7\n")) << response;
  EXPECT_EQ(stats_.requests.load(), 1u);

  std::string closing = get("/metrics", "Connection: close\r\n");
  EXPECT_EQ(hit_now(pair.server, closing),
            HitOutcome::not_served);
  options_.metrics = nullptr;
  std::string unset = get("/metrics");
  EXPECT_EQ(hit_now(pair.server, unset), HitOutcome::not_served);
  EXPECT_EQ(cache_->stats().hits + cache_->stats().misses, 0u) << "a lookup was made";
}

// A miss is looked up once: serve_request goes on from serve_hit_now's lookup, fetches from the
// origin, and the cache counts one miss, not two.
TEST_F(ServeHitNow, HandsAMissToServeRequestWithItsLookupCountedOnce) {
  harness::OriginServer origin;
  const std::string url = "http://127.0.0.1:" + std::to_string(origin.port()) + "/bytes/10";
  Pair pair = connected_pair();
  std::string head = get(url);
  EXPECT_EQ(hit_now(pair.server, head), HitOutcome::not_served);
  EXPECT_EQ(cache_->stats().misses, 1u);
  ASSERT_TRUE(front_.has_value()) << "serve_hit_now leaves the verdict for the worker";
  pair.server.add_buffered(head, std::move(front_));
  EXPECT_TRUE(serve_request(pair.server, *cache_, options_, stats_));
  const std::string response = read_response_text(pair.client);
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200 OK\r\n")) << response;
  EXPECT_TRUE(response.ends_with(harness::deterministic_bytes(10)));
  EXPECT_EQ(cache_->stats().misses, 1u) << "serve_request looked the request up again";
  EXPECT_EQ(origin.request_count("/bytes/10"), 1u);
}

// A stored response the client's socket cannot take at once: the rest stays in the connection
// until send_unsent() gets it out, and the client reads it byte-exact.
TEST_F(ServeHitNow, KeepsWhatTheSocketDidNotTakeUntilSendUnsent) {
  const std::string body = harness::deterministic_bytes(60'000);
  store("http://o.test/big", body);
  Pair pair = connected_pair(4096, 4096);
  std::string head = get("http://o.test/big");
  ASSERT_EQ(hit_now(pair.server, head), HitOutcome::partly_sent);
  ASSERT_TRUE(pair.server.has_unsent());
  std::string received;
  std::jthread reader([&] { received = read_exactly(pair.client, 60'000 + 200); });
  const auto until = std::chrono::steady_clock::now() + 30s;
  IoStatus status = IoStatus::timeout;
  while (status == IoStatus::timeout && std::chrono::steady_clock::now() < until) {
    pollfd writable{pair.server.socket().fd(), POLLOUT, 0};
    ::poll(&writable, 1, 1000);
    status = pair.server.send_unsent();
  }
  EXPECT_EQ(status, IoStatus::ok);
  EXPECT_FALSE(pair.server.has_unsent());
  pair.server = ClientConnection(Socket());  // the close ends the reader's wait
  reader.join();
  const std::size_t blank = received.find("\r\n\r\n");
  ASSERT_NE(blank, std::string::npos);
  EXPECT_EQ(received.substr(blank + 4), body);
}

}  // namespace
}  // namespace proxy
