// OriginPool (common/poller/origin_pool.h): kept origin connections, their bounds, their idle
// timeout, and the retry rule of RFC 9110 §9.2.2 / RFC 9112 §9.3.1. Real connected sockets
// (socketpair): the far end plays the origin, so a test sees what a closed or kept connection looks
// like to it.
#include "poller/origin_pool.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace proxy {
namespace {

using namespace std::chrono_literals;
using Clock = OriginPool::Clock;

// A connected pair: `ours` goes into the pool, `origin` is the far end a test watches.
struct Pair {
  Socket ours;
  Socket origin;
};

Pair connected_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  return {Socket(fds[0]), Socket(fds[1])};
}

// True when `origin` sees the end of the stream within a generous deadline: the pool closed
// its end (a reset when that end still held unread bytes).
bool sees_close(const Socket& origin) {
  std::array<char, 16> buf;
  const IoStatus status = origin.read_some(buf, 10s).status;
  return status == IoStatus::eof || status == IoStatus::error;
}

// True when `origin` is still open and silent: nothing to read, no end of stream.
bool still_open(const Socket& origin) {
  pollfd p{origin.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// The connection a pool handed out is the one released: bytes written on it reach `origin`.
bool reaches(const Socket& ours, const Socket& origin, const std::string& text) {
  if (ours.write_all(text, 5s).status != IoStatus::ok) return false;
  std::array<char, 64> buf;
  IoResult got = origin.read_some(buf, 10s);
  return got.status == IoStatus::ok && std::string(buf.data(), got.bytes) == text;
}

TEST(OriginPool, HandsBackAReleasedConnectionForTheSameOriginOnly) {
  OriginPool pool;
  Pair a = connected_pair();
  EXPECT_FALSE(pool.acquire("a.example", 80)) << "an empty pool has nothing to hand out";
  ASSERT_TRUE(pool.release("a.example", 80, std::move(a.ours)));
  EXPECT_FALSE(pool.acquire("a.example", 8080)) << "another port is another origin";
  EXPECT_FALSE(pool.acquire("b.example", 80));
  std::optional<Socket> again = pool.acquire("a.example", 80);
  ASSERT_TRUE(again);
  EXPECT_TRUE(reaches(*again, a.origin, "GET / HTTP/1.1\r\n"));
  EXPECT_FALSE(pool.acquire("a.example", 80)) << "handed out once, not twice";
  const OriginPoolCounters counters = pool.counters();
  EXPECT_EQ(counters.kept, 1u);
  EXPECT_EQ(counters.reused, 1u);
}

TEST(OriginPool, HandsOutTheMostRecentlyReleasedFirst) {
  OriginPool pool;
  Pair older = connected_pair();
  Pair newer = connected_pair();
  const auto t0 = Clock::now();
  pool.release("o", 80, std::move(older.ours), t0);
  pool.release("o", 80, std::move(newer.ours), t0 + 1ms);
  std::optional<Socket> first = pool.acquire("o", 80, t0 + 2ms);
  ASSERT_TRUE(first);
  EXPECT_TRUE(reaches(*first, newer.origin, "x"));
  std::optional<Socket> second = pool.acquire("o", 80, t0 + 2ms);
  ASSERT_TRUE(second);
  EXPECT_TRUE(reaches(*second, older.origin, "y"));
}

TEST(OriginPool, ClosesWhatItCannotKeepPerOriginAndInTotal) {
  OriginPool pool(OriginPoolLimits{2, 3, 4000ms});
  std::vector<Pair> pairs;
  for (int i = 0; i < 5; ++i) pairs.push_back(connected_pair());
  EXPECT_TRUE(pool.release("a", 80, std::move(pairs[0].ours)));
  EXPECT_TRUE(pool.release("a", 80, std::move(pairs[1].ours)));
  EXPECT_FALSE(pool.release("a", 80, std::move(pairs[2].ours))) << "a third for one origin";
  EXPECT_TRUE(sees_close(pairs[2].origin)) << "a refused connection is closed, not leaked";
  EXPECT_TRUE(pool.release("b", 80, std::move(pairs[3].ours)));
  EXPECT_FALSE(pool.release("c", 80, std::move(pairs[4].ours))) << "a fourth in all";
  EXPECT_TRUE(sees_close(pairs[4].origin));
  EXPECT_EQ(pool.idle(), 3u);
  EXPECT_EQ(pool.idle("a", 80), 2u);
  EXPECT_EQ(pool.idle("c", 80), 0u);
  for (int kept : {0, 1, 3}) EXPECT_TRUE(still_open(pairs[kept].origin)) << kept;
  EXPECT_EQ(pool.counters().refused_full, 2u);
}

TEST(OriginPool, NeverHandsOutAConnectionPastTheIdleTimeoutAndClosesIt) {
  OriginPool pool(OriginPoolLimits{8, 8, 1000ms});
  Pair stale = connected_pair();
  Pair fresh = connected_pair();
  const auto t0 = Clock::now();
  pool.release("o", 80, std::move(stale.ours), t0);
  pool.release("o", 80, std::move(fresh.ours), t0 + 600ms);
  // At t0 + 1 s the first is a second old (closed), the second 400 ms (handed out).
  std::optional<Socket> got = pool.acquire("o", 80, t0 + 1000ms);
  ASSERT_TRUE(got);
  EXPECT_TRUE(reaches(*got, fresh.origin, "z"));
  EXPECT_TRUE(sees_close(stale.origin));
  EXPECT_EQ(pool.counters().closed_idle, 1u);
}

TEST(OriginPool, CloseIdleSweepsEveryOrigin) {
  OriginPool pool(OriginPoolLimits{8, 8, 1000ms});
  Pair a = connected_pair();
  Pair b = connected_pair();
  Pair young = connected_pair();
  const auto t0 = Clock::now();
  pool.release("a", 80, std::move(a.ours), t0);
  pool.release("b", 81, std::move(b.ours), t0);
  pool.release("b", 81, std::move(young.ours), t0 + 900ms);
  EXPECT_EQ(pool.close_idle(t0 + 999ms), 0u);
  EXPECT_EQ(pool.close_idle(t0 + 1000ms), 2u);
  EXPECT_TRUE(sees_close(a.origin));
  EXPECT_TRUE(sees_close(b.origin));
  EXPECT_TRUE(still_open(young.origin));
  EXPECT_EQ(pool.idle(), 1u);
}

TEST(OriginPool, SkipsAConnectionTheOriginClosedOrWroteToWhileIdle_Rfc9112_9_3) {
  OriginPool pool;
  Pair closed = connected_pair();
  Pair chatty = connected_pair();
  Pair good = connected_pair();
  const auto t0 = Clock::now();
  pool.release("o", 80, std::move(good.ours), t0);
  pool.release("o", 80, std::move(chatty.ours), t0 + 1ms);
  pool.release("o", 80, std::move(closed.ours), t0 + 2ms);
  closed.origin.close();  // the origin's idle timeout: a FIN the pool has not read
  ASSERT_EQ(chatty.origin.write_all("HTTP/1.1 408 Request Timeout\r\n\r\n", 5s).status,
            IoStatus::ok);  // bytes no request asked for
  std::optional<Socket> got = pool.acquire("o", 80, t0 + 3ms);
  ASSERT_TRUE(got);
  EXPECT_TRUE(reaches(*got, good.origin, "ok"));
  EXPECT_EQ(pool.counters().closed_stale, 2u);
  EXPECT_TRUE(sees_close(chatty.origin));
}

TEST(OriginPool, RefusesZeroBoundsAndTimeouts) {
  EXPECT_THROW(OriginPool(OriginPoolLimits{0, 8, 1000ms}), std::invalid_argument);
  EXPECT_THROW(OriginPool(OriginPoolLimits{8, 0, 1000ms}), std::invalid_argument);
  EXPECT_THROW(OriginPool(OriginPoolLimits{8, 8, 0ms}), std::invalid_argument);
}

TEST(OriginPool, KeepsItsBoundsUnderConcurrentUse) {
  // Four workers take and give back connections to two origins at once (run under the tsan
  // preset too): the pool never holds more than its bounds, and no connection is lost.
  OriginPool pool(OriginPoolLimits{3, 5, 60000ms});
  constexpr int kWorkers = 4;
  constexpr int kRounds = 300;
  std::vector<std::vector<Pair>> far_ends(kWorkers);
  {
    std::vector<std::jthread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&pool, &far_ends, w] {
        for (int i = 0; i < kRounds; ++i) {
          const std::uint16_t port = static_cast<std::uint16_t>(80 + (i + w) % 2);
          std::optional<Socket> got = pool.acquire("o", port);
          if (!got) {
            Pair fresh = connected_pair();
            got = std::move(fresh.ours);
            far_ends[static_cast<std::size_t>(w)].push_back(std::move(fresh));
          }
          pool.release("o", port, std::move(*got));
          EXPECT_LE(pool.idle("o", port), 3u);
          EXPECT_LE(pool.idle(), 5u);
        }
      });
    }
  }
  const OriginPoolCounters counters = pool.counters();
  std::size_t opened = 0;
  for (const auto& list : far_ends) opened += list.size();
  EXPECT_EQ(counters.kept + counters.refused_full, kWorkers * kRounds);
  EXPECT_EQ(counters.reused + opened, kWorkers * kRounds);
  EXPECT_EQ(counters.kept - counters.reused, pool.idle());
}

