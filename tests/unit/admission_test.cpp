// classify (common/transaction/admission.h): one request head, judged once, and every path that
// serves it acting on that one verdict. The same table of requests goes through classify, through a
// worker (serve_request, parsing the head itself and taking the poller's verdict), through stage
// 4's poller hit (serve_hit_now) and its poller miss (start_miss_now), and through the key of the
// origin's concurrency limit; each path must do what the verdict says. Real loopback sockets and
// the harness origin, as in serve_hit_now_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_factory.h"
#include "http/http_cache_rules.h"
#include "http/uri.h"
#include "loopback_pair.h"
#include "origin_server.h"
#include "poller/origin_pool.h"
#include "transaction/admission.h"
#include "transaction/proxy.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;
using namespace loopback;

// One request, and what every path must agree on.
struct Case {
  std::string name;
  std::string head;  // "{O}" stands for the harness origin's authority
  Route route;
  ServingPath path;
  int worker_status;  // what a worker answers
};

std::string fill(std::string raw, const std::string& authority) {
  for (std::size_t at; (at = raw.find("{O}")) != std::string::npos;) raw.replace(at, 3, authority);
  return raw;
}

// The status code of the response `socket` receives (its status line only: a HEAD or a
// persistent answer need not end for it).
int status_of(const Socket& socket) {
  std::string line;
  std::array<char, 1> byte;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!line.ends_with("\r\n") && std::chrono::steady_clock::now() < until) {
    IoResult got = socket.read_some(byte, 1s);
    if (got.status == IoStatus::ok) line += byte[0];
    if (got.status == IoStatus::eof || got.status == IoStatus::error) break;
  }
  return line.size() > 12 ? std::stoi(line.substr(9, 3)) : 0;
}

class Admission : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.keep_alive = true;
    options_.origin_pool = &pool_;
    options_.metrics = [] { return std::string("proxy_requests_total 1\n"); };
    const std::string o = authority();
    // RFC 9112 §3.2: a server answers 400 to an HTTP/1.1 request without Host, and to any with
    // more than one; HTTP/1.0 had no Host, so its requests pass without one.
    cases_ = {
        {"a plain GET, absolute-form", "GET http://{O}/bytes/5 HTTP/1.1\r\nHost: {O}\r\n\r\n",
         Route::cache_get, ServingPath::poller, 200},
        {"HTTP/1.1 without Host", "GET http://{O}/bytes/5 HTTP/1.1\r\n\r\n", Route::refuse,
         ServingPath::worker, 400},
        {"HTTP/1.0 without Host", "GET http://{O}/bytes/5 HTTP/1.0\r\n\r\n", Route::cache_get,
         ServingPath::poller_lookup, 200},
        {"two Host fields", "GET http://{O}/bytes/5 HTTP/1.1\r\nHost: {O}\r\nHost: {O}\r\n\r\n",
         Route::refuse, ServingPath::worker, 400},
        {"HEAD", "HEAD http://{O}/bytes/5 HTTP/1.1\r\nHost: {O}\r\n\r\n", Route::forward,
         ServingPath::worker, 200},
        {"origin-form", "GET /bytes/5 HTTP/1.1\r\nHost: {O}\r\n\r\n", Route::refuse,
         ServingPath::worker, 400},
        {"origin-form /metrics", "GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n", Route::metrics,
         ServingPath::poller, 200},
        {"CONNECT to a port not allowed", "CONNECT {O} HTTP/1.1\r\nHost: {O}\r\n\r\n",
         Route::tunnel, ServingPath::worker, 403},
        {"CONNECT without Host", "CONNECT {O} HTTP/1.1\r\n\r\n", Route::refuse,
         ServingPath::worker, 400},
        {"a GET with a body", "GET http://{O}/bytes/5 HTTP/1.1\r\nHost: {O}\r\nContent-Length: 1"
                              "\r\n\r\nx",
         Route::cache_get, ServingPath::worker, 200},
        {"a Range GET", "GET http://{O}/bytes/5 HTTP/1.1\r\nHost: {O}\r\nRange: bytes=0-1\r\n\r\n",
         Route::forward, ServingPath::worker, 200},
        {"a malformed head", "GET http://{O}/bytes/5 HTTP/1.1\nHost: {O}\n\n", Route::refuse,
         ServingPath::worker, 400},
    };
    for (Case& c : cases_) c.head = fill(c.head, o);
  }

  [[nodiscard]] std::string authority() const {
    return "127.0.0.1:" + std::to_string(origin_.port());
  }
  // The verdict as the poller keeps it: none while the head is incomplete.
  std::optional<ClassifiedRequest> judged(const std::string& head) const {
    ClassifiedRequest verdict = classify(head, options_);
    if (verdict.status == ParseStatus::incomplete) return std::nullopt;
    return verdict;
  }
  // Stores a fresh response for the plain GET's URL, so the poller has a hit to answer.
  void store_bytes_5() {
    CachedResponse entry;
    entry.head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n";
    entry.body = "hello";
    entry.freshness.response_time = unix_now();
    entry.freshness.lifetime = 3600;
    ASSERT_TRUE(cache_->insert(parse_absolute_uri("http://" + authority() + "/bytes/5")->cache_key(),
                               std::make_shared<const CachedResponse>(std::move(entry))));
  }

  harness::OriginServer origin_;
  OriginPool pool_;
  std::unique_ptr<Cache> cache_ = make_cache("lru", 1 << 20, 1 << 20);
  ProxyOptions options_;
  ProxyStats stats_;
  std::vector<Case> cases_;
};

