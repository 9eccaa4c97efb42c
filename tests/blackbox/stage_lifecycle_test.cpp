// Black-box tests run against every stage binary: CS:APP Proxy Lab's concurrency check (a
// request stalled at the origin and a second one beside it), start-up refusals, and shutdown
// (SIGTERM alone, with a request in flight, in the middle of a mixed load). The rest of
// StageTest: stage_test.cpp, stage_cache_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

// CS:APP Proxy Lab's concurrency check: a request stalled at the origin must not block another.
// Stage 1 is sequential, so there the second request waits: that is the lesson, not a bug.
TEST_P(StageTest, StalledRequestAndAConcurrentOne) {
  start_stage({"--origin-timeout-ms", "2000"});
  proxy::Socket stalled = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  // Wait until the origin holds the stalled request, so the proxy is surely busy with it.
  ASSERT_TRUE(wait_for_origin("/stall", 1, 10s));

  proxy::Socket second = send_request(proxy_port(), proxy_get(origin_url("/bytes/10")));
  if (sequential()) {
    // The second request is served only after the stalled one has timed out with 504. Read the
    // origin's count first, then look at the stalled client: if the second request had reached
    // the origin, the stalled one must already have had its answer. (Checking the count after
    // reading the 504 would race the proxy, which moves on to the second client at once.)
    const auto second_at_origin = origin_->request_count("/bytes/10");
    pollfd answered{stalled.fd(), POLLIN, 0};
    if (second_at_origin > 0) {
      EXPECT_EQ(::poll(&answered, 1, 0), 1)
          << "a sequential proxy cannot reach the second request while the first is in flight";
    }
    auto stalled_response = read_response(stalled, 20s);
    ASSERT_TRUE(stalled_response.has_value());
    EXPECT_EQ(stalled_response->status, 504);
    auto second_response = read_response(second, 20s);
    ASSERT_TRUE(second_response.has_value());
    EXPECT_EQ(second_response->status, 200);
  } else {
    auto second_response = read_response(second, 20s);
    ASSERT_TRUE(second_response.has_value());
    EXPECT_EQ(second_response->status, 200);
    EXPECT_EQ(origin_->request_count("/stall"), 1u);
    pollfd p{stalled.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "the stalled request must still be in flight";
  }
}

TEST_P(StageTest, StopsOnSigtermWithAStatsLine) {
  start_stage();
  fetch(proxy_port(), origin_url("/bytes/10"));
  fetch(proxy_port(), origin_url("/bytes/10"));
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean()) << "exit " << status.exit_code << " signal " << status.signal;
  EXPECT_FALSE(status.killed);
  EXPECT_LT(status.elapsed, 5s);
  EXPECT_THAT(status.output, HasSubstr("stats: requests=2 hits=1 misses=1 evictions=0"));
}

TEST_P(StageTest, StopsWithin5SecondsWithARequestInFlight) {
  start_stage();
  proxy::Socket stalled = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  ASSERT_TRUE(wait_for_origin("/stall", 1, 10s));
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean());
  EXPECT_LT(status.elapsed, 5s);
}

TEST_P(StageTest, RefusesNegativeByteLimitsAtStartUp) {
  // CLI11 would read -1 into a size_t as 2^64 - 1, an unbounded cache: refuse it instead.
  EXPECT_THROW(start_stage({"--cache-bytes", "-1"}), std::runtime_error);
  EXPECT_THROW(start_stage({"--max-object-bytes", "-5"}), std::runtime_error);
  stage_.reset();
}

// Hits, misses and evictions from several clients at once, then SIGTERM in the middle of it.
// Under `make tsan` the stage is the TSan build, and TearDown fails the test on any report.
TEST_P(StageTest, StopsCleanlyInTheMiddleOfAMixedHitMissLoad) {
  start_stage({"--cache-bytes", "20000", "--max-object-bytes", "5000"});
  std::mutex mutex;
  std::condition_variable progressed;
  int completed = 0;  // guarded by mutex
  {
    std::vector<std::jthread> clients;
    for (int c = 0; c < 6; ++c) {
      clients.emplace_back([&, c](std::stop_token stop) {
        for (int i = 0; !stop.stop_requested(); ++i) {
          // Ten hot keys that evict one another (4 fit), and a unique miss now and then.
          std::string path = i % 5 == 4 ? "/delay/5/bytes/300?u=" + std::to_string(c * 100000 + i)
                                        : "/bytes/4000?k=" + std::to_string((c + i) % 10);
          bool ok = false;
          try {
            ok = fetch(proxy_port(), origin_url(path), 10s).status == 200;
          } catch (const std::exception&) {
            // Refused or cut: the stop has begun, or the stage has died (the wait below sees it).
          }
          std::lock_guard lock(mutex);
          if (ok) ++completed;
          progressed.notify_all();
        }
      });
    }
    std::unique_lock lock(mutex);
    // Ends early when the stage has exited (a starter's stub throwing in a worker): no point
    // waiting the full deadline for a process that is gone.
    progressed.wait_for(lock, 60s, [&] { return completed >= 150 || !stage_->running(); });
    ASSERT_GE(completed, 150) << "only " << completed << " requests completed"
                              << (stage_->running() ? "" : "; the stage exited under load");
    lock.unlock();
    harness::ExitStatus status = stage_->stop(10s);
    EXPECT_TRUE(status.clean()) << "exit " << status.exit_code << " signal " << status.signal;
    EXPECT_LT(status.elapsed, 5s);
    EXPECT_THAT(status.output, HasSubstr("stats: requests="));
    EXPECT_THAT(status.output, Not(HasSubstr("evictions=0 "))) << "the load should evict";
  }  // clients stop and join here
}

}  // namespace
}  // namespace testing_support
