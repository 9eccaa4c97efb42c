// What stage 4's poller measures, and what it does with it: the sample PoolSizer gets each
// interval (pool_sizer.h), GET /metrics (metrics.h) and the stats line. The poller and its
// workers are in tuned_server.cpp.
#include <chrono>
#include <string>

#include "tuned_server.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void TunedServer::resize_pool(Clock::time_point now, bool urgent) {
  if (!config_.workers_auto) return;
  const auto since = now - last_resize_;
  if (since < config_.auto_interval && !(urgent && since >= Millis{kTickMs})) return;
  const std::uint64_t requests = worker_requests_.load(std::memory_order_relaxed);
  const std::uint64_t nanoseconds = worker_nanoseconds_.load(std::memory_order_relaxed);
  const std::uint64_t shed = shed_.load(std::memory_order_relaxed);
  PoolSample sample;
  sample.seconds = seconds(since);
  sample.completed = requests - last_worker_requests_;
  sample.busy_seconds = static_cast<double>(nanoseconds - last_worker_nanoseconds_) / 1e9;
  sample.busy_average = busy_ticks_ > 0 ? busy_sum_ / static_cast<double>(busy_ticks_) : 0;
  sample.busy_now = pool_.busy();
  sample.queued = pool_.queued();
  sample.oldest_wait = oldest_wait(now);
  sample.shed = shed - last_shed_;
  last_worker_requests_ = requests;
  last_worker_nanoseconds_ = nanoseconds;
  last_shed_ = shed;
  last_resize_ = now;
  busy_sum_ = 0;
  busy_ticks_ = 0;
  const std::size_t next = sizer_.next(pool_.target(), sample);
  if (next != pool_.target()) pool_.resize(next);
}

std::string TunedServer::metrics_text() const {
  MetricsSnapshot m;
  m.requests = server_.stats().requests.load(std::memory_order_relaxed);
  m.errors = server_.stats().errors.load(std::memory_order_relaxed);
  m.cache = server_.cache().stats();
  m.queue_depth = pool_.queued();
  m.queue_capacity = pool_.queue_capacity();
  m.queue_delay_seconds = oldest_wait(Clock::now());
  m.busy_workers = pool_.busy();
  m.total_workers = pool_.worker_count();
  m.min_workers = sizer_.options().min_workers;
  m.max_workers = sizer_.options().max_workers;
  m.shed = shed_.load(std::memory_order_relaxed);
  m.open_connections = open_.load(std::memory_order_relaxed);
  // A connection whose miss waits on its origin is the poller's, but not between requests.
  const std::size_t held = parked_count_.load(std::memory_order_relaxed);
  m.misses_waiting = misses_waiting_.load(std::memory_order_relaxed);
  m.idle_connections = held > m.misses_waiting ? held - m.misses_waiting : 0;
  m.poller_misses = poller_misses_.load(std::memory_order_relaxed);
  m.idle_closed = idle_closed_.load(std::memory_order_relaxed);
  m.head_timeouts = head_timeouts_.load(std::memory_order_relaxed);
  m.tunnels_open = server_.stats().tunnels_open.load(std::memory_order_relaxed);
  m.origin_connects = server_.stats().origin_connects.load(std::memory_order_relaxed);
  m.origin_retries = server_.stats().origin_retries.load(std::memory_order_relaxed);
  if (origin_pool_) {
    m.origin_reused = origin_pool_->counters().reused;
    m.origin_idle = origin_pool_->idle();
  }
  m.origins = gates_.views();
  m.latency = latency_.snapshot();
  return render_prometheus(m);
}

std::string TunedServer::stats_text() const {
  std::string text = "workers=" + std::to_string(pool_.target());
  if (config_.workers_auto) {
    text += " (auto " + std::to_string(config_.min_workers) + ".." +
            std::to_string(config_.max_workers) + ")";
  }
  return text + " queue=" + std::to_string(config_.queue) +
         " shed=" + std::to_string(shed_.load()) +
         " peak_queued=" + std::to_string(pool_.peak_queued()) +
         " max_tunnels=" + std::to_string(options_.max_tunnels) +
         " origin_connects=" + std::to_string(server_.stats().origin_connects.load()) +
         " origin_reused=" + std::to_string(origin_pool_ ? origin_pool_->counters().reused : 0) +
         " poller_misses=" + std::to_string(poller_misses_.load()) + " origin_limit=" +
         (!config_.origin_limit            ? std::string("off")
          : config_.origin_limit_fixed > 0 ? std::to_string(config_.origin_limit_fixed)
                                           : std::string("auto"));
}

}  // namespace proxy