TEST_F(Admission, ClassifiesEachRequestOnceWithItsRoutePathAndOrigin) {
  for (const Case& c : cases_) {
    SCOPED_TRACE(c.name);
    const ClassifiedRequest verdict = classify(c.head, options_);
    EXPECT_EQ(verdict.route, c.route);
    EXPECT_EQ(verdict.path, c.path);
    if (c.route == Route::refuse) {
      EXPECT_EQ(verdict.error_status, c.worker_status);
    }
    // The key of the origin's concurrency limit: none for a tunnel, /metrics, a bad head, or a
    // request the proxy refuses itself (it never reaches the origin, so it takes no permit).
    const bool to_an_origin = verdict.status == ParseStatus::complete &&
                              c.route != Route::tunnel && c.route != Route::metrics &&
                              c.route != Route::refuse && c.name != "origin-form" &&
                              c.name != "CONNECT without Host";
    EXPECT_EQ(verdict.origin(), to_an_origin ? authority() : "");
  }
  // An incomplete head is judged only once it is whole.
  EXPECT_EQ(classify("GET http://o.test/ HTTP/1.1\r\nHost: o", options_).status,
            ParseStatus::incomplete);
  // Without keep-alive (stages 1-3) nothing is for the poller.
  ProxyOptions closing = options_;
  closing.keep_alive = false;
  for (const Case& c : cases_) {
    EXPECT_EQ(classify(c.head, closing).path, ServingPath::worker) << c.name;
  }
}

// A worker answers every request as its verdict says, whether it parses the head itself (stages
// 1-3, a pipelined request) or goes on from the poller's verdict (add_buffered).
TEST_F(Admission, AWorkerAnswersAsClassifiedWhetherItParsedTheHeadOrWasHandedTheVerdict) {
  for (const Case& c : cases_) {
    for (const bool handed : {false, true}) {
      SCOPED_TRACE(c.name + (handed ? ", the poller's verdict handed over" : ", parsed here"));
      Pair pair = connected_pair();
      pair.server.add_buffered(c.head, handed ? judged(c.head) : std::nullopt);
      (void)serve_request(pair.server, *cache_, options_, stats_);
      EXPECT_EQ(status_of(pair.client), c.worker_status);
    }
  }
  EXPECT_EQ(stats_.requests.load(), 2 * cases_.size()) << "each request counted once";
}

// The poller answers a hit only for what classify put on it, and looks up only what classify let
// it look up; everything else is left, untouched, for a worker.
TEST_F(Admission, ThePollerAnswersAHitOnlyForWhatClassifyPutOnIt) {
  store_bytes_5();
  std::uint64_t lookups = 0;
  for (const Case& c : cases_) {
    SCOPED_TRACE(c.name);
    Pair pair = connected_pair();
    std::string head = c.head;
    std::optional<ClassifiedRequest> front = judged(head);
    const HitOutcome outcome =
        serve_hit_now(pair.server, head, front, *cache_, options_, stats_);
    if (c.path == ServingPath::poller) {
      EXPECT_EQ(outcome, HitOutcome::served);
      EXPECT_EQ(status_of(pair.client), 200);
      EXPECT_EQ(head, "");
      EXPECT_FALSE(front.has_value()) << "the verdict leaves with its request";
    } else {
      EXPECT_EQ(outcome, HitOutcome::not_served);
      EXPECT_EQ(head, c.head);
      EXPECT_TRUE(front.has_value());
      EXPECT_EQ(pair.server.found_stored(), c.path == ServingPath::poller_lookup);
    }
    if (c.route == Route::cache_get && c.path != ServingPath::worker) ++lookups;
    EXPECT_EQ(cache_->stats().hits + cache_->stats().misses, lookups) << "lookups so far";
  }
}

// The poller sends a miss itself only for a plain GET on a persistent connection; the rest keep
// the kept origin connection in the pool and their bytes in the head.
TEST_F(Admission, ThePollerSendsAMissOnlyForAPlainGet) {
  ConnectResult connected = connect_tcp("127.0.0.1", origin_.port(), Millis{5'000});
  ASSERT_EQ(connected.error, ConnectError::none) << connected.message;
  ASSERT_TRUE(pool_.release("127.0.0.1", origin_.port(), std::move(connected.socket)));
  // The plain GET last: it takes the kept connection.
  std::rotate(cases_.begin(), cases_.begin() + 1, cases_.end());
  for (const Case& c : cases_) {
    SCOPED_TRACE(c.name);
    Pair pair = connected_pair();
    std::string head = c.head;
    std::optional<ClassifiedRequest> front = judged(head);
    (void)serve_hit_now(pair.server, head, front, *cache_, options_, stats_);
    if (c.route == Route::metrics) continue;  // answered by serve_hit_now already
    PendingMiss miss = start_miss_now(pair.server, head, front, options_, stats_);
    const bool plain_get = c.route == Route::cache_get && c.path == ServingPath::poller;
    EXPECT_EQ(miss != nullptr, plain_get);
    EXPECT_EQ(head.empty(), plain_get);
    EXPECT_EQ(pool_.idle(), plain_get ? 0u : 1u);
  }
}

}  // namespace
}  // namespace proxy
