#include "concurrency_limit.h"

#include <algorithm>
#include <cmath>

namespace proxy {
namespace {

// The probe's limit: half the limit. The limit stops where latency passes the tolerance, which
// every downstream the course models reaches before twice its peak (harness/downstream.h), so at
// half of it nothing waits downstream and the latency is the unloaded one. Lower would hold
// more requests back: at a limit of 640 on an unlimited origin, a probe at 8 held 392 clients
// back for two round trips, and doubled p99 (stage4-tuned/README.md, step 13).
double probe_limit(double limit, double min_limit) {
  return std::max(min_limit, limit / 2);
}

}  // namespace

ConcurrencyLimit::ConcurrencyLimit(ConcurrencyLimitOptions options)
    : options_(options),
      limit_(std::clamp(options.initial, options.min_limit, options.max_limit)) {}

std::size_t ConcurrencyLimit::limit() const noexcept {
  return std::max<std::size_t>(1, static_cast<std::size_t>(limit_));
}

std::uint64_t ConcurrencyLimit::on_start() noexcept {
  if (!probing_ || probe_issued_ >= options_.probe_samples) return 0;
  ++probe_issued_;
  return probe_id_;
}

void ConcurrencyLimit::on_sample(double started, double finished,
                                 std::optional<std::uint64_t> ticket) {
  const double rtt = std::max(0.0, finished - started);
  if (probing_ && (ticket ? *ticket == probe_id_ : started >= probe_start_)) {
    probe_sum_ += rtt;
    ++probe_count_;
    // Done at its last sample, not at the next tick: every request held back by the probe
    // waits until the limit comes back (the release that brought this sample wakes the poller
    // to admit them, origin_gates.cpp).
    if (probe_count_ >= options_.probe_samples) end_probe(finished);
    return;
  }
  if (probing_) return;  // sent at the old limit: it says nothing of the unloaded latency
  // Sent before the limit last changed: it shows the old limit, not this one. Growing the new
  // limit on it is how slow start overshot a collapsing origin fourfold (TCP, too, changes its
  // window at most once a round trip). It may still show that a limit that grew, or did not
  // change, is too high: an origin that has just begun to collapse answers late, and waiting a
  // round trip of it for fresh answers would leave it overloaded for seconds.
  if (started < changed_at_) {
    stale_sum_ += rtt;
    ++stale_;
    return;
  }
  rtt_sum_ += rtt;
  ++samples_;
}

void ConcurrencyLimit::on_drop() {
  ++drops_;
}

void ConcurrencyLimit::update(double now, bool saturated) {
  if (window_start_ < 0) {
    window_start_ = now;
    next_probe_ = now + options_.probe_every;
    return;
  }
  if (probing_) {
    // Ends at its last sample (on_sample), or after a second without enough of them (a load
    // that went away).
    if (now - probe_start_ > 1.0) end_probe(now);
    return;
  }
  // Re-measured only under load: an idle origin's windows show its unloaded latency anyway.
  if (now >= next_probe_ && saturated && min_rtt_ > 0) {
    probing_ = true;
    probe_start_ = now;
    limit_before_probe_ = limit_;
    limit_ = probe_limit(limit_, options_.min_limit);
    probe_sum_ = 0;
    probe_count_ = 0;
    ++probe_id_;
    probe_issued_ = 0;
    return;
  }
  const double before = limit_;
  const double length = now - window_start_;
  // Failures count towards a window: an origin that only fails must not hold the limit up for
  // ten windows.
  const std::size_t seen = samples_ + drops_;
  const bool enough = (length >= options_.window && seen >= options_.window_samples) ||
                      (length >= 10 * options_.window && seen > 0);
  if (!enough && !last_change_was_cut_ && min_rtt_ > 0 && length >= options_.window &&
      stale_ >= options_.window_samples) {
    const double stale_rtt = stale_sum_ / static_cast<double>(stale_);
    const double tolerated = std::max(options_.tolerance * min_rtt_, min_rtt_ + options_.slack);
    if (stale_rtt > tolerated) {
      last_rtt_ = stale_rtt;
      cut(std::max(0.5, tolerated / stale_rtt));
      limit_ = std::clamp(limit_, options_.min_limit, options_.max_limit);
      changed_at_ = now;
      last_change_was_cut_ = true;
      end_window(now);
      return;
    }
  }
  if (!enough) return;
  const double drop_share = static_cast<double>(drops_) /
                            static_cast<double>(std::max<std::size_t>(samples_ + drops_, 1));
  if (samples_ > 0) {
    const double rtt = rtt_sum_ / static_cast<double>(samples_);
    last_rtt_ = rtt;
    // The minimum comes from probes (above), where nothing waits downstream; a window sets it
    // only at first, and a probe follows soon to confirm it. Had every window been allowed to
    // lower it, one lucky window (an origin timer firing early, a burst of fast answers) would
    // make the latency of every later window read as queueing, and the limit would decay.
    if (min_rtt_ == 0) {
      min_rtt_ = rtt;
      next_probe_ = std::min(next_probe_, now + options_.first_probe);
    }
    const double tolerated = std::max(options_.tolerance * min_rtt_, min_rtt_ + options_.slack);
    if (drop_share > 0.05) {
      cut(0.9);
    } else if (rtt > tolerated) {
      // Gradient2's rule: scale by how far latency has risen, at most halving per window.
      cut(std::max(0.5, tolerated / rtt));
    } else if (saturated) {
      // HyStart (Ha and Rhee, 2008): slow start ends at the first sign of latency rising, not
      // at the first loss. Doubling on answers sent at half the limit overshoots a collapsing
      // origin fourfold before the first cut would show it.
      if (rtt > (1 + (options_.tolerance - 1) / 2) * min_rtt_) slow_start_ = false;
      grow();
    }
  } else if (drop_share > 0.05) {
    cut(0.9);
  }
  limit_ = std::clamp(limit_, options_.min_limit, options_.max_limit);
  if (limit_ != before) {
    changed_at_ = now;
    last_change_was_cut_ = limit_ < before;
  }
  end_window(now);
}

// A cut of a tenth or more marks where the peak was passed (growth slows near it); a smaller
// one is the noise of a limit at its peak, and leaves the mark where it was.
void ConcurrencyLimit::cut(double factor) {
  if (factor <= 0.9) ceiling_ = limit_;
  slow_start_ = false;
  limit_ *= factor;
}

// As TCP grows its window: doubling until the first cut or the first sign of latency rising
// (slow start: 400 clients are let in within a quarter of a second), then by about its square
// root (Gradient2's queue allowance), and one at a time within a tenth of the limit of the last
// cut — the peak, most likely — where a step past the peak of a collapsing origin costs more
// than a step short of it. Past that band with latency still tolerated, the peak has moved (the
// origin got faster, or the cut was the noise of a busy proxy): square-root steps again, as
// CUBIC speeds up once past its old maximum, and well past it the mark is forgotten and the
// limit doubles.
void ConcurrencyLimit::grow() {
  if (ceiling_ > 0 && limit_ > 1.5 * ceiling_) {
    ceiling_ = 0;
    slow_start_ = true;
  }
  if (slow_start_) {
    limit_ *= 2;
    return;
  }
  const double step = std::max(1.0, std::sqrt(limit_));
  const bool near_peak = ceiling_ > 0 && limit_ + step > 0.9 * ceiling_ && limit_ < 1.1 * ceiling_;
  limit_ += near_peak ? 1.0 : step;
}

void ConcurrencyLimit::end_probe(double now) {
  if (probe_count_ > 0) min_rtt_ = probe_sum_ / static_cast<double>(probe_count_);
  probing_ = false;
  limit_ = limit_before_probe_;
  changed_at_ = now;
  last_change_was_cut_ = false;
  next_probe_ = now + options_.probe_every;
  end_window(now);
}

void ConcurrencyLimit::end_window(double now) {
  window_start_ = now;
  rtt_sum_ = 0;
  samples_ = 0;
  drops_ = 0;
  stale_sum_ = 0;
  stale_ = 0;
}

}  // namespace proxy
