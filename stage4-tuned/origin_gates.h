// A concurrency limit toward each origin (concurrency_limit.h), kept for stage 4's poller and
// workers: a request to an origin runs only while it holds one of that origin's permits, and a
// request past the limit waits on the poller, holding no thread (tuned_server.h). The study's
// lesson made a rule: optimal concurrency for I/O-bound work is bounded by the downstream
// bottleneck, and past the peak more concurrency makes things worse — so the proxy finds each
// origin's peak and sends it no more than that, whatever the number of clients or workers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "concurrency_limit.h"

namespace proxy {

class OriginGates;

/// One origin's limit and the requests it has in flight. Its fields are OriginGates's.
struct OriginGate {
  explicit OriginGate(std::string key_, const ConcurrencyLimitOptions& options)
      : key(std::move(key_)), limit(options) {}
  const std::string key;  ///< "host:port"
  // Guarded by OriginGates::mutex_.
  ConcurrencyLimit limit;
  std::size_t in_flight = 0;
  std::size_t waiting = 0;  ///< requests waiting for a permit (the poller counts them here)
  bool refused = false;     ///< a permit was refused since the last tick: the limit is reached
  double queue_delay = 0;   ///< how long the oldest waiting request has waited, seconds
  std::chrono::steady_clock::time_point last_used{};
};

/// The right to have one request in flight to an origin. Move-only; destroying it gives the
/// permit back without a latency sample (a request dropped or refused); finish() gives it back
/// with one. Used on one thread at a time (it moves with its connection).
class OriginPermit {
 public:
  OriginPermit() = default;
  OriginPermit(OriginPermit&& other) noexcept;
  OriginPermit& operator=(OriginPermit&& other) noexcept;
  OriginPermit(const OriginPermit&) = delete;
  OriginPermit& operator=(const OriginPermit&) = delete;
  ~OriginPermit() { give_back(false, false); }

  /// True while it holds a permit.
  explicit operator bool() const noexcept { return gates_ != nullptr; }
  /// The request's latency runs from now: a worker starts it after its time in the worker
  /// queue, which is the proxy's, not the origin's.
  void restart() noexcept { started_ = std::chrono::steady_clock::now(); }
  /// The request got its answer (`ok`), or the origin failed it (a 5xx, a timeout): gives the
  /// permit back with its latency for the controller — `origin_took` when the caller measured
  /// the origin's own (origin_latency: kernel receive stamps), else the time since restart().
  void finish(bool ok = true,
              std::optional<std::chrono::nanoseconds> origin_took = std::nullopt) noexcept {
    if (origin_took) finished_ = started_ + *origin_took;
    give_back(true, !ok);
  }

 private:
  friend class OriginGates;
  OriginPermit(OriginGates* gates, std::shared_ptr<OriginGate> gate);
  void give_back(bool sample, bool drop) noexcept;

  OriginGates* gates_ = nullptr;
  std::shared_ptr<OriginGate> gate_;
  std::chrono::steady_clock::time_point started_{};
  std::chrono::steady_clock::time_point finished_{};  // set by finish() when measured; else now
  std::uint64_t probe_ticket_ = 0;  // ConcurrencyLimit::on_start's, handed back with the sample
};

/// Whether a response's status says its origin failed it — 502 (unreachable or malformed), 503
/// (overloaded) or 504 (timed out), RFC 9110 §15.6 — the limit's signal that fails fast where
/// latency would show nothing (ConcurrencyLimit::on_drop).
inline bool origin_failed(int status) noexcept {
  return status == 502 || status == 503 || status == 504;
}

/// What /metrics shows of one origin.
struct OriginGateView {
  std::string key;
  std::size_t limit = 0;
  std::size_t in_flight = 0;
  std::size_t waiting = 0;
  double queue_delay_seconds = 0;
  double min_rtt_seconds = 0;
  double rtt_seconds = 0;
};

/// Every origin's gate. Thread-safe: the poller admits and ticks, workers give permits back.
class OriginGates {
 public:
  /// `fixed` > 0: every origin's limit is that, never adapted (--origin-limit N). `wake` is
  /// called (from any thread) when a permit comes back to an origin with requests waiting, so
  /// the poller admits the next one; it must not block.
  OriginGates(ConcurrencyLimitOptions options, std::size_t fixed, std::function<void()> wake);

  /// The gate of origin `key` ("host:port"), made on first use. Poller only.
  std::shared_ptr<OriginGate> gate(std::string_view key);
  /// A permit when the origin has fewer than its limit in flight; else nullopt, and the gate
  /// counts as saturated for this tick.
  std::optional<OriginPermit> try_acquire(const std::shared_ptr<OriginGate>& gate);
  /// The poller's count of requests waiting for this gate changed by `delta`.
  void add_waiting(OriginGate& gate, long delta);
  /// The poller's reading of how long the oldest request has waited for this gate (seconds).
  void set_queue_delay(OriginGate& gate, double seconds);
  /// Every tick (the poller's housekeeping): each limit judges its window; gates unused for a
  /// minute with nothing in flight are forgotten.
  void tick(std::chrono::steady_clock::time_point now);
  /// Each origin's state, for /metrics. Any thread.
  [[nodiscard]] std::vector<OriginGateView> views() const;
  /// No more wake-ups (the poller is going away). Any thread.
  void stop_waking();

 private:
  friend class OriginPermit;
  void release(OriginGate& gate, std::chrono::steady_clock::time_point started,
               std::chrono::steady_clock::time_point finished, std::uint64_t probe_ticket,
               bool sample, bool drop) noexcept;

  const ConcurrencyLimitOptions options_;
  const std::size_t fixed_;
  const std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;  // guards gates_, wake_ and every OriginGate's guarded fields
  std::unordered_map<std::string, std::shared_ptr<OriginGate>> gates_;
  std::function<void()> wake_;
};

}  // namespace proxy
