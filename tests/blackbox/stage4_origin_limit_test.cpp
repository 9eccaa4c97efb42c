// Stage 4, black-box: the concurrency limit toward each origin (stage4-tuned/origin_gates.h).
// What the origin counts is the proof: the scripted origin reports the most requests it ever
// had in service at once (/__load), so a limit that leaks shows there, whatever the proxy's own
// /metrics say. The fixture is in tuned_stage.h; the suite is instantiated in
// stage4_tuned_test.cpp.
#include <nlohmann/json.hpp>

#include "tuned_stage.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;

constexpr auto kLive = 5s;  // what a request that must not wait may take, on a loaded machine

int peak_in_service(harness::OriginServer& origin) {
  return nlohmann::json::parse(origin.load_json())["peak_in_service"].get<int>();
}

std::string gauge(const std::string& name, const harness::OriginServer& origin) {
  return name + "{origin=\"127.0.0.1:" + std::to_string(origin.port()) + "\"}";
}

// A burst of 24 misses on 24 connections: with --origin-limit 4, the origin never has more than
// 4 in service, and every one of the 24 is answered in the end, byte-exact.
TEST_P(TunedStage, OriginLimitBoundsTheRequestsInFlightToOneOriginUnderABurst) {
  start_stage({"--origin-limit", "4"});
  std::vector<proxy::Socket> clients;
  for (int i = 0; i < 24; ++i) {
    clients.push_back(send_request(
        proxy_port(), proxy_get(origin_url("/delay/100/bytes/300?n=" + std::to_string(i)))));
  }
  for (proxy::Socket& client : clients) {
    std::optional<HttpResponse> answer = read_response(client, kDeadline);
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->status, 200);
    EXPECT_EQ(answer->body, harness::deterministic_bytes(300));
  }
  EXPECT_EQ(origin_->request_count("/delay/"), 24u);
  EXPECT_LE(peak_in_service(*origin_), 4) << "more requests in flight than --origin-limit";
  EXPECT_GE(peak_in_service(*origin_), 2) << "the burst never overlapped: the test proves nothing";
}

// The default, auto, bounds a burst too: a silent origin answers nothing, so its limit has no
// latency to grow on, and fifty stuck requests leave all but the limit waiting on the poller.
TEST_P(TunedStage, OriginLimitAutoHoldsStuckRequestsOnThePollerNotAtTheOrigin) {
  start_stage({"--origin-timeout-ms", "60000"});
  std::vector<proxy::Socket> stuck;
  for (int i = 0; i < 50; ++i) {
    stuck.push_back(
        send_request(proxy_port(), proxy_get(origin_url("/stall?" + std::to_string(i)))));
  }
  ASSERT_TRUE(metrics_until(
      [&](const Exposition& m) { return m[gauge("proxy_origin_waiting", *origin_)] >= 1; },
      [](const Exposition&) {}, kDeadline))
      << "no request waited for the origin's limit";
  const Exposition m = metrics();
  const double limit = m[gauge("proxy_origin_limit", *origin_)];
  EXPECT_LT(limit, 50);
  EXPECT_EQ(
      m[gauge("proxy_origin_in_flight", *origin_)] + m[gauge("proxy_origin_waiting", *origin_)],
      50);
  EXPECT_LE(peak_in_service(*origin_), static_cast<int>(limit));
}

// Hits never wait for an origin's limit: with the only permit held by a silent request and a
// miss waiting behind it, a hit on the same origin is answered at once.
TEST_P(TunedStage, AnswersAHitWhileItsOriginsLimitIsFull) {
  start_stage({"--origin-limit", "1", "--origin-timeout-ms", "60000"});
  ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/100?hit")).status, 200);
  proxy::Socket holder = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
  proxy::Socket waiter = send_request(proxy_port(), proxy_get(origin_url("/bytes/7?miss")));
  ASSERT_TRUE(wait_for_metric(gauge("proxy_origin_waiting", *origin_), 1));
  proxy::Socket hit =
      send_request(proxy_port(), proxy_get(origin_url("/bytes/100?hit"), {"Connection: close"}));
  std::optional<HttpResponse> answer = read_response(hit, kLive);
  ASSERT_TRUE(answer.has_value()) << "a hit waited for its origin's limit";
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->field("X-Cache"), "HIT");
  EXPECT_EQ(origin_->request_count("/bytes/7"), 0u) << "the miss went past the limit";
}

