#include "poller/origin_pool.h"

#include <iterator>
#include <stdexcept>

namespace proxy {

OriginPool::OriginPool(OriginPoolLimits limits) : limits_(limits) {
  if (limits_.per_origin == 0 || limits_.total == 0) {
    throw std::invalid_argument("origin pool bounds must be at least 1");
  }
  if (limits_.idle_timeout <= Millis{0}) {
    throw std::invalid_argument("origin pool idle timeout must be positive");
  }
}

std::string OriginPool::key(std::string_view host, std::uint16_t port) {
  std::string out(host);
  out += ':';
  out += std::to_string(port);
  return out;
}

std::size_t OriginPool::take_expired(std::deque<Idle>& list, Clock::time_point now,
                                     std::deque<Idle>& out) {
  std::size_t n = 0;
  while (!list.empty() && now - list.front().since >= limits_.idle_timeout) {
    out.push_back(std::move(list.front()));
    list.pop_front();
    ++n;
  }
  total_idle_ -= n;
  counters_.closed_idle += n;
  return n;
}

std::optional<Socket> OriginPool::acquire(std::string_view host, std::uint16_t port,
                                          Clock::time_point now) {
  const std::string k = key(host, port);
  for (;;) {
    std::deque<Idle> closing;  // closed after the lock is released, by its destructor
    std::optional<Socket> candidate;
    {
      std::lock_guard lock(mutex_);
      auto it = idle_.find(k);
      if (it == idle_.end()) return std::nullopt;
      take_expired(it->second, now, closing);
      if (!it->second.empty()) {
        candidate = std::move(it->second.back().socket);
        it->second.pop_back();
        --total_idle_;
      }
      if (it->second.empty()) idle_.erase(it);
    }
    if (!candidate) return std::nullopt;
    // Checked outside the lock: a poll is a system call, and other workers want the pool.
    if (idle_connection_usable(*candidate)) {
      std::lock_guard lock(mutex_);
      ++counters_.reused;
      return candidate;
    }
    {
      std::lock_guard lock(mutex_);
      ++counters_.closed_stale;
    }
    // The origin closed that one; an older one may have survived. Loop: bounded by the pool.
  }
}

bool OriginPool::release(std::string_view host, std::uint16_t port, Socket connection,
                         Clock::time_point now) {
  std::deque<Idle> closing;
  const std::string k = key(host, port);
  std::lock_guard lock(mutex_);
  std::deque<Idle>& list = idle_[k];
  take_expired(list, now, closing);
  if (list.size() >= limits_.per_origin || total_idle_ >= limits_.total) {
    ++counters_.refused_full;
    if (list.empty()) idle_.erase(k);
    // `connection` closes when this returns, after the lock guard (declared later) lets go.
    closing.push_back(Idle{std::move(connection), now});
    return false;
  }
  list.push_back(Idle{std::move(connection), now});
  ++total_idle_;
  ++counters_.kept;
  return true;
}

std::size_t OriginPool::close_idle(Clock::time_point now) {
  std::deque<Idle> closing;
  std::size_t n = 0;
  {
    std::lock_guard lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end();) {
      n += take_expired(it->second, now, closing);
      it = it->second.empty() ? idle_.erase(it) : std::next(it);
    }
  }
  return n;  // `closing` closes its sockets here, the lock released
}

std::size_t OriginPool::idle(std::string_view host, std::uint16_t port) const {
  std::lock_guard lock(mutex_);
  auto it = idle_.find(key(host, port));
  return it == idle_.end() ? 0 : it->second.size();
}

std::size_t OriginPool::idle() const {
  std::lock_guard lock(mutex_);
  return total_idle_;
}

OriginPoolCounters OriginPool::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

bool may_retry_on_new_connection(std::string_view method, bool connection_was_reused,
                                 bool response_byte_seen, bool body_held_whole,
                                 int retries_so_far) noexcept {
  if (!connection_was_reused || response_byte_seen || !body_held_whole || retries_so_far > 0) {
    return false;
  }
  return is_idempotent(method);  // CONNECT never reaches an origin pool
}

bool is_idempotent(std::string_view method) noexcept {
  for (std::string_view idempotent : {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"}) {
    if (method == idempotent) return true;
  }
  return false;
}

bool idle_connection_usable(const Socket& connection) noexcept {
  if (connection.fd() < 0) return false;
  // Not readable: the origin has said nothing, as it should between responses. Readable means
  // end of stream, an error, or unasked-for bytes — none of which a request can follow.
  return !connection.readable_now();
}

}  // namespace proxy
