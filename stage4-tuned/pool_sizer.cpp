#include "pool_sizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
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
// Cuts that keep more than this share of the concurrency move throughput less than a noisy
// machine does on its own: they are judged only once they add up to this.
constexpr double kJudgedCut = 0.6;
// Latency after a cut within this factor of the latency before it "stayed where it was".
constexpr double kLatencyStayed = 0.9;
// Growth past a ceiling the bottleneck rule found: this share of the pool per interval.
constexpr double kProbe = 0.25;
// Throughput (or latency) moving past this factor: another load, not noise. A noisy machine
// moves them by 10-30 % between intervals and a stall by 2.5× at most; a cut past a bottleneck
// leaves throughput where it was.
constexpr double kLoadChanged = 3.0;

}  // namespace

PoolSizer::PoolSizer(PoolSizerOptions options, std::size_t initial) : options_(options) {
  options_.min_workers = std::max<std::size_t>(1, options_.min_workers);
  options_.max_workers = std::max(options_.max_workers, options_.min_workers);
  if (!(options_.target_utilization > 0 && options_.target_utilization <= 1)) {
    options_.target_utilization = 0.75;
  }
  if (!(options_.latency_rise > 1)) options_.latency_rise = 2.0;
  if (!(options_.interval_seconds > 0)) options_.interval_seconds = 0.25;
  if (!(options_.queue_delay_target >= 0)) options_.queue_delay_target = 0.020;
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
  Interval now;
  now.workers = static_cast<double>(current);
  now.throughput = static_cast<double>(sample.completed) / sample.seconds;
  now.measured = sample.completed >= options_.min_completions;
  now.latency = now.measured ? sample.busy_seconds / static_cast<double>(sample.completed) : 0;
  now.previous_throughput = std::exchange(last_throughput_, now.throughput);
  // Little's law, seeing work in progress: a worker stuck on a silent origin completes nothing
  // but is busy now; the sampled average counts the ones that came and went.
  demand_ = std::max(sample.busy_average, static_cast<double>(sample.busy_now));
  // Another load (misses after hits, a far origin after a near one): λ fell and W rose, each by
  // more than kLoadChanged, from one interval to the next. No bottleneck the pool meets does
  // that, nor a cut (it lowers W), nor a noisy interval or a stall (they move each by 2.5× at
  // most): what was learnt about the old load — W₀, a ceiling, a cut — says nothing of this one.
  const double previous_latency = std::exchange(last_latency_, now.latency);
  if (now.measured && previous_latency > 0 && now.latency > kLoadChanged * previous_latency &&
      now.throughput * kLoadChanged < now.previous_throughput) {
    base_ = {now.latency, now.throughput * now.latency};
    ceiling_ = 0;
    probe_ = kProbe;
    cut_from_ = 0;
    cut_doubted_ = false;
  }
  // W₀ is the lowest latency seen. It never rises with the latency seen now, even at about the
  // same concurrency: where latency grows with concurrency (a CPU-bound load), a pool that grows
  // a step at a time would carry W₀ up with the queue it is meant to detect (TCP Vegas's base
  // RTT has the same trap). An origin that really got slower is learnt from a wrong cut below.
  // The concurrency it was seen at is that of the requests it was measured on, L = λ·W — not the
  // workers busy at the interval's end, which a load arriving late in it would inflate.
  if (now.measured && (base_.latency == 0 || now.latency < base_.latency)) {
    base_ = {now.latency, now.throughput * now.latency};
  }
  if (std::optional<std::size_t> judged = judge_cut(now)) return size_ = *judged;
  if (at_bottleneck(now)) return size_ = cut(now);
  cut_from_ = 0;  // a run of cuts too small to judge has ended
  if (under_pressure(sample, now)) return size_ = grow(sample, now);
  return size_ = shrink(sample);
}

