#include "metrics.h"

#include <cstdio>

namespace proxy {

void LatencyHistogram::observe(std::chrono::nanoseconds elapsed) noexcept {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  std::size_t bucket = 0;
  while (bucket < kBoundsSeconds.size() && seconds > kBoundsSeconds[bucket]) ++bucket;
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  const auto ns = elapsed.count() < 0 ? 0 : static_cast<std::uint64_t>(elapsed.count());
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::snapshot() const noexcept {
  Snapshot s;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  // The count is the +Inf bucket, so that `_count == _bucket{le="+Inf"}` holds in every
  // snapshot, as Prometheus requires, even while requests finish during the read.
  s.count = running;
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

namespace {

std::string number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, const char* name, const char* type, const char* help,
            std::uint64_t value) {
  family(out, name, type, help);
  out.append(name).append(" ").append(std::to_string(value)).append("\n");
}

void sample_real(std::string& out, const char* name, const char* type, const char* help,
                 double value) {
  family(out, name, type, help);
  out.append(name).append(" ").append(number(value)).append("\n");
}

}  // namespace

std::string render_prometheus(const MetricsSnapshot& m) {
  std::string out;
  out.reserve(4096);
  sample(out, "proxy_requests_total", "counter", "Request heads read, valid or not.", m.requests);
  sample(out, "proxy_errors_total", "counter",
         "Responses the proxy generated itself (4xx and 5xx, 503s included).", m.errors);
  sample(out, "proxy_cache_hits_total", "counter", "Requests answered from the cache.",
         m.cache.hits);
  sample(out, "proxy_cache_misses_total", "counter", "Cache lookups that found nothing.",
         m.cache.misses);
  sample(out, "proxy_cache_evictions_total", "counter", "Entries evicted to make room.",
         m.cache.evictions);
  sample(out, "proxy_cache_bytes", "gauge", "Bytes held by the cache (key, head and body).",
         m.cache.bytes);
  sample(out, "proxy_cache_entries", "gauge", "Entries held by the cache.", m.cache.entries);
  sample(out, "proxy_queue_depth", "gauge", "Requests waiting for a worker (each on its connection).",
         m.queue_depth);
  sample(out, "proxy_queue_capacity", "gauge",
         "Most requests that may wait for a worker; past it, load is shed with 503.",
         m.queue_capacity);
  sample_real(out, "proxy_queue_delay_seconds", "gauge",
         "How long the request waiting longest for a worker has waited (CoDel's measure).",
         m.queue_delay_seconds);
  sample(out, "proxy_workers_busy", "gauge", "Workers serving a request now.", m.busy_workers);
  sample(out, "proxy_workers_total", "gauge", "Worker threads alive now.", m.total_workers);
  sample(out, "proxy_workers_min", "gauge", "Lower bound of the pool size.", m.min_workers);
  sample(out, "proxy_workers_max", "gauge", "Upper bound of the pool size.", m.max_workers);
  sample(out, "proxy_shed_total", "counter",
         "Requests refused with 503 and Retry-After (queueing delay, queue full, connection cap).",
         m.shed);
  sample(out, "proxy_connections_open", "gauge", "Client connections open now.",
         m.open_connections);
  sample(out, "proxy_connections_idle", "gauge",
         "Open client connections parked in epoll between requests.", m.idle_connections);
  sample(out, "proxy_connections_idle_closed_total", "counter",
         "Client connections closed by the idle timeout.", m.idle_closed);
  sample(out, "proxy_request_head_timeouts_total", "counter",
         "Request heads not complete within the client timeout, answered 408 by the poller.",
         m.head_timeouts);
  sample(out, "proxy_poller_misses_total", "counter",
         "Misses the poller sent to a kept origin connection and relayed whole, without a "
         "worker.",
         m.poller_misses);
  sample(out, "proxy_poller_misses_waiting", "gauge",
         "Misses the poller has sent and waits on their origin for now.", m.misses_waiting);
  sample(out, "proxy_tunnels_open", "gauge", "CONNECT tunnels open now.", m.tunnels_open);
  sample(out, "proxy_origin_connections_opened_total", "counter",
         "Connections opened to origins (CONNECT tunnels not counted).", m.origin_connects);
  sample(out, "proxy_origin_connections_reused_total", "counter",
         "Requests sent on a kept origin connection instead of a new one.", m.origin_reused);
  sample(out, "proxy_origin_requests_retried_total", "counter",
         "Requests sent again on a new connection after a kept one closed unanswered.",
         m.origin_retries);
  sample(out, "proxy_origin_connections_idle", "gauge",
         "Origin connections kept open between requests now.", m.origin_idle);

  // One sample per origin, labelled by it: what its limit is and what it does with it.
  const auto per_origin = [&](const char* name, const char* type, const char* help, auto value_of) {
    family(out, name, type, help);
    for (const OriginGateView& origin : m.origins) {
      out.append(name).append("{origin=\"").append(origin.key).append("\"} ");
      out.append(value_of(origin)).append("\n");
    }
  };
  per_origin("proxy_origin_limit", "gauge",
             "Requests allowed in flight to this origin at once (--origin-limit).",
             [](const OriginGateView& o) { return std::to_string(o.limit); });
  per_origin("proxy_origin_in_flight", "gauge", "Requests in flight to this origin now.",
             [](const OriginGateView& o) { return std::to_string(o.in_flight); });
  per_origin("proxy_origin_waiting", "gauge",
             "Requests waiting on the poller for this origin's limit now.",
             [](const OriginGateView& o) { return std::to_string(o.waiting); });
  per_origin("proxy_origin_queue_delay_seconds", "gauge",
             "How long the oldest request waiting for this origin's limit has waited.",
             [](const OriginGateView& o) { return number(o.queue_delay_seconds); });
  per_origin("proxy_origin_min_rtt_seconds", "gauge",
             "The unloaded latency the limit compares with (re-measured every 30 s).",
             [](const OriginGateView& o) { return number(o.min_rtt_seconds); });
  per_origin("proxy_origin_rtt_seconds", "gauge",
             "Mean latency of this origin's requests in the limit's last window.",
             [](const OriginGateView& o) { return number(o.rtt_seconds); });

  const char* latency = "proxy_request_duration_seconds";
  family(out, latency, "histogram",
         "Time from reading a request's head to the end of its response, for every request read "
         "(hits answered on the poller included).");
  for (std::size_t i = 0; i < m.latency.cumulative.size(); ++i) {
    const std::string le =
        i < LatencyHistogram::kBoundsSeconds.size() ? number(LatencyHistogram::kBoundsSeconds[i])
                                                    : "+Inf";
    out.append(latency).append("_bucket{le=\"").append(le).append("\"} ");
    out.append(std::to_string(m.latency.cumulative[i])).append("\n");
  }
  out.append(latency).append("_sum ").append(number(m.latency.sum_seconds)).append("\n");
  out.append(latency).append("_count ").append(std::to_string(m.latency.count)).append("\n");
  return out;
}

}  // namespace proxy
