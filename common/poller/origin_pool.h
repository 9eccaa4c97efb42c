// Persistent origin connections, kept between requests and handed to the next request for the
// same origin (RFC 9112 §9.3): the shared core offers it, and a stage turns it on. Off by
// default — stages 1 to 3 keep one request per origin connection, as their lessons assume.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "net/socket.h"

namespace proxy {

/// How many idle origin connections an OriginPool keeps, and for how long.
struct OriginPoolLimits {
  std::size_t per_origin = 8;  ///< idle connections kept per host:port
  std::size_t total = 256;     ///< idle connections kept in all (each is a descriptor)
  /// An idle connection older than this is closed, never handed out: origins close idle
  /// connections after their own timeout (nginx: 60 s, Apache: 5 s), and a request sent on one
  /// they are closing meets a reset.
  Millis idle_timeout{4000};
};

/// What an OriginPool did since it was made. Counts, not gauges.
struct OriginPoolCounters {
  std::uint64_t reused = 0;        ///< acquire() handed out a kept connection
  std::uint64_t kept = 0;          ///< release() kept a connection
  std::uint64_t refused_full = 0;  ///< release() closed one: its origin's or the total bound
  std::uint64_t closed_idle = 0;   ///< closed past the idle timeout
  std::uint64_t closed_stale = 0;  ///< closed at acquire(): the origin had closed it or sent bytes
};

/// Idle persistent connections to origins, keyed by host:port.
///
/// A connection is released only by a caller that read a complete response whose framing let
/// the connection go on (RFC 9112 §9.3: HTTP/1.1, no `Connection: close`, a Content-Length or
/// chunked body, not one delimited by the close). acquire() hands out the most recently
/// released one first (the least likely to have been closed by the origin) after checking that
/// the origin has not closed it meanwhile; a request that still finds it closed before any
/// response byte may be retried once on a new connection when may_retry_on_new_connection says
/// so.
///
/// Thread-safety: every member may be called from any thread at once. No socket is closed and
/// no I/O happens while the lock is held.
class OriginPool {
 public:
  using Clock = std::chrono::steady_clock;

  /// Throws std::invalid_argument when a bound is 0 or the idle timeout is not positive.
  explicit OriginPool(OriginPoolLimits limits = {});

  /// A kept connection to host:port, or nullopt when there is none fit to use (the caller then
  /// connects). Connections past the idle timeout, or that the origin closed or wrote to while
  /// idle, are closed on the way.
  std::optional<Socket> acquire(std::string_view host, std::uint16_t port,
                                Clock::time_point now = Clock::now());

  /// Keeps `connection` for host:port, or closes it when that origin already has
  /// `per_origin` idle connections or the pool `total`. Returns true when kept.
  bool release(std::string_view host, std::uint16_t port, Socket connection,
               Clock::time_point now = Clock::now());

  /// Closes every connection idle longer than the timeout; returns how many. For an owner's
  /// periodic housekeeping: acquire() and release() only prune the origin they touch.
  std::size_t close_idle(Clock::time_point now = Clock::now());

  /// Idle connections held now, for host:port or in all.
  [[nodiscard]] std::size_t idle(std::string_view host, std::uint16_t port) const;
  [[nodiscard]] std::size_t idle() const;
  [[nodiscard]] OriginPoolCounters counters() const;
  [[nodiscard]] const OriginPoolLimits& limits() const noexcept { return limits_; }

 private:
  struct Idle {
    Socket socket;
    Clock::time_point since;
  };
  static std::string key(std::string_view host, std::uint16_t port);
  // Moves the expired connections of `list` (oldest first) to `out`. Called under mutex_.
  std::size_t take_expired(std::deque<Idle>& list, Clock::time_point now, std::deque<Idle>& out);

  const OriginPoolLimits limits_;
  mutable std::mutex mutex_;  // guards idle_, total_idle_, counters_
  std::unordered_map<std::string, std::deque<Idle>> idle_;  // back = most recently released
  std::size_t total_idle_ = 0;
  OriginPoolCounters counters_;
};

/// The idempotent methods (RFC 9110 §9.2.2): GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
/// Case-sensitive, as methods are (§9.1).
bool is_idempotent(std::string_view method) noexcept;

/// True when a request whose kept (reused) connection turned out closed before any byte of a
/// response arrived may be sent again on a new connection: only an idempotent method (RFC 9110
/// §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE) whose body the proxy still holds whole, and
/// only once (RFC 9112 §9.3.1: a proxy must not retry a non-idempotent request on its own).
bool may_retry_on_new_connection(std::string_view method, bool connection_was_reused,
                                 bool response_byte_seen, bool body_held_whole,
                                 int retries_so_far) noexcept;

/// True when a connection is still alive for reuse after its idle time: nothing to read, no
/// end of stream, no error (a readable idle origin connection is one the origin closed, or one
/// carrying bytes no request asked for). Never blocks.
bool idle_connection_usable(const Socket& connection) noexcept;

}  // namespace proxy
