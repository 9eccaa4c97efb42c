// The origin's overload laws (harness/downstream.h): first as arithmetic — where each law puts
// the throughput peak, how far it falls — then through real sockets against an OriginServer,
// which must apply the law it says it does.
#include "downstream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/http_message.h"
#include "net/socket.h"
#include "origin_server.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using harness::Overload;
using harness::service_for;

constexpr auto kTimeout = 10s;  // generous: a hang fails the test instead of blocking it

// Throughput of n requests in service under the thrash law, in requests per delay.
double thrash_throughput(int capacity, int n) {
  return n / harness::thrash_slowdown(capacity, n);
}

TEST(Downstream, NamesRoundTrip) {
  for (Overload law : {Overload::queue, Overload::thrash, Overload::fail}) {
    EXPECT_EQ(harness::parse_overload(harness::overload_name(law)), law);
  }
  EXPECT_FALSE(harness::parse_overload("collapse"));
  EXPECT_FALSE(harness::parse_overload(""));
}

TEST(Downstream, QueueKeepsThePlannedDelayWhateverTheLoad) {
  // Waiting for a place is the queue law's whole effect; the origin makes the request wait.
  EXPECT_EQ(service_for(Overload::queue, 4, 4, 20, 0.0).delay_ms, 20u);
  EXPECT_FALSE(service_for(Overload::queue, 4, 4, 20, 0.0).fails);
}

TEST(Downstream, ThrashSlowsAsTheSquareOfTheLoadPastTheCapacity) {
  const double no_slow_request = 0.999;  // above every slow chance the law gives below 4K
  EXPECT_EQ(service_for(Overload::thrash, 32, 1, 20, no_slow_request).delay_ms, 20u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 32, 20, no_slow_request).delay_ms, 20u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 64, 20, no_slow_request).delay_ms, 80u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 48, 20, no_slow_request).delay_ms, 45u);
}

TEST(Downstream, ThrashMakesSomeRequestsSlowAndMoreOfThemNearTheCapacity) {
  // At n = K, 1 in 20 is slow (4x); at K/2, 1 in 320; past K, still 1 in 20.
  EXPECT_EQ(service_for(Overload::thrash, 32, 32, 20, 0.049).delay_ms, 80u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 32, 20, 0.051).delay_ms, 20u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 16, 20, 0.003).delay_ms, 80u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 16, 20, 0.0032).delay_ms, 20u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 64, 20, 0.051).delay_ms, 80u);
  EXPECT_EQ(service_for(Overload::thrash, 32, 64, 20, 0.049).delay_ms, 320u);
}

TEST(Downstream, ThrashThroughputPeaksAtTheCapacityAndHalvesAtTwice) {
  const int capacity = 32;
  int peak = 1;
  for (int n = 1; n <= 4 * capacity; ++n) {
    if (thrash_throughput(capacity, n) > thrash_throughput(capacity, peak)) peak = n;
  }
  EXPECT_EQ(peak, capacity);
  // Past the capacity the fall is K²/n: at 2K half the peak is left, at 4K a quarter.
  EXPECT_NEAR(thrash_throughput(capacity, 2 * capacity) / thrash_throughput(capacity, peak), 0.5,
              1e-9);
  EXPECT_NEAR(thrash_throughput(capacity, 4 * capacity) / thrash_throughput(capacity, peak), 0.25,
              1e-9);
  // The climb: below the capacity, throughput grows with every request in service.
  for (int n = 2; n <= capacity; ++n) {
    EXPECT_GT(thrash_throughput(capacity, n), thrash_throughput(capacity, n - 1)) << n;
  }
}

TEST(Downstream, FailRefusesWhatStartsPastTheCapacity) {
  EXPECT_FALSE(service_for(Overload::fail, 8, 8, 20, 0.5).fails);
  EXPECT_TRUE(service_for(Overload::fail, 8, 9, 20, 0.5).fails);
  EXPECT_EQ(service_for(Overload::fail, 8, 9, 20, 0.5).delay_ms, 2u);  // refused quickly
  EXPECT_EQ(service_for(Overload::fail, 8, 9, 5, 0.5).delay_ms, 1u);
}

TEST(Downstream, NoCapacityMeansNoLaw) {
  for (Overload law : {Overload::queue, Overload::thrash, Overload::fail}) {
    const harness::Service service = service_for(law, 0, 1000, 20, 0.0);
    EXPECT_EQ(service.delay_ms, 20u);
    EXPECT_FALSE(service.fails);
  }
}

