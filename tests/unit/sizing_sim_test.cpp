// The sizing simulator (tools/sizing_sim.h) replays the shapes the course teaches, in virtual
// time: a fixed pool's tuning curve climbs, peaks at the origin's capacity and collapses against
// a thrashing origin but stays flat against one that queues; Little's law overshoots; stage 4's
// limit finds the peak by itself. Each run takes milliseconds and is deterministic.
#include "sizing_sim.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace sizing {
namespace {

// The course's scenario: 200 clients, an origin of capacity 32 with a 20 ms delay.
SimOptions scenario(harness::Overload law) {
  SimOptions o;
  o.clients = 200;
  o.capacity = 32;
  o.delay_ms = 20;
  o.overload = law;
  o.seconds = 30;
  return o;
}

// Good answers/s for each fixed limit of the sweep.
std::map<int, double> sweep(const SimOptions& o) {
  std::map<int, double> curve;
  for (int n : {1, 2, 4, 8, 16, 32, 64, 128}) {
    curve[n] = simulate(o, "fixed:" + std::to_string(n)).good_per_second;
  }
  return curve;
}

int best_of(const std::map<int, double>& curve) {
  int best = curve.begin()->first;
  for (const auto& [n, rate] : curve) {
    if (rate > curve.at(best)) best = n;
  }
  return best;
}

TEST(SizingSim, FixedLimitMatchesTheLawsArithmetic) {
  // Before trusting any controller's numbers, the simulator must reproduce n / E[service].
  for (harness::Overload law : {harness::Overload::queue, harness::Overload::thrash}) {
    const SimOptions o = scenario(law);
    for (int n : {4, 32, 64}) {
      SCOPED_TRACE(std::string(harness::overload_name(law)) + " fixed:" + std::to_string(n));
      EXPECT_NEAR(simulate(o, "fixed:" + std::to_string(n)).good_per_second,
                  expected_per_second(o, n), 0.05 * expected_per_second(o, n));
    }
  }
}

TEST(SizingSim, ThrashingOriginPeaksNearItsCapacityThenCollapses) {
  const std::map<int, double> curve = sweep(scenario(harness::Overload::thrash));
  const int best = best_of(curve);
  EXPECT_GE(best, 16);
  EXPECT_LE(best, 64);
  EXPECT_GT(curve.at(8), 3 * curve.at(2)) << "the climb: more workers, more throughput";
  EXPECT_LT(curve.at(128), 0.5 * curve.at(best)) << "the collapse past the peak";
}

TEST(SizingSim, QueueingOriginStaysFlatPastItsCapacity) {
  const std::map<int, double> curve = sweep(scenario(harness::Overload::queue));
  EXPECT_NEAR(curve.at(128), curve.at(32), 0.10 * curve.at(32));
  EXPECT_GT(curve.at(32), 1.8 * curve.at(16)) << "it still climbs up to the capacity";
  // Past K the extra requests wait at the origin instead of in the proxy's queue: in a closed
  // loop the latency stays clients / throughput (Little's law), wherever they wait.
  const SimOptions o = scenario(harness::Overload::queue);
  const double p99_at_capacity = simulate(o, "fixed:32").p99_ms;
  EXPECT_NEAR(simulate(o, "fixed:128").p99_ms, p99_at_capacity, 0.10 * p99_at_capacity);
  EXPECT_GT(simulate(o, "fixed:16").p99_ms, 1.5 * p99_at_capacity) << "below K they wait longer";
}

TEST(SizingSim, LittlesLawOvershootsOnAThrashingOrigin) {
  const SimOptions o = scenario(harness::Overload::thrash);
  const SimResult littles = simulate(o, "littles");
  EXPECT_GT(littles.final_limit, 3u * static_cast<unsigned>(o.capacity));
  EXPECT_LT(littles.good_per_second, 0.5 * simulate(o, "fixed:32").good_per_second);
}

TEST(SizingSim, Stage4FindsThePeakOfAThrashingOrigin) {
  const SimOptions o = scenario(harness::Overload::thrash);
  const std::map<int, double> curve = sweep(o);
  const SimResult stage4 = simulate(o, "stage4");
  EXPECT_GE(stage4.good_per_second, 0.85 * curve.at(best_of(curve)));
  EXPECT_LE(stage4.mean_limit, 2.0 * o.capacity) << "it must not sit past the peak";
}

TEST(SizingSim, QueueTimeoutShedsWhatWaitsTooLong) {
  SimOptions o = scenario(harness::Overload::queue);
  o.queue_timeout_ms = 50;
  const SimResult shedding = simulate(o, "fixed:8");
  // 8 in flight at 20 ms each answer 400/s; the other 192 clients time out and retry.
  EXPECT_GT(shedding.shed, 0u);
  EXPECT_LE(shedding.p99_ms, 50 + 20 + 1);  // a good answer waited at most the timeout
  EXPECT_EQ(simulate(scenario(harness::Overload::queue), "fixed:8").shed, 0u);
}

TEST(SizingSim, SameSeedSameResultsAndTheSeedMatters) {
  SimOptions o = scenario(harness::Overload::thrash);
  o.seconds = 5;
  for (const std::string& name :
       {std::string("fixed:32"), std::string("stage4"), std::string("aimd")}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(simulate(o, name), simulate(o, name));
  }
  SimOptions other = o;
  other.seed = o.seed + 1;
  EXPECT_FALSE(simulate(o, "fixed:32") == simulate(other, "fixed:32"));
}

TEST(SizingSim, RefusesUnknownControllers) {
  EXPECT_THROW(simulate(SimOptions{}, "pid"), std::invalid_argument);
  EXPECT_THROW(simulate(SimOptions{}, "fixed:0"), std::invalid_argument);
  EXPECT_THROW(simulate(SimOptions{}, "fixed:x"), std::invalid_argument);
}

}  // namespace
}  // namespace sizing
