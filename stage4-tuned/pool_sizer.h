// PoolSizer: `--workers auto`. Sizes the worker pool from what the proxy observes, by Little's
// law (L = λ·W: the workers needed equal throughput times time per request). Two rules:
//   - pressure: more work (busy + queued) than workers, or demand near the pool's size, grows
//     the pool at once to the work in the system now (busy + queued) — counted from workers busy
//     *now*, so requests stuck on a silent origin count although none completes;
//   - a downstream bottleneck (the origin's capacity, or the cores) shows as a latency gradient:
//     mean latency W rises above the unloaded latency W₀ while throughput λ stays flat. Past
//     rise·λ·W₀ workers, more only wait in someone else's queue, so the pool is brought back to
//     that (the "gradient" concurrency limit of Netflix's concurrency-limits library, after TCP
//     Vegas: W₀/W below 1 means a queue is forming downstream). Each cut is judged afterwards,
//     by both sides of Little's law, and undone when the workers cut had been doing work.
// Pure arithmetic, no threads or clocks: every decision is a unit test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace proxy {

/// What the proxy observed over one sizing interval.
struct PoolSample {
  double seconds = 0;              ///< length of the interval
  std::uint64_t completed = 0;     ///< requests finished in it
  double busy_seconds = 0;         ///< sum of their service times (worker time), in seconds
  double busy_average = 0;         ///< workers busy on average over it (sampled), L
  std::size_t busy_now = 0;        ///< workers busy at its end (stuck ones included)
  std::size_t queued = 0;          ///< requests waiting for a worker at its end
  double oldest_wait = 0;          ///< how long the oldest of them has waited, in seconds
  std::uint64_t shed = 0;          ///< requests refused with 503 in it
};

/// Bounds and pace of the controller.
struct PoolSizerOptions {
  std::size_t min_workers = 2;
  std::size_t max_workers = 256;
  /// Target utilization: size the pool so that Little's-law demand fills this share of it,
  /// leaving headroom for bursts (0 < target <= 1).
  double target_utilization = 0.75;
  /// Downstream bottleneck: mean latency above `latency_rise` × the unloaded latency, with
  /// throughput no longer rising, caps the pool at latency_rise × λ × W₀ workers.
  double latency_rise = 2.0;
  /// Intervals with fewer completions than this say nothing about latency.
  std::uint64_t min_completions = 20;
  /// The queueing-delay target, in seconds (`--shed-delay-ms`): a queue the pool drains within
  /// it at its present rate grows the pool a step, not to the backlog at once.
  double queue_delay_target = 0.020;
  /// The regular sizing interval, in seconds (`--auto-interval-ms`): probing past a bottleneck
  /// grows the pool by a quarter per interval this long, less in a shorter one.
  double interval_seconds = 0.25;
};

/// Decides the next pool size after each interval. Not thread-safe: one controller thread.
class PoolSizer {
 public:
  /// `initial` is clamped into [min_workers, max_workers]; min_workers 0 counts as 1.
  PoolSizer(PoolSizerOptions options, std::size_t initial);

  /// The pool size for the next interval, given the current size and what it just did. Within
  /// [min_workers, max_workers] always; below sample.busy_now only when a downstream bottleneck
  /// was found (a busy worker above the size retires after its request, never mid-request).
  std::size_t next(std::size_t current, const PoolSample& sample);

  [[nodiscard]] const PoolSizerOptions& options() const noexcept { return options_; }
  /// The pool size the controller wants now.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Little's-law demand (workers busy, on average or now, whichever is more) last interval.
  [[nodiscard]] double demand() const noexcept { return demand_; }
  /// The unloaded latency W₀ (the lowest mean service time seen, or the one seen when a cut
  /// proved it stale), seconds; 0 before any interval was measured.
  [[nodiscard]] double base_latency() const noexcept { return base_.latency; }

 private:
  // One interval's mean latency and the workers busy meanwhile.
  struct Observed {
    double latency = 0;
    double busy = 0;
  };
  // What next() derives from a sample, for the steps below.
  struct Interval {
    double workers = 0;              // the pool's size in it
    double throughput = 0;           // completions per second
    double previous_throughput = 0;  // the interval before's
    double latency = 0;              // mean service time, seconds (0 unless measured)
    bool measured = false;           // enough completions to say anything about latency
  };
  std::size_t clamp(double workers) const noexcept;
  // The steps of next(), in order; each returns the new size where it decides.
  std::optional<std::size_t> judge_cut(const Interval& now);
  bool at_bottleneck(const Interval& now) const;
  std::size_t cut(const Interval& now);
  bool under_pressure(const PoolSample& sample, const Interval& now) const;
  std::size_t grow(const PoolSample& sample, const Interval& now);
  std::size_t shrink(const PoolSample& sample);

  PoolSizerOptions options_;
  std::size_t size_;
  double demand_ = 0;
  Observed base_;  // W₀, the unloaded latency, and the concurrency it was seen at
  double last_throughput_ = 0;
  // After the bottleneck rule cut the pool: the size before the first cut of a run, and what the
  // pool did then, so the next intervals can undo cuts that cost throughput.
  std::size_t cut_from_ = 0;  // 0: no cut to judge
  bool cut_doubted_ = false;  // the first interval after the cut looked like a mistake
  struct {
    double throughput = 0;  // requests/s
    double latency = 0;     // seconds
    double busy = 0;        // workers busy (demand)
  } before_cut_;
  // After a bottleneck was found: growth past `ceiling_` goes in steps, not jumps, until the
  // load goes away (the limit may have moved: another origin, fewer clients).
  std::size_t ceiling_ = 0;  // 0: none found
  double probe_ = 0.25;      // growth past ceiling_ per interval, a share of the pool
  int underused_ = 0;        // consecutive intervals without pressure and with spare workers
};

}  // namespace proxy
