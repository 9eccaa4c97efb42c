// Stage 4's `--workers auto` pieces: PoolSizer's decisions (pure arithmetic, Little's law and a
// hill climb) and ElasticPool's resizing with real threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "elastic_pool.h"
#include "pool_sizer.h"
#include "../test_support.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;

// One second in which `busy` workers were busy on average serving `rate` requests/s.
PoolSample second_of(double rate, double busy, std::size_t queued = 0) {
  PoolSample s;
  s.seconds = 1;
  s.completed = static_cast<std::uint64_t>(rate);
  s.busy_seconds = busy;
  s.queued = queued;
  return s;
}

TEST(PoolSizer, GrowsWhileEveryWorkerIsBusyAndThroughputKeepsRising) {
  PoolSizer sizer({2, 40}, 2);
  std::size_t size = 2;
  // An I/O-bound load: each request takes 20 ms whatever the pool size, so throughput is
  // size / 20 ms and every worker is busy (L = λ·W = size).
  for (int step = 0; step < 30; ++step) {
    const double rate = static_cast<double>(size) / 0.020;
    size = sizer.next(size, second_of(rate, static_cast<double>(size)));
    ASSERT_LE(size, 40u);
  }
  EXPECT_EQ(size, 40u) << "throughput rose with every step, so the pool should reach its max";
}

TEST(PoolSizer, StepsBackWhenMoreWorkersBringLatencyButNoThroughput) {
  PoolSizer sizer({2, 64}, 8);
  // Pressure at 8 workers: grows.
  std::size_t size = sizer.next(8, second_of(4000, 8, 5));
  ASSERT_GT(size, 8u);
  // The bigger pool served the same 4000/s, each request now slower: a CPU-bound plateau.
  // Mean latency (busy seconds / completed) rose from 2 ms to 3 ms; throughput did not.
  std::size_t after = sizer.next(size, second_of(4000, 12, 5));
  EXPECT_EQ(after, 8u) << "the step bought latency, not throughput: undo it";
  // And it holds there under the same pressure instead of probing again at once.
  EXPECT_EQ(sizer.next(after, second_of(4000, 8, 5)), 8u);
}

TEST(PoolSizer, ShrinksTowardLittlesLawDemandButNeverBelowItsMinimum) {
  PoolSizer sizer({3, 64}, 32);
  std::size_t size = 32;
  // 100 requests/s at 10 ms each: L = 1 busy worker on average.
  for (int step = 0; step < 40; ++step) size = sizer.next(size, second_of(100, 1.0));
  EXPECT_EQ(size, 3u);
  EXPECT_NEAR(sizer.demand(), 1.0, 1e-9);
  // Idle: stays at the minimum.
  EXPECT_EQ(sizer.next(size, second_of(0, 0)), 3u);
}

TEST(PoolSizer, ClampsItsStartAndIgnoresAnEmptyInterval) {
  PoolSizer sizer({4, 8}, 100);
  EXPECT_EQ(sizer.size(), 8u);
  EXPECT_EQ(sizer.next(8, PoolSample{}), 8u);
  PoolSizer low({0, 0}, 0);
  EXPECT_EQ(low.size(), 1u) << "min 0 counts as 1, and max is at least min";
}

// Waits for `condition` with a generous deadline; the pool's threads change state on their own.
bool eventually(const std::function<bool()>& condition) {
  return test_support::eventually(condition, 20s, 1ms);
}

TEST(ElasticPool, GrowsAndShrinksWhileServingAndLosesNoItem) {
  std::atomic<int> served{0};
  ElasticPool<int> pool(2, 64, [&](int) { served.fetch_add(1); });
  EXPECT_EQ(pool.worker_count(), 2u);
  pool.resize(6);
  EXPECT_EQ(pool.worker_count(), 6u);
  for (int i = 0; i < 50; ++i) {
    int item = i;
    while (!pool.try_submit(std::move(item))) std::this_thread::yield();
  }
  pool.resize(1);
  // Idle surplus workers are nudged awake and retire; none is cut mid-item.
  EXPECT_TRUE(eventually([&] { return pool.worker_count() == 1; }))
      << pool.worker_count() << " workers left";
  EXPECT_TRUE(eventually([&] { return served.load() == 50; }));
  pool.resize(3);
  EXPECT_EQ(pool.worker_count(), 3u);
  pool.shutdown();
  EXPECT_EQ(served.load(), 50);
}

TEST(ElasticPool, RefusesWhenTheQueueIsFullAndHandsBackQueuedItemsOnClose) {
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;  // guarded by mutex
  std::atomic<int> started{0};
  ElasticPool<int> pool(1, 2, [&](int) {
    started.fetch_add(1);
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return release; });
  });
  int first = 1;
  ASSERT_TRUE(pool.try_submit(std::move(first)));
  ASSERT_TRUE(eventually([&] { return started.load() == 1; }));
  int a = 2, b = 3, c = 4;
  EXPECT_TRUE(pool.try_submit(std::move(a)));
  EXPECT_TRUE(pool.try_submit(std::move(b)));
  EXPECT_FALSE(pool.try_submit(std::move(c))) << "a full queue refuses: load shedding";
  EXPECT_EQ(c, 4) << "a refused item is left to the caller";
  std::deque<int> left = pool.close();
  EXPECT_EQ(left, (std::deque<int>{2, 3}));
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  cv.notify_all();
  pool.shutdown();
}

}  // namespace
}  // namespace proxy
