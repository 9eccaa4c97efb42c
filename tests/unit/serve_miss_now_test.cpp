// start_miss_now and what follows it (common/transaction/proxy.h): stage 4's poller sends a plain
// miss on a kept origin connection and relays an answer that arrived whole, or hands the miss to a
// worker (finish_miss). Through real loopback sockets and the scripted origin.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "cache/cache_factory.h"
#include "http/uri.h"
#include "launcher.h"
#include "loopback_pair.h"
#include "origin_server.h"
#include "poller/origin_pool.h"
#include "transaction/proxy.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;
using namespace loopback;

class ServeMissNow : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.keep_alive = true;
    options_.origin_pool = &pool_;
  }

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(origin_.port()) + path;
  }
  static std::string get(const std::string& url, const std::string& extra = "") {
    return "GET " + url + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
  }
  // One idle connection to the origin in the pool, as a worker leaves it after a response.
  void keep_one() {
    ConnectResult connected = connect_tcp("127.0.0.1", origin_.port(), Millis{5'000});
    ASSERT_EQ(connected.error, ConnectError::none) << connected.message;
    ASSERT_TRUE(pool_.release("127.0.0.1", origin_.port(), std::move(connected.socket)));
  }
  // What the poller does with a whole head: classify it once (admission.h), serve_hit_now,
  // then start_miss_now, both with that verdict (front_, left set when no miss started).
  HitOutcome hit_now(Pair& pair, std::string& head) {
    ClassifiedRequest judged = classify(head, options_);
    front_.reset();
    if (judged.status != ParseStatus::incomplete) front_ = std::move(judged);
    return serve_hit_now(pair.server, head, front_, *cache_, options_, stats_);
  }
  PendingMiss start(Pair& pair, std::string& head) {
    EXPECT_EQ(hit_now(pair, head), HitOutcome::not_served);
    return start_miss_now(pair.server, head, front_, options_, stats_);
  }
  // Waits in poll(2) as the poller waits in epoll, reading each time, until a verdict.
  MissRead wait(MissInFlight& miss) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < until) {
      pollfd readable{origin_fd(miss), POLLIN, 0};
      ::poll(&readable, 1, 1000);
      bool progressed = false;
      const MissRead read = read_miss_now(miss, progressed);
      if (read != MissRead::waiting && read != MissRead::arriving) return read;
    }
    return MissRead::waiting;
  }

  harness::OriginServer origin_;
  OriginPool pool_;
  std::unique_ptr<Cache> cache_ = make_cache("lru", 1 << 20, 1 << 20);
  ProxyOptions options_;
  ProxyStats stats_;
  std::optional<ClassifiedRequest> front_;
};

TEST_F(ServeMissNow, SendsAPlainMissOnAKeptConnectionAndRelaysItsWholeAnswer) {
  keep_one();
  Pair pair = connected_pair();
  std::string head = get(url("/bytes/300")) + "GET " + url("/bytes/7");
  PendingMiss miss = start(pair, head);
  ASSERT_NE(miss, nullptr);
  EXPECT_EQ(head, "GET " + url("/bytes/7")) << "only the sent request's bytes go";
  EXPECT_EQ(pool_.idle(), 0u) << "the kept connection is the miss's now";
  EXPECT_EQ(stats_.requests.load(), 1u);
  EXPECT_EQ(pair.server.requests(), 1u);
  ASSERT_EQ(wait(*miss), MissRead::whole);
  EXPECT_EQ(complete_miss_now(pair.server, std::move(miss), *cache_, options_, stats_),
            HitOutcome::served);
  EXPECT_FALSE(pair.server.has_unsent());
  const std::string body = harness::deterministic_bytes(300);
  const std::string received = read_response_text(pair.client);
  EXPECT_TRUE(received.starts_with("HTTP/1.1 200 OK\r\n")) << received;
  EXPECT_NE(received.find("X-Cache: MISS\r\n"), std::string::npos) << received;
  EXPECT_NE(received.find("Content-Length: 300\r\n"), std::string::npos) << received;
  EXPECT_TRUE(received.ends_with("\r\n\r\n" + body)) << "byte-exact, nothing after it";
  EXPECT_NE(cache_->find(parse_absolute_uri(url("/bytes/300"))->cache_key()), nullptr)
      << "a whole cacheable answer is stored";
  EXPECT_EQ(cache_->stats().misses, 1u) << "one lookup for one request";
  EXPECT_EQ(pool_.idle(), 1u) << "the connection went back to the pool";
  EXPECT_EQ(origin_.connections_accepted(), 1u);
  EXPECT_EQ(stats_.origin_connects.load(), 0u);
}

