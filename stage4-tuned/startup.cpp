// How stage 4 starts, takes connections and stops: its options fitted to what the machine allows
// (machine_limits.h), the pool, the sizer, the shedder and the origin gates built from the command
// line, the epoll set and eventfd the poller waits on (tuned_server.cpp runs them), and accept.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "server/log.h"
#include "tuned_server.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

std::size_t initial_workers(const TunedConfig& config) {
  return config.workers_auto ? config.min_workers : config.workers;
}

PoolSizerOptions sizer_options(const TunedConfig& config) {
  PoolSizerOptions options;
  options.min_workers = config.workers_auto ? config.min_workers : config.workers;
  options.max_workers = config.workers_auto ? config.max_workers : config.workers;
  options.interval_seconds = std::chrono::duration<double>(config.auto_interval).count();
  options.queue_delay_target = std::chrono::duration<double>(config.shed_delay).count();
  return options;
}

QueueDelayOptions shedder_options(const TunedConfig& config) {
  return {std::chrono::duration<double>(config.shed_delay).count(),
          std::chrono::duration<double>(config.shed_interval).count()};
}

// Keeps --max-connections and the idle origin pool within what RLIMIT_NOFILE allows
// (machine_limits.h): past it accept fails with EMFILE and clients wait in the backlog
// unanswered; within it they get a 503 from the connection cap.
TunedConfig fit_to_descriptors(TunedConfig config) {
  const std::optional<DescriptorBudget> budget = descriptor_budget();
  if (!budget) return config;
  if (config.max_connections > budget->max_connections) {
    log_line("--max-connections " + std::to_string(config.max_connections) + " is more than " +
             "RLIMIT_NOFILE (" + std::to_string(budget->limit) + " descriptors) allows at two " +
             "per connection; using " + std::to_string(budget->max_connections));
    config.max_connections = budget->max_connections;
  }
  config.origin_limits.total = std::min(config.origin_limits.total, budget->origin_idle);
  config.origin_limits.per_origin =
      std::min(config.origin_limits.per_origin, config.origin_limits.total);
  return config;
}

}  // namespace

TunedServer::TunedServer(Server& server, const TunedConfig& config)
    : server_(server),
      config_(fit_to_descriptors(config)),
      options_(server.config().proxy),
      gates_(config.origin_limit_options, config.origin_limit_fixed, [this] { wake_poller(); }),
      sizer_(sizer_options(config), initial_workers(config)),
      shedder_(shedder_options(config)),
      tunnels_(server.stats(), server.config().proxy.tunnel_idle_timeout),
      pool_(
          initial_workers(config), config.queue, [this](Job job) { serve(std::move(job)); },
          [batch = config.batch_workers] { prepare_worker_thread(batch); }) {
  options_.keep_alive = true;
  options_.drop_abandoned = true;
  options_.adopt_tunnel = [this](EstablishedTunnel tunnel) { tunnels_.adopt(std::move(tunnel)); };
  options_.max_tunnels = config_.max_tunnels != 0
                             ? config_.max_tunnels
                             : std::max<std::size_t>(1, config_.max_connections / 2);
  options_.metrics = [this] { return metrics_text(); };
  if (config_.origin_limit) {
    options_.keep_abandoned = [](Socket origin) { hold_abandoned_origin(std::move(origin)); };
  }
  if (config_.origin_reuse) {
    origin_pool_.emplace(config_.origin_limits);
    options_.origin_pool = &*origin_pool_;
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    int error = errno;
    pool_.shutdown();
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw std::system_error(error, std::generic_category(), "epoll/eventfd");
  }
  started_ = last_resize_ = last_tick_ = next_408_log_ = Clock::now();
}

// Takes every pending connection (the listener is non-blocking), so one wakeup serves a burst.
void TunedServer::accept_ready() {
  for (;;) {
    bool exhausted = false;
    std::optional<Socket> socket = server_.try_accept(exhausted);
    if (!socket) {
      if (exhausted) {
        // The connection stays in the backlog and epoll would report it again at once: stop
        // listening for a moment instead of spinning.
        log_line(std::string("accept: ") + std::strerror(errno) + "; pausing accepts for 100 ms");
        listening_paused_ = true;
        resume_listening_ = Clock::now() + Millis{100};
        epoll_control(epoll_fd_, EPOLL_CTL_MOD, server_.listener().fd(), 0);
      }
      return;
    }
    if (open_.load(std::memory_order_relaxed) >= config_.max_connections) {
      shed(std::move(*socket), "too many open connections (--max-connections)");
      continue;
    }
    open_.fetch_add(1, std::memory_order_relaxed);
    park(Client(ClientConnection(std::move(*socket)), open_));
  }
}

TunedServer::~TunedServer() {
  pool_.shutdown();
  gates_.stop_waking();
  returned_.clear();
  parked_.clear();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

}  // namespace proxy