// ---- through real sockets ----

proxy::Socket send_get(const harness::OriginServer& origin, const std::string& target) {
  auto connected = proxy::connect_tcp("127.0.0.1", origin.port(), kTimeout);
  EXPECT_EQ(connected.error, proxy::ConnectError::none) << connected.message;
  const std::string request =
      "GET " + target + " HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(connected.socket.write_all(request, kTimeout).status, proxy::IoStatus::ok);
  return std::move(connected.socket);
}

// The status and body of the one response on a connection the origin closes after it.
std::pair<int, std::string> read_answer(const proxy::Socket& socket) {
  std::string bytes;
  std::string buffer(4096, '\0');
  for (;;) {
    auto got = socket.read_some(buffer, kTimeout);
    if (got.status == proxy::IoStatus::eof) break;
    if (got.status != proxy::IoStatus::ok) return {-1, {}};
    bytes.append(buffer.data(), got.bytes);
  }
  proxy::ResponseHead head;
  auto parsed = proxy::parse_response_head(bytes, head);
  if (parsed.status != proxy::ParseStatus::complete) return {-1, {}};
  return {head.status, bytes.substr(parsed.consumed)};
}

nlohmann::json load(const harness::OriginServer& origin, const std::string& query = "") {
  proxy::Socket socket = send_get(origin, "/__load" + query);
  auto [status, body] = read_answer(socket);
  EXPECT_EQ(status, 200) << body;
  return nlohmann::json::parse(body, nullptr, false);
}

TEST(DownstreamOrigin, ThrashServesEveryoneAtOnceButSlowerPastTheCapacity) {
  harness::OriginServer origin({.capacity = 2, .overload = Overload::thrash});
  const auto start = Clock::now();
  std::vector<proxy::Socket> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(send_get(origin, "/delay/100"));
    ASSERT_TRUE(origin.wait_for_requests("/delay/", static_cast<std::uint64_t>(i + 1), kTimeout));
  }
  EXPECT_EQ(load(origin)["in_service"], 4);  // none waits for a place
  for (proxy::Socket& client : clients) EXPECT_EQ(read_answer(client).first, 200);
  // The fourth started with 4 in service: 100 ms x (4/2)^2 at least.
  EXPECT_GE(Clock::now() - start, 400ms);
  EXPECT_EQ(load(origin)["peak_in_service"], 4);
}

TEST(DownstreamOrigin, FailAnswers503PastTheCapacity) {
  harness::OriginServer origin({.capacity = 1, .overload = Overload::fail});
  proxy::Socket first = send_get(origin, "/delay/300");
  ASSERT_TRUE(origin.wait_for_requests("/delay/", 1, kTimeout));
  proxy::Socket second = send_get(origin, "/bytes/10");
  EXPECT_EQ(read_answer(second).first, 503);
  EXPECT_EQ(read_answer(first).first, 200);
}

TEST(DownstreamOrigin, LoadChangesTheLawAtRunTimeAndResetsThePeak) {
  harness::OriginServer origin({.capacity = 1});
  nlohmann::json state = load(origin, "?law=fail&capacity=0");
  EXPECT_EQ(state["law"], "fail");
  EXPECT_EQ(state["capacity"], 0);
  {
    proxy::Socket a = send_get(origin, "/delay/200");
    proxy::Socket b = send_get(origin, "/delay/200");
    EXPECT_EQ(read_answer(a).first, 200);  // capacity 0: no law, nobody fails
    EXPECT_EQ(read_answer(b).first, 200);
  }
  EXPECT_EQ(load(origin, "?reset_peak=1")["peak_in_service"], 2);
  EXPECT_EQ(load(origin)["peak_in_service"], 0);
  proxy::Socket bad = send_get(origin, "/__load?law=collapse");
  EXPECT_EQ(read_answer(bad).first, 400);
}

TEST(DownstreamOrigin, RaisingTheCapacityLetsQueuedRequestsIn) {
  harness::OriginServer origin({.capacity = 1});
  proxy::Socket holder = send_get(origin, "/stall");
  ASSERT_TRUE(origin.wait_for_requests("/stall", 1, kTimeout));
  proxy::Socket waiter = send_get(origin, "/bytes/3");
  ASSERT_TRUE(origin.wait_for_requests("/bytes/", 1, kTimeout));
  EXPECT_EQ(load(origin)["waiting"], 1);
  load(origin, "?capacity=2");
  EXPECT_EQ(read_answer(waiter).first, 200);
}

}  // namespace
