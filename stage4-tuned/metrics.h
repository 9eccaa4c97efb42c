// What `GET /metrics` reports: a latency histogram that workers update without a lock, and the
// Prometheus text exposition format (version 0.0.4) that renders one snapshot of the proxy.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/cache.h"
#include "origin_gates.h"

namespace proxy {

/// Request latencies in fixed buckets, as a Prometheus histogram: cumulative bucket counts,
/// a sum in seconds and a count. Bounds run from 0.5 ms (a hit) to 10 s (a slow origin).
/// Thread-safety: observe() and snapshot() from any thread (relaxed atomics: a snapshot taken
/// during traffic may be off by the requests finishing while it is read, never torn per field).
class LatencyHistogram {
 public:
  /// Upper bounds of the buckets, in seconds; a last, implicit bucket is +Inf.
  static constexpr std::array<double, 14> kBoundsSeconds{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

  /// Counts one request that took `elapsed`.
  void observe(std::chrono::nanoseconds elapsed) noexcept;

  struct Snapshot {
    std::array<std::uint64_t, kBoundsSeconds.size() + 1> cumulative{};  ///< last is +Inf
    double sum_seconds = 0;
    std::uint64_t count = 0;
  };
  [[nodiscard]] Snapshot snapshot() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, kBoundsSeconds.size() + 1> buckets_{};  // not cumulative
  std::atomic<std::uint64_t> sum_ns_{0};
  std::atomic<std::uint64_t> count_{0};
};

/// One moment of the proxy, everything /metrics reports.
struct MetricsSnapshot {
  std::uint64_t requests = 0;         ///< request heads read (ProxyStats::requests)
  std::uint64_t errors = 0;           ///< responses the proxy made itself (4xx/5xx, 503s included)
  CacheStats cache;                   ///< hits, misses, evictions, bytes, entries
  std::size_t queue_depth = 0;        ///< connections waiting for a worker
  std::size_t queue_capacity = 0;
  double queue_delay_seconds = 0;     ///< age of the request waiting longest for a worker
  std::size_t busy_workers = 0;
  std::size_t total_workers = 0;
  std::size_t min_workers = 0;        ///< bounds of --workers auto (both = N when fixed)
  std::size_t max_workers = 0;
  std::uint64_t shed = 0;             ///< refused with 503 (queueing delay, full queue, cap)
  std::size_t open_connections = 0;   ///< client connections open now
  std::size_t idle_connections = 0;   ///< of those, parked in epoll waiting for a request
  std::uint64_t idle_closed = 0;      ///< closed by the idle timeout
  std::uint64_t head_timeouts = 0;    ///< request heads answered 408 by the poller
  std::uint64_t poller_misses = 0;    ///< misses the poller relayed without a worker
  std::uint64_t misses_waiting = 0;   ///< misses the poller sent, waiting on their origin now
  std::size_t tunnels_open = 0;       ///< CONNECT tunnels open now
  std::uint64_t origin_connects = 0;  ///< origin connections opened (ProxyStats)
  std::uint64_t origin_reused = 0;    ///< requests sent on a kept origin connection
  std::uint64_t origin_retries = 0;   ///< requests sent again after a kept one closed unanswered
  std::size_t origin_idle = 0;        ///< origin connections kept idle now
  std::vector<OriginGateView> origins;  ///< each origin's concurrency limit (origin_gates.h)
  LatencyHistogram::Snapshot latency;
};

/// Renders `m` in the Prometheus text format: a `# HELP` and `# TYPE` line per metric family,
/// names prefixed `proxy_`, counters ending in `_total`, the histogram as `_bucket{le=...}`,
/// `_sum` and `_count`. Ends with a newline.
std::string render_prometheus(const MetricsSnapshot& m);

}  // namespace proxy
