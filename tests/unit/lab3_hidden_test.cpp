// Lab 3's hidden tests (labs/manifest.json): run by the grader (make grade LAB=3), never shipped
// in a handout. Competing consumers, a close with waiters on both ends, items moved by value.
// Every wait here has a deadline (pool_test_support.h), so a lost wakeup fails in seconds,
// naming the likely trap, instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../test_support.h"
#include "bounded_queue.h"
#include "pool_test_support.h"
#include "worker_pool.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;
using pool_test::Call;
using pool_test::within;
using test_support::eventually;

TEST(Lab3HiddenQueue, ThreeConsumersShareItemsExactlyOnceThenAllSeeTheClose) {
  BoundedQueue<int> queue(2);
  std::atomic<long> sum{0};
  std::atomic<int> taken{0};
  std::vector<std::unique_ptr<Call>> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.push_back(std::make_unique<Call>([&] {
      while (std::optional<int> item = queue.pop()) {
        sum += *item;
        ++taken;
      }
    }));
  }
  for (int i = 1; i <= 300; ++i) {
    ASSERT_TRUE(within("push() into a queue of 2 with three consumers", pool_test::kLostWakeup,
                       [&] { return queue.push(int{i}); }));
  }
  if (!eventually([&] { return taken.load() == 300; }, 15s)) {
    pool_test::fail_hung("three consumers popping 300 items", pool_test::kLostWakeup, 15s);
  }
  EXPECT_TRUE(within("close()", pool_test::kCloseWakes, [&] { return queue.close(); }).empty());
  for (auto& c : consumers) c->finish("a consumer's pop() after close()", pool_test::kCloseWakes);
  EXPECT_EQ(sum.load(), 300L * 301 / 2);
}

TEST(Lab3HiddenQueue, CloseWakesAProducerBlockedOnAFullQueueAndLeavesItsItem) {
  BoundedQueue<std::unique_ptr<int>> queue(1);
  ASSERT_TRUE(queue.push(std::make_unique<int>(1)));
  auto item = std::make_unique<int>(2);
  bool pushed = true;
  Call producer([&] { pushed = queue.push(std::move(item)); });
  EXPECT_FALSE(producer.done_within(100ms)) << "push must block while full";
  std::deque<std::unique_ptr<int>> left =
      within("close()", pool_test::kCloseWakes, [&] { return queue.close(); });
  producer.finish("push() on a full queue after close()", pool_test::kCloseWakes);
  EXPECT_FALSE(pushed);
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
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(within("submit() into a pool of 3 workers, queue of 2", pool_test::kLostWakeup,
                         [&] { return pool.submit(std::make_unique<int>(1)); }));
    }
    if (!eventually([&] { return handled.load() >= before + 10; }, 15s)) {
      pool_test::fail_hung("round " + std::to_string(round) + ": workers taking 10 queued items",
                           pool_test::kLostWakeup, 15s);
    }
  }
  within("shutdown()", pool_test::kCloseWakes, [&] { pool.shutdown(); });
  EXPECT_FALSE(pool.submit(std::make_unique<int>(1)));
}

}  // namespace
}  // namespace proxy
