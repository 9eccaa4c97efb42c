// PoolSizer: `--workers auto`. Sizes the worker pool from what the proxy observes, by Little's
// law (L = λ·W: the workers busy on average equal throughput times time per request) and a
// hill climb on throughput: grow while more workers bring more throughput, step back when
// they bring only latency. Pure arithmetic, no threads or clocks: every decision is a unit test.
#pragma once

#include <cstddef>
#include <cstdint>

namespace proxy {

/// What the proxy observed over one sizing interval.
struct PoolSample {
  double seconds = 0;              ///< length of the interval
  std::uint64_t completed = 0;     ///< requests finished in it
  double busy_seconds = 0;         ///< sum of their service times (worker time), in seconds
  std::size_t queued = 0;          ///< connections waiting for a worker at the end of it
  std::uint64_t shed = 0;          ///< connections refused with 503 in it
};

/// Bounds and pace of the controller.
struct PoolSizerOptions {
  std::size_t min_workers = 2;
  std::size_t max_workers = 256;
  /// Target utilization: size the pool so that Little's-law demand fills this share of it,
  /// leaving headroom for bursts (0 < target <= 1).
  double target_utilization = 0.75;
  /// A step that raised latency by more than this factor without raising throughput by at
  /// least `min_gain` is undone (the downstream bottleneck is reached).
  double latency_rise = 1.25;
  double min_gain = 1.05;
};

/// Decides the next pool size after each interval. Not thread-safe: one controller thread.
class PoolSizer {
 public:
  /// `initial` is clamped into [min_workers, max_workers]; min_workers 0 counts as 1.
  PoolSizer(PoolSizerOptions options, std::size_t initial);

  /// The pool size for the next interval, given the current size and what it just did. Within
  /// [min_workers, max_workers] always.
  std::size_t next(std::size_t current, const PoolSample& sample);

  [[nodiscard]] const PoolSizerOptions& options() const noexcept { return options_; }
  /// The pool size the controller wants now.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Little's-law demand (average busy workers) in the last interval.
  [[nodiscard]] double demand() const noexcept { return demand_; }

 private:
  std::size_t clamp(double workers) const noexcept;

  PoolSizerOptions options_;
  std::size_t size_;
  double demand_ = 0;
  // The last growth step, to judge whether it paid off: throughput and mean latency before it.
  bool judging_growth_ = false;
  std::size_t size_before_growth_ = 0;
  double throughput_before_ = 0;
  double latency_before_ = 0;
  // Intervals left before growing again after a step was undone (the ceiling found).
  int hold_ = 0;
  std::size_t ceiling_ = 0;  // 0: none found yet
  int underused_ = 0;        // consecutive intervals without pressure and with spare workers
};

}  // namespace proxy
