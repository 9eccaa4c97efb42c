#include "pool_sizer.h"

#include <algorithm>
#include <cmath>

namespace proxy {
namespace {

// Intervals to stay below a ceiling once a growth step was undone, before probing again: the
// load may have changed (another origin, fewer clients).
constexpr int kHoldIntervals = 20;
// Consecutive under-used intervals before the pool shrinks: a lull between bursts (or between
// two benchmark runs) must not cost the workers the next burst needs. Idle threads cost only
// their stacks; a pool too small costs queueing, which is p99.
constexpr int kShrinkAfter = 8;

}  // namespace

PoolSizer::PoolSizer(PoolSizerOptions options, std::size_t initial) : options_(options) {
  options_.min_workers = std::max<std::size_t>(1, options_.min_workers);
  options_.max_workers = std::max(options_.max_workers, options_.min_workers);
  if (!(options_.target_utilization > 0 && options_.target_utilization <= 1)) {
    options_.target_utilization = 0.75;
  }
  size_ = clamp(static_cast<double>(initial));
}

std::size_t PoolSizer::clamp(double workers) const noexcept {
  if (!(workers >= 0)) workers = 0;  // NaN too
  const double bounded = std::clamp(workers, static_cast<double>(options_.min_workers),
                                    static_cast<double>(options_.max_workers));
  return static_cast<std::size_t>(bounded);
}

std::size_t PoolSizer::next(std::size_t current, const PoolSample& sample) {
  current = clamp(static_cast<double>(current));
  size_ = current;
  if (sample.seconds <= 0) return size_;
  const double throughput = static_cast<double>(sample.completed) / sample.seconds;
  const double latency =
      sample.completed > 0 ? sample.busy_seconds / static_cast<double>(sample.completed) : 0;
  // Little's law: the workers that were busy on average, L = λ·W.
  demand_ = sample.busy_seconds / sample.seconds;

  if (judging_growth_) {
    judging_growth_ = false;
    const bool no_gain = throughput < throughput_before_ * options_.min_gain;
    const bool slower = latency > latency_before_ * options_.latency_rise;
    if (no_gain && slower && sample.completed > 0) {
      // The last step bought latency, not throughput: past the downstream bottleneck (the
      // cores, or the origin). Go back, and stay there for a while.
      ceiling_ = size_before_growth_;
      hold_ = kHoldIntervals;
      size_ = clamp(static_cast<double>(size_before_growth_));
      return size_;
    }
  }
  if (hold_ > 0 && --hold_ == 0) ceiling_ = 0;

  // A connection caught in the queue for an instant while most workers idle is not pressure;
  // a queue behind mostly busy workers is.
  const double workers = static_cast<double>(current);
  const bool pressure = sample.shed > 0 || demand_ >= options_.target_utilization * workers ||
                        (sample.queued > 0 && demand_ >= 0.5 * workers);
  if (pressure) {
    underused_ = 0;
    // Little's law again: the work in the system is what is being served plus what waits, so
    // that many workers (at the target utilization) would serve it without queueing. Grow at
    // least a quarter, at once to that estimate when it is larger.
    const double backlog = demand_ + static_cast<double>(sample.queued);
    const double step = static_cast<double>(current + std::max<std::size_t>(1, current / 4));
    std::size_t grown = clamp(std::max(step, std::ceil(backlog / options_.target_utilization)));
    if (ceiling_ != 0) grown = std::min(grown, std::max(ceiling_, current));
    if (grown > current) {
      judging_growth_ = true;
      size_before_growth_ = current;
      throughput_before_ = throughput;
      latency_before_ = latency;
    }
    size_ = grown;
    return size_;
  }
  // Under-used for a while: shrink toward what Little's law says is needed, a quarter at a time,
  // so that a brief lull does not throw away the workers a returning load needs.
  const std::size_t wanted = clamp(std::ceil(demand_ / options_.target_utilization));
  if (wanted < current && ++underused_ >= kShrinkAfter) {
    size_ = std::max(wanted, clamp(static_cast<double>(current - std::max<std::size_t>(1, current / 4))));
  }
  return size_;
}

}  // namespace proxy
