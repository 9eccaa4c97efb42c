// The one proxy transaction every stage runs, unchanged: read the request, look it up in the
// cache, fetch from the origin on a miss, relay the response and maybe store it.
#pragma once

#include <atomic>
#include <cstdint>

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
};

/// Counters shared by every connection of a process. Thread-safe (atomics; relaxed order is
/// enough because they are only ever summed for the stats line).
struct ProxyStats {
  std::atomic<std::uint64_t> requests{0};  ///< requests read completely, valid or not
  std::atomic<std::uint64_t> errors{0};    ///< responses the proxy generated itself (4xx/5xx)
};

/// Serves one client connection: one request, one response, then close (HTTP/1.1 with
/// `Connection: close`). Every response carries `X-Cache: HIT` or `X-Cache: MISS`. Errors are
/// answered with a status and a one-line log: 400 malformed, 408 request head too slow,
/// 414/431 too long, 501 a method other than GET or a scheme other than http, 505 an HTTP
/// version other than 1.x, 502 origin unreachable or malformed, 504 origin timeout. A response is
/// stored only when it is complete, status 200, answers a GET and fits max_object_bytes().
/// Bodies are streamed, never held whole unless they may be stored.
/// Thread-safety: safe to run concurrently on different sockets when `cache` is thread-safe.
/// Never throws for I/O or protocol errors; may throw std::bad_alloc.
void serve_connection(Socket client, Cache& cache, const ProxyOptions& options,
                      ProxyStats& stats);

}  // namespace proxy
