// Stage 4's adaptive concurrency limit toward an origin (stage4-tuned/concurrency_limit.h), fed
// synthetic windows: each rule on its own, then the whole controller against the thrash law
// (harness/downstream.h), where it must settle near the peak that Little's law overshoots.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "concurrency_limit.h"
#include "downstream.h"

namespace {

using proxy::ConcurrencyLimit;
using proxy::ConcurrencyLimitOptions;

constexpr double kWindow = 0.06;  // past the 50 ms minimum, whatever the rounding

// No probe unless a test asks for one: each rule on its own.
ConcurrencyLimitOptions without_probes() {
  ConcurrencyLimitOptions options;
  options.probe_every = options.first_probe = 1e9;
  return options;
}

// Drives one limit in virtual time: each step is a window of `samples` requests sent at its
// start with latency `rtt` seconds, judged when they have answered (at least kWindow later).
struct Driver {
  explicit Driver(ConcurrencyLimitOptions options = without_probes()) : limit(options) {
    limit.update(now, false);  // the first update starts the clock
  }
  void window(double rtt, bool saturated = true, int samples = 50) {
    for (int i = 0; i < samples; ++i) limit.on_sample(now, now + rtt);
    now += std::max(kWindow, rtt);
    limit.update(now, saturated);
  }
  ConcurrencyLimit limit;
  double now = 100.0;
};

TEST(ConcurrencyLimit, StartsAtItsInitialLimitWithinItsBounds) {
  EXPECT_EQ(ConcurrencyLimit({.initial = 20}).limit(), 20u);
  EXPECT_EQ(ConcurrencyLimit({.initial = 1, .min_limit = 2}).limit(), 2u);
  EXPECT_EQ(ConcurrencyLimit({.initial = 5000, .max_limit = 64}).limit(), 64u);
}

TEST(ConcurrencyLimit, GrowsWhileLatencyStaysAtItsMinimumAndDemandFillsIt) {
  Driver d;
  for (int i = 0; i < 20; ++i) d.window(0.020);
  EXPECT_GT(d.limit.limit(), 60u);
  EXPECT_NEAR(d.limit.min_rtt(), 0.020, 1e-9);
}

TEST(ConcurrencyLimit, DoublesUntilItsFirstCutThenGrowsByItsSquareRoot) {
  Driver d;
  d.window(0.020);
  EXPECT_EQ(d.limit.limit(), 40u);  // slow start
  d.window(0.020);
  EXPECT_EQ(d.limit.limit(), 80u);
  d.window(0.040);  // twice the minimum: x 24/40
  EXPECT_NEAR(static_cast<double>(d.limit.limit()), 48, 1);
  d.window(0.020);  // far below the cut's 80: by its square root (about 7), no longer doubling
  EXPECT_NEAR(static_cast<double>(d.limit.limit()), 54.9, 1);
}

TEST(ConcurrencyLimit, DoesNotGrowWithoutDemand) {
  Driver d;
  for (int i = 0; i < 20; ++i) d.window(0.020, /*saturated=*/false);
  EXPECT_EQ(d.limit.limit(), 20u);
}

TEST(ConcurrencyLimit, FallsInProportionAsLatencyRisesPastTheTolerance) {
  Driver d;
  d.window(0.020, false);  // the minimum
  d.window(0.040, true);   // twice it: 1.2 x 20 ms tolerated, so x 24/40 = 12
  EXPECT_GE(d.limit.limit(), 11u);
  EXPECT_LE(d.limit.limit(), 12u);
}

TEST(ConcurrencyLimit, AtMostHalvesInOneWindow) {
  Driver d;
  d.window(0.020, false);
  d.window(2.0, true);
  EXPECT_EQ(d.limit.limit(), 10u);
}

TEST(ConcurrencyLimit, LatencyWithinTheToleranceIsNotQueueing) {
  Driver d;
  d.window(0.020, false);
  d.window(0.0235, true);  // 17.5 % above the minimum: noise, not a queue
  EXPECT_GT(d.limit.limit(), 20u);
}

TEST(ConcurrencyLimit, MicrosecondsOfSchedulingOnAFastOriginAreNotQueueing) {
  // A 50 µs origin: the proxy's own scheduling adds a millisecond, 20 times the minimum, but
  // within the 2 ms slack; a ratio alone would halve the limit every window.
  Driver d;
  d.window(0.00005, false);
  for (int i = 0; i < 5; ++i) d.window(0.001, true);
  EXPECT_GT(d.limit.limit(), 20u);
}

TEST(ConcurrencyLimit, NeedsEnoughSamplesForAWindow) {
  Driver d;
  d.window(0.020, false);
  d.window(0.040, true, /*samples=*/30);  // 30 answers in 60 ms: not yet a window (40)
  EXPECT_EQ(d.limit.limit(), 20u);
}

TEST(ConcurrencyLimit, GrowsOneAtATimeNearTheLimitOfItsLastCut) {
  Driver d;
  for (int i = 0; i < 10; ++i) d.window(0.020);  // well past 20
  const double before = static_cast<double>(d.limit.limit());
  d.window(0.036);  // a cut, to 2/3 of it
  ASSERT_LT(static_cast<double>(d.limit.limit()), before);
  int single_steps = 0;
  while (static_cast<double>(d.limit.limit()) < before) {
    const auto prev = static_cast<double>(d.limit.limit());
    d.window(0.020);
    const auto now = static_cast<double>(d.limit.limit());
    if (prev + std::sqrt(prev) > 0.9 * before) {
      EXPECT_EQ(now, prev + 1) << "near the last cut's limit, one at a time";
      ++single_steps;
    } else {
      EXPECT_GT(now, prev + 1) << "far below it, by about the square root";
    }
  }
  EXPECT_GT(single_steps, 0);
}

TEST(ConcurrencyLimit, FailuresCutTheLimitWhenTheOriginFailsFast) {
  // An origin that refuses at once shows no latency; its 503s must bring the limit down.
  Driver d;
  d.window(0.020, false);
  for (int i = 0; i < 10; ++i) d.limit.on_drop();
  d.window(0.020, true, /*samples=*/40);  // 10 failures in 50 answers: past 5 %
  EXPECT_EQ(d.limit.limit(), 18u);        // x 0.9
}

TEST(ConcurrencyLimit, AWindowOfFailuresAloneCloses) {
  Driver d;
  d.window(0.020, false);
  for (int i = 0; i < 40; ++i) d.limit.on_drop();
  d.now += kWindow;
  d.limit.update(d.now, true);
  EXPECT_EQ(d.limit.limit(), 18u);
}

TEST(ConcurrencyLimit, MeasuresItsMinimumAgainAtALowLimitAndComesBack) {
  ConcurrencyLimitOptions options;
  options.probe_every = options.first_probe = 1.0;
  Driver d(options);
  d.window(0.020, false);
  // The origin gets slower for good: 40 ms unloaded. The gradient reads it as queueing and
  // cuts, until the probe re-measures the minimum.
  for (int i = 0; i < 30 && !d.limit.probing(); ++i) d.window(0.040);
  ASSERT_TRUE(d.limit.probing()) << "no probe within its period";
  // Requests started at the probe's limit: 40 ms. The probe ends at the last of them, not at
  // the next tick: the requests it held back go on at once.
  for (int i = 0; i < 9; ++i) d.limit.on_sample(d.now + 0.001, d.now + 0.041);
  EXPECT_TRUE(d.limit.probing());
  d.limit.on_sample(d.now + 0.001, d.now + 0.041);
  EXPECT_FALSE(d.limit.probing());
  EXPECT_NEAR(d.limit.min_rtt(), 0.040, 1e-9);
  d.now += 0.05;
  d.limit.update(d.now, true);
  const std::size_t after = d.limit.limit();
  for (int i = 0; i < 10; ++i) d.window(0.040);
  EXPECT_GT(d.limit.limit(), after) << "40 ms is the new minimum: no longer queueing";
}

// One origin, two paths: 3.5 ms and 20 ms, sent alike. The probe's first answers are the fast
// ones (a 20 ms request holds its place while 3.5 ms ones come and go), so a probe that took
// the first answers to come back measured 3.5 ms, and every window of the mix then read as
// queueing. With tickets, its samples are the first requests sent under it, whatever their speed.
TEST(ConcurrencyLimit, AProbesSamplesAreTheRequestsItSentNotTheFirstToAnswer) {
  ConcurrencyLimitOptions options;
  options.probe_every = options.first_probe = 1.0;
  Driver d(options);
  d.window(0.012, false);
  for (int i = 0; i < 30 && !d.limit.probing(); ++i) d.window(0.012);
  ASSERT_TRUE(d.limit.probing()) << "no probe within its period";
  std::vector<std::uint64_t> tickets;
  for (int i = 0; i < 10; ++i) tickets.push_back(d.limit.on_start());
  for (const std::uint64_t ticket : tickets) EXPECT_NE(ticket, 0u);
  EXPECT_EQ(d.limit.on_start(), 0u) << "only the first probe_samples requests are the probe's";
  const double sent = d.now + 0.001;
  // The fast half answers first, then requests sent after the probe's ten (fast too, and not
  // the probe's), and only then the slow half.
  for (int i = 0; i < 10; i += 2) d.limit.on_sample(sent, sent + 0.0035, tickets[i]);
  for (int i = 0; i < 10; ++i) d.limit.on_sample(sent + 0.004, sent + 0.0075, 0);
  EXPECT_TRUE(d.limit.probing()) << "ended on answers that were not the probe's";
  for (int i = 1; i < 10; i += 2) d.limit.on_sample(sent, sent + 0.020, tickets[i]);
  EXPECT_FALSE(d.limit.probing());
  EXPECT_NEAR(d.limit.min_rtt(), (0.0035 + 0.020) / 2, 1e-9);
}

// A probe holds the limit at half, where nothing waits downstream on an origin that peaks
// below twice it, and never below the minimum limit.
TEST(ConcurrencyLimit, ProbesAtHalfItsLimit) {
  ConcurrencyLimitOptions options;
  options.probe_every = options.first_probe = 1.0;
  Driver d(options);
  for (int i = 0; i < 4; ++i) d.window(0.020);  // slow start: 320
  const std::size_t before = d.limit.limit();
  for (int i = 0; i < 30 && !d.limit.probing(); ++i) d.window(0.020, true, 0);
  ASSERT_TRUE(d.limit.probing()) << "no probe within its period";
  EXPECT_EQ(d.limit.limit(), before / 2);
  for (int i = 0; i < 10; ++i) d.limit.on_sample(d.now + 0.001, d.now + 0.021);
  EXPECT_FALSE(d.limit.probing());
  EXPECT_EQ(d.limit.limit(), before) << "the limit did not come back after the probe";
}

TEST(ConcurrencyLimit, ALuckyLowWindowDoesNotBecomeTheMinimum) {
  // The first window is fast (timers that fired early); the probe a second later measures the
  // real minimum, and the limit does not decay under latency that was never queueing.
  ConcurrencyLimitOptions options;
  options.first_probe = 1.0;
  Driver d(options);
  d.window(0.016, false);
  for (int i = 0; i < 30 && !d.limit.probing(); ++i) d.window(0.0207);
  ASSERT_TRUE(d.limit.probing());
  for (int i = 0; i < 10; ++i) d.limit.on_sample(d.now + 0.001, d.now + 0.0211);
  d.now += kWindow;
  d.limit.update(d.now, true);
  EXPECT_NEAR(d.limit.min_rtt(), 0.0201, 1e-9);
  const std::size_t after = d.limit.limit();
  for (int i = 0; i < 10; ++i) d.window(0.0207);  // windows never lower the minimum again...
  d.window(0.0150);
  EXPECT_NEAR(d.limit.min_rtt(), 0.0201, 1e-9);
  EXPECT_GT(d.limit.limit(), after);  // ...and 20.7 ms is no queue
}

TEST(ConcurrencyLimit, GrowsOnlyOnAnswersSentAtItsLimitButIsCutOnLateOnes) {
  Driver d;
  d.window(0.020);  // min 20 ms; slow start doubles: 40
  ASSERT_EQ(d.limit.limit(), 40u);
  // Answers sent before that change, fast: not the new limit's, so no growth on them.
  for (int i = 0; i < 50; ++i) d.limit.on_sample(d.now - 0.001, d.now + 0.019);
  d.now += kWindow;
  d.limit.update(d.now, true);
  EXPECT_EQ(d.limit.limit(), 40u);
  // The origin has begun to collapse: late answers, sent before the last change, cut the
  // limit that grew at once, without a round trip of fresh ones...
  for (int i = 0; i < 50; ++i) d.limit.on_sample(d.now - 0.5, d.now);
  d.now += kWindow;
  d.limit.update(d.now, true);
  EXPECT_EQ(d.limit.limit(), 20u);
  // ...but not the limit that was just cut: that one waits for answers sent under it.
  for (int i = 0; i < 50; ++i) d.limit.on_sample(d.now - 0.5, d.now);
  d.now += kWindow;
  d.limit.update(d.now, true);
  EXPECT_EQ(d.limit.limit(), 20u);
}

TEST(ConcurrencyLimit, SamplesSentBeforeAProbeDoNotCountForIt) {
  ConcurrencyLimitOptions options;
  options.probe_every = options.first_probe = 0.1;
  Driver d(options);
  d.window(0.020, false);
  for (int i = 0; i < 10 && !d.limit.probing(); ++i) d.window(0.020);
  ASSERT_TRUE(d.limit.probing());
  // Started before the probe, at the old limit: 500 ms, and ignored.
  for (int i = 0; i < 20; ++i) d.limit.on_sample(d.now - 0.5, d.now);
  for (int i = 0; i < 10; ++i) d.limit.on_sample(d.now + 0.001, d.now + 0.021);
  d.now += 0.05;
  d.limit.update(d.now, true);
  EXPECT_NEAR(d.limit.min_rtt(), 0.020, 1e-9);
}

// The whole controller on the thrash law: n requests in service take delay x slowdown(n), whose
// throughput n / (delay x slowdown(n)) peaks at the capacity. Closed loop, saturated: the window
// at limit L sees the mean latency of L in service. The limit must settle near the peak —
// where Little's law, L = λ·W, would grow without end, since W grows with L past it.
TEST(ConcurrencyLimit, SettlesNearThePeakOfAThrashingOrigin) {
  for (int capacity : {16, 32, 128}) {
    Driver d(ConcurrencyLimitOptions{});  // probes included: the first window is past the peak
    double delivered = 0;
    const int windows = 2000;
    for (int i = 0; i < windows; ++i) {
      const int n = static_cast<int>(d.limit.limit());
      const double rtt = 0.020 * harness::thrash_slowdown(capacity, n);
      if (i >= windows / 2) delivered += n / rtt;
      d.window(rtt);
    }
    const double peak = capacity / (0.020 * harness::thrash_slowdown(capacity, capacity));
    EXPECT_GE(delivered / (windows / 2) / peak, 0.9) << "capacity " << capacity;
    EXPECT_LE(d.limit.limit(), static_cast<std::size_t>(1.3 * capacity)) << "capacity " << capacity;
  }
}

}  // namespace