// The bottleneck rule is judged like every hill-climb step: the intervals after it cut the pool
// show whether those workers were idle waiters or were doing the work. When they were working,
// the rule was wrong — W₀ was stale (remembered from a faster phase: hits, a nearer origin; or
// the origin got slower) and this latency is simply the origin's: the cut is undone and the
// latency seen now becomes W₀.
//
// A noisy machine moves throughput by 10-30 % between intervals on its own, and an undo that
// noise set off would take W₀ from an inflated latency and blind the rule for good. So the cut is
// judged by both sides of Little's law. Workers that were working take their share of throughput
// with them (a halving halves λ) and leave latency as it was; idle waiters take none of λ, and
// their share of the latency goes with them (W = L / λ halves). Undone only when λ fell past
// halfway to the first prediction and W stayed where it was, two intervals in a row (one
// interval's dip looks the same), and only once the cuts since the last judgment add up to
// enough for λ to show it.
std::optional<std::size_t> PoolSizer::judge_cut(const Interval& now) {
  if (cut_from_ == 0) return std::nullopt;
  // The load the cut was made under has gone: throughput well past anything the cut left room
  // for (a slow phase ended). The cut proved nothing either way, and keeping its ceiling would
  // let the next slow phase cut again from there: an origin alternating fast and slow would
  // ratchet the pool down a cut per phase while requests queue for an idle origin. Undone,
  // without learning W₀ from it.
  if (now.measured && now.throughput > kLoadChanged * before_cut_.throughput) {
    size_ = std::max(size_, clamp(static_cast<double>(std::exchange(cut_from_, 0))));
    cut_doubted_ = false;
    ceiling_ = 0;
    return std::nullopt;
  }
  // The share of the concurrency kept: workers above the work in the system were idle, and
  // cutting them changed nothing.
  const double kept = std::min(1.0, now.workers / std::max(before_cut_.busy, 1.0));
  if (kept > kJudgedCut) return std::nullopt;  // too small to see yet; more cuts may follow
  const bool wrong = now.measured && now.throughput < (1 + kept) / 2 * before_cut_.throughput &&
                     now.latency > kLatencyStayed * before_cut_.latency;
  if (wrong && !cut_doubted_) {
    cut_doubted_ = true;
    return size_;  // hold the size and look again
  }
  const std::size_t cut_from = std::exchange(cut_from_, 0);
  cut_doubted_ = false;
  if (!wrong) return std::nullopt;
  base_ = {now.latency, now.throughput * now.latency};
  underused_ = 0;
  // Proof that the cut was wrong, not that there is no limit (noise can still pass both tests
  // now and then): growth goes on from the size restored, doubling each interval as TCP's slow
  // start does, not in one jump to the whole backlog that the next interval would have to undo.
  const std::size_t restored = std::max(size_, clamp(static_cast<double>(cut_from)));
  ceiling_ = restored;
  probe_ = 1.0;
  return restored;
}

// A downstream bottleneck (the origin's capacity, or the cores): requests take latency_rise ×
// longer than unloaded ones and the pool's throughput stopped rising. Only when the pool itself
// has raised the concurrency well past the unloaded moment's: an origin that simply got slower
// raises latency at any concurrency, and fewer workers would not help it.
bool PoolSizer::at_bottleneck(const Interval& now) const {
  return now.measured && base_.latency > 0 &&
         now.latency > options_.latency_rise * base_.latency &&
         now.throughput < now.previous_throughput * kFlat &&
         demand_ > kMoreConcurrency * base_.busy;
}

