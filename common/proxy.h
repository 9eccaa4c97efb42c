// The one proxy transaction every stage runs, unchanged: read the request, look it up in the
// cache, fetch from the origin on a miss, relay the response and maybe store it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "cache.h"
#include "http_message.h"
#include "socket.h"

namespace proxy {

/// Deadlines and limits of one transaction. Times in milliseconds.
struct ProxyOptions {
  Millis client_timeout{10'000};   ///< for the whole request head (408 if it started, else close)
  Millis connect_timeout{5'000};   ///< connecting to the origin (504 when exceeded)
  Millis origin_timeout{30'000};   ///< waiting for each read from the origin (504 before any byte)
  Millis write_timeout{30'000};    ///< waiting for a peer to accept bytes we send
  RequestLimits limits;            ///< request head limits (414, 431)
  /// Persistent connections (RFC 9112 §9.3): when true, serve_request leaves a connection open
  /// after a response whose end the client can see (Content-Length or chunked), unless the
  /// request asked for close, was HTTP/1.0 without `Connection: keep-alive`, or carried a body.
  /// Off for stages 1-3: one request per connection is part of their lesson.
  bool keep_alive = false;
  /// Heuristic freshness (RFC 9111 §4.2.2) for a 200 without max-age, s-maxage or Expires:
  /// 10% of its Date − Last-Modified, at most this long, or this long without Last-Modified.
  /// Generous by default because most small origins (the harness's /bytes/N, Proxy Lab's tiny)
  /// send no freshness at all, and the course's cache relies on storing them. 0 stores only
  /// responses with explicit freshness. See cache_policy.h for every caching rule.
  std::chrono::seconds heuristic_freshness{86'400};
  /// When set, an origin-form `GET /metrics` addressed to the proxy itself is answered 200 with
  /// this function's result as `text/plain; version=0.0.4` (Prometheus text format). Called on
  /// the serving thread, so it must be thread-safe.
  std::function<std::string()> metrics;
};

/// Counters shared by every connection of a process. Thread-safe (atomics; relaxed order is
/// enough because they are only ever summed for the stats line).
struct ProxyStats {
  std::atomic<std::uint64_t> requests{0};  ///< requests read completely, valid or not
  std::atomic<std::uint64_t> errors{0};    ///< responses the proxy generated itself (4xx/5xx)
};

/// A client connection that may carry several requests: the socket, the peer's address (taken
/// once: a reset peer has none later) and request bytes read past the last request (the next
/// pipelined request, RFC 9112 §9.3.2). Move-only; owned by one thread at a time.
class ClientConnection {
 public:
  /// Takes ownership of a connected client socket.
  explicit ClientConnection(Socket socket);
  [[nodiscard]] const Socket& socket() const noexcept { return socket_; }
  [[nodiscard]] const std::string& peer() const noexcept { return peer_; }
  /// True when bytes of a next request are already buffered, so the connection must be served
  /// again without waiting for it to become readable.
  [[nodiscard]] bool has_buffered() const noexcept { return !buffered_.empty(); }
  /// Requests read on this connection so far (complete heads, valid or not).
  [[nodiscard]] std::uint64_t requests() const noexcept { return requests_; }
  /// Gives up the socket (e.g. to answer it with reply_overloaded); the connection is empty.
  [[nodiscard]] Socket release() noexcept { return std::move(socket_); }

 private:
  friend bool serve_request(ClientConnection&, Cache&, const ProxyOptions&, ProxyStats&);
  Socket socket_;
  std::string peer_;
  std::string buffered_;
  std::uint64_t requests_ = 0;
};

/// Serves one request on `connection`, as serve_connection describes, and returns true when
/// the connection stays open for another request (options.keep_alive and a response whose end
/// the client can see); then any pipelined bytes stay buffered in `connection`. Returns false
/// after it has closed the connection (an orderly close, or a reset after a cut body).
/// A connection whose peer closed, or that stays silent for client_timeout, is closed quietly.
/// Thread-safety and errors: as serve_connection.
bool serve_request(ClientConnection& connection, Cache& cache, const ProxyOptions& options,
                   ProxyStats& stats);

/// Serves one client connection: serve_request until the connection closes. With
/// options.keep_alive false (stages 1-3) that is one request, one response, then close
/// (HTTP/1.1 with `Connection: close`). Every response carries `X-Cache: HIT` or `X-Cache: MISS`. Errors are
/// answered with a status and a one-line log: 400 malformed, 408 request head too slow,
/// 414/431 too long, 501 a method other than GET or a scheme other than http, 505 an HTTP
/// version other than 1.x, 502 origin unreachable or malformed, 504 origin timeout. A response is
/// stored only when it is complete, status 200, answers a GET, fits max_object_bytes() and
/// RFC 9111 allows it (cache_policy.h). A stored response is served only while fresh, with an
/// Age field; a stale one with a validator is revalidated, and a 304 serves it as a HIT.
/// Bodies are streamed, never held whole unless they may be stored.
/// Thread-safety: safe to run concurrently on different sockets when `cache` is thread-safe.
/// Never throws for I/O or protocol errors; may throw std::bad_alloc.
void serve_connection(Socket client, Cache& cache, const ProxyOptions& options,
                      ProxyStats& stats);

}  // namespace proxy