// Each of these is a worker's: no kept connection (a connect may block), a stale entry to
// revalidate, only-if-cached, a connection the client closes, a HEAD. Nothing is sent, the head
// and the counters stay as they were, and serve_request then serves it from the same lookup.
// The origin's own latency, from the kernel's receive stamp of its first byte: the time the
// answer then waits for the poller is not the origin's, and stage 4's limit must not read it as
// the origin queueing.
TEST_F(ServeMissNow, TimesTheOriginByTheKernelsReceiveStampNotByWhenItWasRead) {
  // qemu-user (make cross-check) does not pass SO_TIMESTAMPNS stamps on; stage 4 then times a
  // poller miss as a worker's, by the clock (docs/raspberry-pi.md). A Pi's own kernel does.
  if (!harness::emulator_for("/proc/self/exe").empty()) {
    GTEST_SKIP() << "under an emulator: no kernel receive stamps to read";
  }
  keep_one();
  Pair pair = connected_pair();
  std::string head = get(url("/delay/50/bytes/10"));
  PendingMiss miss = start(pair, head);
  ASSERT_NE(miss, nullptr);
  EXPECT_FALSE(origin_latency(*miss).has_value()) << "no byte has come yet";
  // The answer arrives while nobody reads it: the poller is busy elsewhere for 300 ms.
  pollfd readable{origin_fd(*miss), POLLIN, 0};
  ASSERT_EQ(::poll(&readable, 1, 30'000), 1);
  std::this_thread::sleep_for(300ms);  // the stamp must not see this wait
  ASSERT_EQ(wait(*miss), MissRead::whole);
  const std::optional<std::chrono::nanoseconds> took = origin_latency(*miss);
  ASSERT_TRUE(took.has_value()) << "SO_TIMESTAMPNS gave no stamp";
  EXPECT_GE(*took, 45ms);   // the origin's 50 ms (its timer may fire a little early)
  EXPECT_LT(*took, 300ms);  // and not the 300 ms the answer then waited to be read
}

TEST_F(ServeMissNow, LeavesEveryOtherRequestAsItWas) {
  {
    Pair pair = connected_pair();
    std::string head = get(url("/bytes/5"));
    EXPECT_EQ(start(pair, head), nullptr) << "no kept connection";
    EXPECT_EQ(head, get(url("/bytes/5")));
    EXPECT_EQ(stats_.requests.load(), 0u);
    pair.server.add_buffered(head);
    EXPECT_TRUE(serve_request(pair.server, *cache_, options_, stats_));
    EXPECT_EQ(cache_->stats().misses, 1u) << "serve_request looked the request up again";
    EXPECT_TRUE(read_response_text(pair.client).starts_with("HTTP/1.1 200 OK"));
  }
  keep_one();
  const std::size_t kept = pool_.idle();
  for (const std::string& request :
       {get(url("/bytes/6"), "Cache-Control: only-if-cached\r\n"),
        get(url("/bytes/6"), "Connection: close\r\n"),
        "HEAD " + url("/bytes/6") + " HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST " + url("/echo") + " HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"}) {
    Pair pair = connected_pair();
    std::string head = request;
    (void)hit_now(pair, head);
    EXPECT_EQ(start_miss_now(pair.server, head, front_, options_, stats_), nullptr) << request;
    EXPECT_EQ(head, request);
    EXPECT_EQ(pool_.idle(), kept) << request;
  }
  EXPECT_EQ(origin_.request_count("/bytes/6"), 0u);
  EXPECT_EQ(origin_.request_count("/echo"), 0u);
}

// An answer the poller does not finish goes to a worker with what has arrived, and the worker's
// relay is byte-exact: a chunked body past what the poller holds, one ended by the origin's
// close.
TEST_F(ServeMissNow, HandsAnAnswerItCannotFinishToFinishMissByteExact) {
  for (const auto& [path, size] : {std::pair<std::string, std::size_t>{"/stream-bytes/300000", 300'000},
                                   {"/close/1000", 1000}}) {
    keep_one();
    Pair pair = connected_pair();
    std::string head = get(url(path));
    PendingMiss miss = start(pair, head);
    ASSERT_NE(miss, nullptr) << path;
    ASSERT_EQ(wait(*miss), MissRead::needs_worker) << path;
    const bool open = finish_miss(pair.server, std::move(miss), *cache_, options_, stats_,
                                  options_.origin_timeout);
    if (open) pair.server = ClientConnection(Socket());  // the close ends the read below
    const std::string received = read_to_close(pair.client);
    const std::size_t blank = received.find("\r\n\r\n");
    ASSERT_NE(blank, std::string::npos) << path;
    std::string body = received.substr(blank + 4);
    if (received.find("Transfer-Encoding: chunked\r\n") < blank) {
      // De-chunk: size lines and CRLFs around each piece.
      std::string decoded;
      std::size_t at = 0;
      for (;;) {
        const std::size_t line_end = body.find("\r\n", at);
        ASSERT_NE(line_end, std::string::npos);
        const std::size_t n = std::stoul(body.substr(at, line_end - at), nullptr, 16);
        if (n == 0) break;
        decoded += body.substr(line_end + 2, n);
        at = line_end + 2 + n + 2;
      }
      body = decoded;
    }
    EXPECT_EQ(body, harness::deterministic_bytes(size)) << path;
  }
}

// The poller waited the origin timeout for a byte in vain: finish_miss answers 504, and says so
// as a worker's own read would have.
TEST_F(ServeMissNow, AnswersAMissThePollerTimedOut504) {
  options_.origin_timeout = Millis{250};
  keep_one();
  Pair pair = connected_pair();
  std::string head = get(url("/stall"));
  PendingMiss miss = start(pair, head);
  ASSERT_NE(miss, nullptr);
  ASSERT_TRUE(origin_.wait_for_requests("/stall", 1, 10s));
  EXPECT_FALSE(finish_miss(pair.server, std::move(miss), *cache_, options_, stats_, Millis{0}));
  const std::string received = read_to_close(pair.client);
  EXPECT_TRUE(received.starts_with("HTTP/1.1 504 ")) << received;
  EXPECT_NE(received.find("origin did not answer within 250 ms"), std::string::npos) << received;
  EXPECT_EQ(pool_.idle(), 0u) << "a connection with a request unanswered is never kept";
}

// The origin timeout runs from the origin's last byte wherever the miss waited: an answer that
// arrived while the miss changed hands is relayed even with no time left, and a silent origin
// is waited for only as long as is left, not a whole timeout again.
TEST_F(ServeMissNow, FinishMissTakesWhatArrivedAndWaitsOnlyWhatIsLeft) {
  keep_one();
  {
    Pair pair = connected_pair();
    std::string head = get(url("/bytes/40"));
    PendingMiss miss = start(pair, head);
    ASSERT_NE(miss, nullptr);
    pollfd readable{origin_fd(*miss), POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10'000), 1) << "the origin answered into the socket, unread";
    EXPECT_TRUE(finish_miss(pair.server, std::move(miss), *cache_, options_, stats_, Millis{0}));
    const std::string received = read_response_text(pair.client);
    EXPECT_TRUE(received.starts_with("HTTP/1.1 200 OK\r\n")) << received;
    EXPECT_TRUE(received.ends_with("\r\n\r\n" + harness::deterministic_bytes(40)));
  }
  options_.origin_timeout = Millis{60'000};
  Pair pair = connected_pair();
  std::string head = get(url("/stall"));
  PendingMiss miss = start(pair, head);
  ASSERT_NE(miss, nullptr);
  const auto began = std::chrono::steady_clock::now();
  EXPECT_FALSE(finish_miss(pair.server, std::move(miss), *cache_, options_, stats_, Millis{200}));
  // A liveness bound, far from both sides: 200 ms left against a 60 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - began, 30s) << "waited a whole timeout again";
  const std::string received = read_to_close(pair.client);
  EXPECT_TRUE(received.starts_with("HTTP/1.1 504 ")) << received;
}

}  // namespace
}  // namespace proxy
