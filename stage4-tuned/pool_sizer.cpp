#include "pool_sizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace proxy {
namespace {

// Consecutive under-used intervals before the pool shrinks: a lull between bursts (or between
// two benchmark runs) must not cost the workers the next burst needs. Idle threads cost only
// their stacks; a pool too small costs queueing, which is p99.
constexpr int kShrinkAfter = 8;
// Throughput within this factor of the last interval's counts as "no longer rising".
constexpr double kFlat = 1.10;
// "Well past" the unloaded moment's concurrency, for the bottleneck rule.
constexpr double kMoreConcurrency = 1.5;
// A cut of the pool that lost more than this share of throughput took working workers: undone.
constexpr double kUndoCut = 0.9;

}  // namespace

PoolSizer::PoolSizer(PoolSizerOptions options, std::size_t initial) : options_(options) {
  options_.min_workers = std::max<std::size_t>(1, options_.min_workers);
  options_.max_workers = std::max(options_.max_workers, options_.min_workers);
  if (!(options_.target_utilization > 0 && options_.target_utilization <= 1)) {
    options_.target_utilization = 0.75;
  }
  if (!(options_.latency_rise > 1)) options_.latency_rise = 2.0;
  size_ = clamp(static_cast<double>(initial));
}

std::size_t PoolSizer::clamp(double workers) const noexcept {
  if (!(workers >= 0)) workers = 0;  // NaN too
  const double bounded = std::clamp(workers, static_cast<double>(options_.min_workers),
                                    static_cast<double>(options_.max_workers));
  return static_cast<std::size_t>(std::ceil(bounded));
}

std::size_t PoolSizer::next(std::size_t current, const PoolSample& sample) {
  current = clamp(static_cast<double>(current));
  size_ = current;
  if (sample.seconds <= 0) return size_;
  const double workers = static_cast<double>(current);
  const double throughput = static_cast<double>(sample.completed) / sample.seconds;
  const bool measured = sample.completed >= options_.min_completions;
  const double latency = measured ? sample.busy_seconds / static_cast<double>(sample.completed) : 0;
  // Little's law, seeing work in progress: a worker stuck on a silent origin completes nothing
  // but is busy now; the sampled average counts the ones that came and went.
  demand_ = std::max(sample.busy_average, static_cast<double>(sample.busy_now));
  // W₀ is the lowest latency seen, replaced by any later one seen at a comparable concurrency
  // (the origin may have got slower, or faster) — never by one the pool's own extra concurrency
  // inflated, or W₀ would creep up with the queue it is meant to detect (TCP Vegas's base RTT
  // has the same trap).
  if (measured && (base_.latency == 0 || latency < base_.latency ||
                   demand_ <= kMoreConcurrency * base_.busy)) {
    base_ = {latency, demand_};
  }
  const double previous_throughput = last_throughput_;
  last_throughput_ = throughput;
  // The bottleneck rule below is judged like every hill-climb step: the interval after it cut
  // the pool shows whether those workers were idle waiters or were doing the work. When
  // throughput fell with them, the rule was wrong — W₀ was stale (remembered from a faster
  // phase: hits, a nearer origin), and this latency is simply the origin's. Undo the cut and take
  // the latency seen now as the new W₀.
  if (cut_from_ != 0) {
    const std::size_t cut_from = std::exchange(cut_from_, 0);
    if (measured && throughput < kUndoCut * throughput_before_cut_) {
      base_ = {latency, demand_};
      ceiling_ = 0;
      underused_ = 0;
      size_ = std::max(current, clamp(static_cast<double>(cut_from)));
      return size_;
    }
  }
  const Observed base = base_;

  // A downstream bottleneck: requests take latency_rise × longer than unloaded ones, and the
  // pool's throughput stopped rising. Little's law at the bottleneck: it completes λ per second
  // at W₀ each, so λ·W₀ workers keep it busy; latency_rise × that keeps latency within the
  // rise. Shrinking at most by half per interval keeps one noisy interval from costing much.
  // Only when the pool itself has raised the concurrency well past the unloaded moment's: an
  // origin that simply got slower raises latency at any concurrency, and fewer workers would
  // not help it.
  if (measured && base.latency > 0 && latency > options_.latency_rise * base.latency &&
      throughput < previous_throughput * kFlat && demand_ > kMoreConcurrency * base.busy) {
    const double useful = options_.latency_rise * throughput * base.latency;
    ceiling_ = clamp(std::max(useful, workers / 2));
    underused_ = 0;
    size_ = std::min(current, ceiling_);
    if (size_ < current) {
      cut_from_ = current;
      throughput_before_cut_ = throughput;
    }
    return size_;
  }

  // More work in the system than workers: requests wait for want of one. A request waiting
  // while workers sit idle is a scheduling delay (a CPU-starved machine), which more threads
  // would only make worse.
  const bool waiting = sample.queued > 0 &&
                       static_cast<double>(sample.busy_now + sample.queued) > workers;
  const bool pressure = sample.shed > 0 || waiting ||
                        demand_ >= options_.target_utilization * workers;
  if (pressure) {
    underused_ = 0;
    // Little's law again: the work in the system is what is being served plus what waits, so
    // that many workers (at the target utilization) serve it without queueing: grow there at
    // once. Past a bottleneck found earlier, only a quarter at a time (probing).
    const double backlog = std::max(demand_, static_cast<double>(sample.busy_now)) +
                           static_cast<double>(sample.queued);
    const double step = workers + std::max(1.0, std::floor(workers / 4));
    double wanted = std::max(step, backlog / options_.target_utilization);
    // A ceiling is evidence about requests that complete; when none do (a silent origin) it
    // says nothing, and only more workers can reach the requests queued behind the stuck ones.
    if (ceiling_ != 0 && sample.completed > 0 && wanted > static_cast<double>(ceiling_)) {
      wanted = std::max(static_cast<double>(ceiling_), step);
      ceiling_ = clamp(wanted);
    }
    size_ = std::max(current, clamp(wanted));
    return size_;
  }
  if (sample.queued == 0) ceiling_ = 0;  // the load that found it is gone
  // Under-used for a while: shrink toward what Little's law says is needed, a quarter at a time,
  // so that a brief lull does not throw away the workers a returning load needs, and never below
  // the workers busy now.
  const std::size_t wanted = std::max(clamp(demand_ / options_.target_utilization),
                                      clamp(static_cast<double>(sample.busy_now)));
  if (wanted < current && ++underused_ >= kShrinkAfter) {
    const std::size_t quarter = current - std::max<std::size_t>(1, current / 4);
    size_ = std::max(wanted, clamp(static_cast<double>(quarter)));
  } else if (wanted >= current) {
    underused_ = 0;
  }
  return size_;
}

}  // namespace proxy
