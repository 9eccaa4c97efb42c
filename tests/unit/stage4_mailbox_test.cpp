// Stage 4's hand-off from the workers to the poller and the tunnel relay (stage4-tuned/mailbox.h):
// four threads post at once while one takes, as workers and the poller do; under
// ThreadSanitizer (make tsan) this is also the race check of the box itself.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "mailbox.h"

namespace {

using proxy::Mailbox;

struct Item {
  int poster;
  int sequence;
};

TEST(Mailbox, HandsOverEveryPostOnceInEachPostersOrderWhileFourThreadsPost) {
  constexpr int kPosters = 4;
  constexpr int kEach = 2'000;
  Mailbox<Item> box;
  std::vector<std::jthread> posters;
  for (int p = 0; p < kPosters; ++p) {
    posters.emplace_back([&box, p] {
      for (int i = 0; i < kEach; ++i) box.post(Item{p, i});
    });
  }
  std::vector<int> next(kPosters, 0);  // each poster's next sequence number expected
  int taken = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (taken < kPosters * kEach && std::chrono::steady_clock::now() < deadline) {
    for (const Item& item : box.take()) {
      ASSERT_EQ(item.sequence, next[static_cast<std::size_t>(item.poster)])
          << "poster " << item.poster << "'s items arrived out of order, or twice";
      ++next[static_cast<std::size_t>(item.poster)];
      ++taken;
    }
    std::this_thread::yield();
  }
  EXPECT_EQ(taken, kPosters * kEach) << "posts lost (or the 30 s deadline passed)";
  posters.clear();  // joined
  EXPECT_TRUE(box.take().empty()) << "an item was handed over twice";
}

TEST(Mailbox, ClearDestroysWhatNobodyTook) {
  Mailbox<std::shared_ptr<int>> box;
  auto item = std::make_shared<int>(7);
  box.post(item);
  box.post(item);
  EXPECT_EQ(item.use_count(), 3);
  box.clear();
  EXPECT_EQ(item.use_count(), 1) << "clear() kept copies alive";
  EXPECT_TRUE(box.take().empty());
}

}  // namespace
