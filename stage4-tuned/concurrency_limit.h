// How many requests stage 4 lets one origin have in flight: an adaptive concurrency limit,
// after Netflix's concurrency-limits (Gradient2) and Envoy's adaptive concurrency filter — a
// gradient of latency against a periodically re-measured minimum. Pure arithmetic on times the
// caller passes (seconds), so every rule is a unit test
// (tests/unit/stage4_concurrency_limit_test.cpp) and the sizing simulator (tools/sizing_sim.cpp)
// replays it in virtual time.
//
// Why not Little's law alone: L = λ·W sizes for the work in the system, and W is what grows
// when the downstream is overloaded — a thrashing origin answers more slowly the more it is
// sent, so L = λ·W asks for more concurrency exactly when less is needed (positive feedback).
// The gradient reads the same W the other way: latency above the unloaded latency means
// requests are waiting downstream, so the limit falls until they are not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace proxy {

/// The controller's knobs. Times in seconds.
struct ConcurrencyLimitOptions {
  double initial = 20;      ///< the limit before any sample
  double min_limit = 2;     ///< never below: a limit of 1 cannot show queueing to the gradient
  double max_limit = 1024;  ///< never above
  /// Latency up to tolerance × the minimum is not queueing: noise, the proxy's own scheduling
  /// under load (on a 20 ms origin, 400 clients add 1-2 ms), and a downstream that is busier
  /// but not yet waiting. On the thrash law (harness/downstream.h) 1.2 is reached at 1.02 × its
  /// capacity, its peak; 1.1 stopped at 0.9 × it, and cut the limit on noise alone.
  double tolerance = 1.2;
  /// ...nor is latency up to the minimum + this much, whatever the ratio: on a fast origin
  /// (the minimum in microseconds) the proxy's own scheduling would read as queueing.
  double slack = 0.002;
  double window = 0.05;             ///< an update needs a window at least this long...
  /// ...with this many samples (or 10 windows with one): with 40, the 1 answer in 20 that a
  /// thrashing origin makes 4x slower moves a window's mean by less than the tolerance.
  std::size_t window_samples = 40;
  /// How often the minimum is measured (each probe holds requests back for a round trip or
  /// two: at 10 s, p99 showed it): the limit drops to half until probe_samples requests that
  /// started at it have finished, their mean latency becomes the minimum, and the limit comes
  /// back. The first window gives a first minimum, and a probe
  /// follows within a second. Only probes set it: a minimum taken from ordinary windows could
  /// only fall (one lucky window would make every later one read as queueing), and one taken on
  /// a faster origin would never rise again.
  double probe_every = 30;
  double first_probe = 1;  ///< the first probe, at most this long after the first window
  std::size_t probe_samples = 10;
};

/// One origin's limit. Feed it every finished request (on_sample) and call update() every tick;
/// limit() is what the caller enforces. Not thread-safe: its owner serializes the calls.
class ConcurrencyLimit {
 public:
  explicit ConcurrencyLimit(ConcurrencyLimitOptions options = {});

  /// A request to this origin starts now. Returns its probe ticket: nonzero for the first
  /// probe_samples requests started while the minimum is measured again, 0 for any other. The
  /// probe's samples are these requests, in the order they were sent, not the first answers to
  /// come back: on an origin whose paths differ in speed the first answers are the fast ones
  /// (an origin serving 3.5 ms and 20 ms paths alike gave a 3.5 ms minimum, and every later
  /// window then read as queueing and halved the limit to 2 until the next probe).
  [[nodiscard]] std::uint64_t on_start() noexcept;
  /// A request that started at `started` finished at `finished` (seconds, any epoch the caller
  /// keeps to). Its latency is a sample of the window when it started at the limit in force now
  /// (one sent before the last change is not counted), or of the probe when its `ticket` is the
  /// probe's (on_start); a caller that keeps no tickets (nullopt) has every request that
  /// started during the probe counted, up to probe_samples.
  void on_sample(double started, double finished,
                 std::optional<std::uint64_t> ticket = std::nullopt);
  /// The downstream failed a request (a 5xx answer or a timeout): past a twentieth of a
  /// window's samples the limit falls a tenth (additive increase, multiplicative decrease),
  /// whatever the latency — an origin that fails fast has no latency to show.
  void on_drop();
  /// Judges the window at `now`. `saturated`: requests waited for the limit in it, or as many
  /// were in flight as it allows — only then may it grow.
  void update(double now, bool saturated);

  /// The requests allowed in flight now (at least 1).
  [[nodiscard]] std::size_t limit() const noexcept;
  /// The unloaded latency the gradient compares with (0 before the first window), seconds.
  [[nodiscard]] double min_rtt() const noexcept { return min_rtt_; }
  /// The last window's mean latency (0 before the first window), seconds.
  [[nodiscard]] double rtt() const noexcept { return last_rtt_; }
  /// True while the minimum is being measured again (the limit is held low).
  [[nodiscard]] bool probing() const noexcept { return probing_; }

 private:
  void end_window(double now);
  void end_probe(double now);
  void cut(double factor);
  void grow();

  ConcurrencyLimitOptions options_;
  double limit_;
  double ceiling_ = 0;  // the limit the last cut was made from (0: none): growth slows near it
  bool slow_start_ = true;  // doubling, until the first cut or the first rise in latency
  double changed_at_ = -1e300;  // when the limit last changed: older samples are not its
  bool last_change_was_cut_ = false;  // then older samples may not cut it again
  double min_rtt_ = 0;
  double last_rtt_ = 0;
  // The window being gathered.
  double window_start_ = -1;
  double rtt_sum_ = 0;
  std::size_t samples_ = 0;
  std::size_t drops_ = 0;
  double stale_sum_ = 0;  // samples sent before the last change (see on_sample)
  std::size_t stale_ = 0;
  // The minimum measured again.
  bool probing_ = false;
  double probe_start_ = 0;
  double next_probe_ = -1;
  double limit_before_probe_ = 0;
  double probe_sum_ = 0;
  std::size_t probe_count_ = 0;
  std::uint64_t probe_id_ = 0;     // the current (or last) probe's ticket
  std::size_t probe_issued_ = 0;  // tickets of this probe handed out by on_start
};

}  // namespace proxy