// The same on a worker: with no kept origin connection the miss goes to a worker, which drops
// the request when its client hangs up but hands the origin connection to the poller, and the
// permit with it, until the origin answers. Without that, every impatient client would let one
// more request in, and a thrashing origin would fill with work nobody waits for.
TEST_P(TunedStage, AWorkersClientThatHangsUpKeepsItsPermitUntilTheOriginAnswers) {
  start_stage({"--origin-limit", "1", "--origin-timeout-ms", "60000"});
  for (const std::string method : {"GET", "HEAD"}) {
    ASSERT_EQ(nlohmann::json::parse(origin_->load_json(true))["in_service"].get<int>(), 0);
    {
      proxy::Socket holder = send_request(
          proxy_port(), method + " " + origin_url("/delay/1500/bytes/10?held-" + method) +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
      ASSERT_TRUE(wait_until(
          [&] { return nlohmann::json::parse(origin_->load_json())["in_service"] == 1; },
          kDeadline));
    }  // hangs up while the origin serves it
    proxy::Socket waiter =
        send_request(proxy_port(), proxy_get(origin_url("/bytes/7?after-" + method)));
    std::optional<HttpResponse> answer = read_response(waiter, kDeadline);
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->status, 200);
    EXPECT_EQ(peak_in_service(*origin_), 1)
        << method << ": a worker gave the permit back at the hang-up while the origin still "
        << "served its request";
    // Until the next round starts from nothing in service.
    ASSERT_TRUE(wait_until(
        [&] { return nlohmann::json::parse(origin_->load_json())["in_service"] == 0; },
        kDeadline));
  }
}

// A client that hangs up does not end its request at the origin, which goes on serving it: the
// permit stays taken until the origin has answered, so the request waiting behind it reaches
// the origin only then — never two in service at once under --origin-limit 1.
TEST_P(TunedStage, AClientThatHangsUpKeepsItsPermitUntilTheOriginAnswers) {
  start_stage({"--origin-limit", "1", "--origin-timeout-ms", "60000"});
  // A kept origin connection, so the next miss is the poller's (TunedServer::start_miss).
  ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/10?warm")).status, 200);
  ASSERT_TRUE(wait_for_metric("proxy_origin_connections_idle", 1));
  {
    proxy::Socket holder =
        send_request(proxy_port(), proxy_get(origin_url("/delay/1500/bytes/10?held")));
    ASSERT_TRUE(origin_->wait_for_requests("/delay/", 1, kDeadline));
    ASSERT_TRUE(wait_for_metric("proxy_poller_misses_waiting", 1));
  }  // hangs up while the origin serves it
  proxy::Socket waiter = send_request(proxy_port(), proxy_get(origin_url("/bytes/7?after")));
  std::optional<HttpResponse> answer = read_response(waiter, kDeadline);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, harness::deterministic_bytes(7));
  EXPECT_EQ(peak_in_service(*origin_), 1)
      << "a hang-up gave its permit back while the origin still served its request";
  EXPECT_THAT(stage_log(), testing::HasSubstr("its origin's permit held until then"));
}

// A request the proxy refuses itself (two Host fields, RFC 9112 §3.2) never reaches its origin,
// so it takes no permit: its 400 comes at once though the origin's only permit is held.
TEST_P(TunedStage, ARefusedRequestDoesNotWaitForItsOriginsLimit) {
  start_stage({"--origin-limit", "1", "--origin-timeout-ms", "60000"});
  proxy::Socket holder = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
  proxy::Socket refused = send_request(
      proxy_port(), "GET " + origin_url("/bytes/5") +
                        " HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: example.org\r\n\r\n");
  std::optional<HttpResponse> answer = read_response(refused, kLive);
  ASSERT_TRUE(answer.has_value()) << "a request refused with 400 waited for its origin's limit";
  EXPECT_EQ(answer->status, 400);
  EXPECT_EQ(origin_->request_count("/bytes/5"), 0u);
}