TEST(MayRetryOnNewConnection, OnlyAnIdempotentRequestOnAReusedConnectionBeforeAnyByteOnce) {
  // RFC 9110 §9.2.2's idempotent methods may be retried; RFC 9112 §9.3.1 forbids the rest.
  for (const char* method : {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}) {
    EXPECT_TRUE(may_retry_on_new_connection(method, true, false, true, 0)) << method;
  }
  for (const char* method : {"POST", "PATCH", "CONNECT", "get", "LOCK"}) {
    EXPECT_FALSE(may_retry_on_new_connection(method, true, false, true, 0)) << method;
  }
  EXPECT_FALSE(may_retry_on_new_connection("GET", false, false, true, 0))
      << "a new connection that fails is the origin's answer, not a stale pool entry";
  EXPECT_FALSE(may_retry_on_new_connection("GET", true, true, true, 0))
      << "part of a response arrived: the request was processed";
  EXPECT_FALSE(may_retry_on_new_connection("PUT", true, false, false, 0))
      << "a streamed body cannot be sent again";
  EXPECT_FALSE(may_retry_on_new_connection("GET", true, false, true, 1)) << "once only";
}

TEST(IsIdempotent, TheMethodsOfRfc9110Section9_2_2CaseSensitive) {
  for (const char* method : {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}) {
    EXPECT_TRUE(is_idempotent(method)) << method;
  }
  for (const char* method : {"POST", "PATCH", "CONNECT", "get", "Put", ""}) {
    EXPECT_FALSE(is_idempotent(method)) << method;
  }
}

}  // namespace
}  // namespace proxy