// Little's law at the bottleneck: it completes λ per second at W₀ each, so λ·W₀ workers keep it
// busy; latency_rise × that keeps latency within the rise. Shrinking at most by half per
// interval keeps one noisy interval from costing much.
std::size_t PoolSizer::cut(const Interval& now) {
  // λ at the bottleneck: the better of this interval and the last, for one interval in which
  // the machine stalled (another process took the cores) shows a bottleneck too, with a λ that
  // would cut the pool far below what the origin needs.
  const double throughput = std::max(now.throughput, now.previous_throughput);
  const double useful = options_.latency_rise * throughput * base_.latency;
  // Workers busy beyond what the completions explain (L = λ·W) are stuck on a silent origin:
  // they are no part of the bottleneck's concurrency, and cutting them would leave none free.
  const double stuck = std::max(0.0, demand_ - now.throughput * now.latency);
  ceiling_ = clamp(std::max(useful, (now.workers - std::min(stuck, now.workers)) / 2) + stuck);
  probe_ = kProbe;
  underused_ = 0;
  const std::size_t size = std::min(size_, ceiling_);
  if (size < size_ && cut_from_ == 0) {  // the first of a run of cuts: what it is judged against
    cut_from_ = size_;
    before_cut_ = {now.throughput, now.latency, demand_};
  }
  return size;
}

// More work in the system than workers: requests wait for want of one. A request waiting while
// workers sit idle is a scheduling delay (a CPU-starved machine), which more threads would only
// make worse.
bool PoolSizer::under_pressure(const PoolSample& sample, const Interval& now) const {
  const bool waiting = sample.queued > 0 &&
                       static_cast<double>(sample.busy_now + sample.queued) > now.workers;
  return sample.shed > 0 || waiting || demand_ >= options_.target_utilization * now.workers;
}

// Little's law again: the work in the system is what is being served plus what waits, so that
// many workers (at the target utilization) serve it without queueing: grow there at once. Past a
// bottleneck found earlier, only a quarter per interval (probing; doubling after an undone cut).
std::size_t PoolSizer::grow(const PoolSample& sample, const Interval& now) {
  underused_ = 0;
  const double backlog = std::max(demand_, static_cast<double>(sample.busy_now)) +
                         static_cast<double>(sample.queued);
  const double step = now.workers + std::max(1.0, std::floor(now.workers / 4));
  double wanted = std::max(step, backlog / options_.target_utilization);
  // Little's law on the queue: at the rate the pool completes requests now, the queue drains in
  // queued / λ. Within the queueing-delay target it is no want of workers but the cores keeping
  // up (short CPU-bound requests: hits, a near origin), and a jump to the backlog would only
  // queue threads for the cores; a step, judged by the bottleneck rule, finds out.
  if (now.measured && static_cast<double>(sample.queued) <
                          now.throughput * options_.queue_delay_target) {
    wanted = step;
  }
  // A ceiling is evidence about requests that complete; when none do (a silent origin) it says
  // nothing, and only more workers can reach the requests queued behind the stuck ones.
  if (ceiling_ != 0 && sample.completed > 0 && wanted > static_cast<double>(ceiling_)) {
    // A short interval (the pool is asked early while requests wait) grows it by its share of
    // the step, or a queue that a bottleneck keeps standing would grow the pool faster than
    // the bottleneck rule can judge it.
    const double share = std::min(1.0, sample.seconds / options_.interval_seconds);
    const double probe = now.workers + std::max(1.0, std::floor(now.workers * probe_ * share));
    wanted = std::min(wanted, std::max(static_cast<double>(ceiling_), probe));
    ceiling_ = clamp(wanted);
  }
  return std::max(size_, clamp(wanted));
}

// Under-used for a while: shrink toward what Little's law says is needed, a quarter at a time, so
// that a brief lull does not throw away the workers a returning load needs, and never below the
// workers busy now.
std::size_t PoolSizer::shrink(const PoolSample& sample) {
  const std::size_t wanted = std::max(clamp(demand_ / options_.target_utilization),
                                      clamp(static_cast<double>(sample.busy_now)));
  if (wanted >= size_) {
    underused_ = 0;
    return size_;
  }
  if (++underused_ < kShrinkAfter) return size_;
  ceiling_ = 0;  // the load that found it has gone (one empty moment of the queue is not that)
  const std::size_t quarter = size_ - std::max<std::size_t>(1, size_ / 4);
  return std::max(wanted, clamp(static_cast<double>(quarter)));
}

}  // namespace proxy