// Each origin has its own limit: one full of silent requests, with more waiting for it, takes
// nothing from another.
TEST_P(TunedStage, ASlowOriginsFullLimitDoesNotStarveAFastOrigin) {
  start_stage({"--origin-limit", "2", "--origin-timeout-ms", "60000"});
  harness::OriginServer fast;
  std::vector<proxy::Socket> stuck;
  for (int i = 0; i < 6; ++i) {
    stuck.push_back(
        send_request(proxy_port(), proxy_get(origin_url("/stall?" + std::to_string(i)))));
  }
  ASSERT_TRUE(wait_for_metric(gauge("proxy_origin_waiting", *origin_), 4));
  for (int i = 0; i < 5; ++i) {
    proxy::Socket client =
        send_request(proxy_port(), proxy_get("http://127.0.0.1:" + std::to_string(fast.port()) +
                                                 "/bytes/50?n=" + std::to_string(i),
                                             {"Connection: close"}));
    std::optional<HttpResponse> answer = read_response(client, kLive);
    ASSERT_TRUE(answer.has_value()) << "a fast origin's request waited behind a slow origin's";
    EXPECT_EQ(answer->status, 200);
  }
  EXPECT_EQ(origin_->request_count("/stall"), 2u);
}

// A queue for an origin that stands past --origin-queue-ms for --shed-interval-ms sheds that
// origin's newcomers with 503 — by queueing delay, not by length — and stops once it drains.
TEST_P(TunedStage, ShedsAnOriginsStandingQueueAndStopsOnceItDrains) {
  start_stage({"--origin-limit", "1", "--origin-queue-ms", "50", "--shed-interval-ms", "100",
               "--origin-timeout-ms", "60000"});
  proxy::Socket holder = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
  proxy::Socket waiter = send_request(proxy_port(), proxy_get(origin_url("/bytes/5?w")));
  ASSERT_TRUE(wait_for_metric(gauge("proxy_origin_waiting", *origin_), 1));
  // One waiter only, so length is no reason: once it has waited past 50 ms for 100 ms (the
  // poller judges every 50 ms tick), a newcomer is told 503 at once.
  ASSERT_TRUE(wait_for_metric(gauge("proxy_origin_queue_delay_seconds", *origin_), 0.25));
  proxy::Socket newcomer =
      send_request(proxy_port(), proxy_get(origin_url("/bytes/6?n"), {"Connection: close"}));
  std::optional<HttpResponse> shed = read_response(newcomer, kLive);
  ASSERT_TRUE(shed.has_value()) << "a newcomer waited behind an origin's standing queue";
  EXPECT_EQ(shed->status, 503);
  EXPECT_EQ(shed->field("Retry-After"), "1");
  EXPECT_EQ(origin_->request_count("/bytes/6"), 0u);
  // The silent request ends (its client hangs up, and the origin gives up on it): the waiter,
  // late while the queue stood, is shed too, and the drained queue stops shedding.
  holder = proxy::Socket();
  origin_->end_stalled();
  std::optional<HttpResponse> late = read_response(waiter, kDeadline);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->status, 503);
  ASSERT_TRUE(wait_until(
      [&] {
        HttpResponse after = fetch(proxy_port(), origin_url("/bytes/8?after"), kLive);
        return after.status == 200;
      },
      kDeadline))
      << "the origin's queue had drained, but its newcomers were still shed";
}

// --origin-limit off is the proxy without the lesson: every miss goes to the origin at once.
TEST_P(TunedStage, OriginLimitOffSendsEveryMissAtOnce) {
  start_stage({"--origin-limit", "off", "--origin-timeout-ms", "60000"});
  std::vector<proxy::Socket> stuck;
  for (int i = 0; i < 30; ++i) {
    stuck.push_back(
        send_request(proxy_port(), proxy_get(origin_url("/stall?" + std::to_string(i)))));
  }
  EXPECT_TRUE(origin_->wait_for_requests("/stall", 30, kDeadline));
}

}  // namespace
}  // namespace testing_support
