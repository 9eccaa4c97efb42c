// Load shedding by queueing delay, not queue length: CoDel (Nichols & Jacobson, "Controlling
// Queue Delay", ACM Queue 10(5), 2012), in the form Facebook uses for server thread pools
// (Maurer, "Fail at Scale", ACM Queue 13(8), 2015). A queue that empties now and then is a
// good queue — it absorbs a burst; a queue whose oldest request has waited longer than a
// target for a whole interval is a standing queue — sustained overload — and from then on new
// requests are refused at once and those that waited past the target are refused when a worker
// reaches them, until the delay falls below the target again. Queue length says neither: 100
// waiting for 1 ms workers is fine, 2 waiting behind a stuck pool is not.
#pragma once

namespace proxy {

/// CoDel's two knobs, in seconds.
struct QueueDelayOptions {
  double target = 0.020;    ///< queueing delay tolerated indefinitely
  double interval = 0.500;  ///< how long the delay must stay above target to count as standing
};

/// Decides whether the queue is standing. Pure: the caller feeds it the oldest waiting
/// request's age and the time. Not thread-safe: one thread (stage 4's poller) feeds it.
class QueueDelayShedder {
 public:
  explicit QueueDelayShedder(QueueDelayOptions options) : options_(options) {}

  /// Feeds the age in seconds of the request that has waited longest now (0: queue empty) at
  /// `now` (seconds on a monotonic clock). Returns whether the queue is standing: the delay
  /// has stayed above target for at least one interval.
  bool observe(double oldest_wait, double now) noexcept {
    if (oldest_wait < options_.target) {
      above_since_ = -1;
      dropping_ = false;
    } else if (above_since_ < 0) {
      // The oldest request crossed the target `oldest_wait - target` ago.
      above_since_ = now - (oldest_wait - options_.target);
    }
    if (above_since_ >= 0 && now - above_since_ >= options_.interval) dropping_ = true;
    return dropping_;
  }
  /// The last verdict of observe().
  [[nodiscard]] bool dropping() const noexcept { return dropping_; }
  [[nodiscard]] const QueueDelayOptions& options() const noexcept { return options_; }

 private:
  QueueDelayOptions options_;
  double above_since_ = -1;  // when the delay went above target; -1: it is below
  bool dropping_ = false;
};

}  // namespace proxy
