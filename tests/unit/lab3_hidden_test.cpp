// Lab 3's hidden tests (labs/manifest.json): run by the grader (make grade LAB=3), never shipped
// in a handout. Competing consumers, a close with waiters on both ends, items moved by value.
// Every wait here has a deadline, so a lost wakeup fails instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "bounded_queue.h"
#include "worker_pool.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;

TEST(Lab3HiddenQueue, ThreeConsumersShareItemsExactlyOnceThenAllSeeTheClose) {
  BoundedQueue<int> queue(2);
  std::atomic<long> sum{0};
  std::atomic<int> taken{0};
  std::vector<std::future<void>> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.push_back(std::async(std::launch::async, [&] {
      while (std::optional<int> item = queue.pop()) {
        sum += *item;
        ++taken;
      }
    }));
  }
  for (int i = 1; i <= 300; ++i) ASSERT_TRUE(queue.push(int{i}));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (taken.load() < 300 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(taken.load(), 300) << "items queued but never popped: a lost wakeup?";
  EXPECT_TRUE(queue.close().empty());
  for (auto& c : consumers) {
    ASSERT_EQ(c.wait_for(10s), std::future_status::ready) << "a consumer slept through close()";
  }
  EXPECT_EQ(sum.load(), 300L * 301 / 2);
}

TEST(Lab3HiddenQueue, CloseWakesAProducerBlockedOnAFullQueueAndLeavesItsItem) {
  BoundedQueue<std::unique_ptr<int>> queue(1);
  ASSERT_TRUE(queue.push(std::make_unique<int>(1)));
  auto item = std::make_unique<int>(2);
  auto producer = std::async(std::launch::async, [&] { return queue.push(std::move(item)); });
  EXPECT_EQ(producer.wait_for(100ms), std::future_status::timeout) << "push must block while full";
  std::deque<std::unique_ptr<int>> left = queue.close();
  ASSERT_EQ(producer.wait_for(10s), std::future_status::ready) << "close() did not wake the producer";
  EXPECT_FALSE(producer.get());
  ASSERT_NE(item, nullptr) << "a refused push must leave the item with its caller";
  EXPECT_EQ(*item, 2);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(*left.front(), 1);
}

TEST(Lab3HiddenPool, EveryItemReachesAWorkerOnceEvenAfterTheWorkersWentIdle) {
  std::atomic<int> handled{0};
  WorkerPool<std::unique_ptr<int>> pool(3, 2, [&](std::unique_ptr<int> item) { handled += *item; });
  for (int round = 0; round < 3; ++round) {
    const int before = handled.load();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(pool.submit(std::make_unique<int>(1)));
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (handled.load() < before + 10 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(handled.load(), before + 10) << "round " << round << ": items stuck in the queue";
  }
  pool.shutdown();
  EXPECT_FALSE(pool.submit(std::make_unique<int>(1)));
}

}  // namespace
}  // namespace proxy
