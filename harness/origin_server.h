// The scripted origin server: httpbin-style paths with deterministic bodies and scripted
// misbehaviour (delays, truncation, resets, stalls) for tests and benchmarks. Event-driven —
// one epoll loop per thread, non-blocking sockets, a timer heap for delays — so a thousand
// delayed requests cost a thousand heap entries, not a thousand threads, and the origin is
// never a benchmark's bottleneck unless `capacity` tells it to be.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "downstream.h"
#include "net/socket.h"

namespace harness {

/// The body of /bytes/N and friends: byte i is (i * 31 + 7) & 0xFF, so every byte value
/// (NUL included) appears and any shift or drop shows up when compared. Thread-safe.
std::string deterministic_bytes(std::size_t n);

/// How an OriginServer binds and behaves.
struct OriginOptions {
  std::string bind = "127.0.0.1";  ///< numeric address or resolvable name
  std::uint16_t port = 0;          ///< 0 picks a free port; read it back with port()
  int threads = 1;                 ///< epoll loop threads (at least 1)
  /// The downstream bottleneck's size: requests in service past which `overload` applies.
  /// 0 = unlimited (every law then serves every request at once with its plain delay).
  int capacity = 0;
  Overload overload = Overload::queue;  ///< what happens past `capacity` (downstream.h)
  int default_delay_ms = 0;  ///< latency added to every path except /__stats, in ms

  // ---- a static site for the browser check (tests/e2e/) ----
  /// When not empty, `/site/PATH` serves the file DIR/PATH (`/site/` and `/site/D/` serve
  /// index.html) with a Content-Type named by its extension and `Cache-Control: max-age=3600`,
  /// so a shared cache may store it (RFC 9111 §3). Read per request in the loop thread: meant
  /// for small test pages, not benchmarks. The constructor throws when DIR is not a directory.
  std::string site_dir{};
};

/// A scripted HTTP/1.1 origin. Paths (bodies deterministic, framed by Content-Length unless
/// said otherwise; HEAD gets the same head without the body):
///   /bytes/N              N deterministic_bytes, application/octet-stream
///   /delay/MS[/PATH]      waits MS ms, then answers PATH (or a short text); also ?delay_ms=MS
///   /stream-bytes/N       N bytes, chunked in 4 KiB chunks, one chunk extension, one trailer
///   /close/N              N bytes, no Content-Length, ends with the server's FIN
///   /truncate/N           promises N bytes, sends N/2, closes
///   /reset/N              promises N bytes, sends N/2, resets (RST)
///   /stall                reads the request, never answers (Proxy Lab's nop-server)
///   /status/CODE          that status; a short body except for 1xx/204/304 (1xx also closes)
///   /headers              the request's header lines exactly as received, text/plain
///   /anything[/...]       JSON echo {"method","target","headers","body","body_length"}; a body
///                         that is not UTF-8 has each bad byte replaced by U+FFFD
///   /cache/SECONDS        Cache-Control: max-age=SECONDS, ETag, Last-Modified; 304 on a
///                         matching If-None-Match
///   /no-store/N           N bytes with Cache-Control: no-store
///   /respond?h=NAME:VALUE&status=CODE  those fields (percent-decoded, repeatable) and status;
///                         body: the request's header lines; 304 when If-None-Match equals its
///                         ETag or If-Modified-Since its Last-Modified, h304=NAME:VALUE
///                         replacing fields on that 304 only (RFC 9111 tests)
///   /echo                 the request body exactly, application/octet-stream, any method;
///                         X-Echo-Method names the method received
///   /interim/CODE[/PATH]  an interim CODE response (100, or 103 with a Link field) first, then
///                         PATH's answer (or a short text)
///   /drop-next[/PATH]     PATH's answer (or a short text); the next request on the same
///                         connection is read, counted and dropped unanswered with a close
///   /__stats              {"/path": count, ...}, never delayed, never counted, no capacity slot
///   /__load[?law=L&capacity=K&reset_peak=1]  the downstream's state as JSON (law, capacity,
///                         in_service, peak_in_service, waiting), after changing the law or the
///                         capacity when given (400 for an unknown one); like /__stats otherwise
///   /site/PATH            the file PATH under OriginOptions::site_dir (when set), else 404
/// Anything else is 404; a malformed request gets 400 (or 414/431/505) and the connection
/// closes. Keep-alive and pipelining per RFC 9112 §9.3. Counting keys are paths without query.
/// A request is in service (holds its place under `capacity`) from dispatch until its response
/// is written or its connection closes; /stall holds one until the client hangs up. Past
/// `capacity`, `overload` decides (downstream.h): wait in FIFO order, thrash, or fail with 503.
///
/// Thread-safety: all public members may be called from any thread.
class OriginServer {
 public:
  /// Binds and starts serving on its own std::jthread(s). Throws std::runtime_error when the
  /// address cannot be bound or the loop resources (epoll, eventfd) cannot be created.
  explicit OriginServer(OriginOptions options = {});
  /// Stops (see stop()) and releases everything.
  ~OriginServer();
  OriginServer(const OriginServer&) = delete;
  OriginServer& operator=(const OriginServer&) = delete;

  /// The bound port (never 0 once constructed).
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  /// "HOST:PORT" of the listening socket, e.g. "127.0.0.1:40123".
  [[nodiscard]] std::string address() const { return address_; }

  /// Stops the loops, joins their threads and closes every connection and the listener.
  /// Idempotent. Once it returns, connecting to port() is refused.
  void stop();

  /// Requests received (complete heads) whose path, without query, starts with `path_prefix`;
  /// "" counts all. Thread-safe.
  [[nodiscard]] std::uint64_t request_count(std::string_view path_prefix) const;
  /// Waits until request_count(path_prefix) >= count or `timeout` passes; true when reached.
  /// Lets a test know the origin holds a request (e.g. /stall) without sleeping. Thread-safe.
  bool wait_for_requests(std::string_view path_prefix, std::uint64_t count,
                         std::chrono::milliseconds timeout) const;
  /// The per-path counts as a JSON object, e.g. {"/bytes/10":3}. Thread-safe.
  [[nodiscard]] std::string stats_json() const;
  /// The downstream's state as /__load answers it: {"law","capacity","in_service",
  /// "peak_in_service","waiting"}; `reset_peak` starts the peak again from the number in
  /// service now. Lets a test count what a proxy had in flight at once. Thread-safe.
  [[nodiscard]] std::string load_json(bool reset_peak = false);
  /// Closes every connection whose request /stall holds, as an origin that gives up on its
  /// requests would (their places in service come back). Lets a test end a stalled request
  /// without the client's hang-up, which a proxy need not pass on. Returns at once; the loops
  /// close them soon after (within a loop's wake-up). Thread-safe.
  void end_stalled();
  /// Connections accepted so far: beside request_count(""), it shows whether a client (a
  /// proxy's origin pool) sends several requests per connection. Thread-safe.
  [[nodiscard]] std::uint64_t connections_accepted() const noexcept {
    return accepted_.load(std::memory_order_relaxed);
  }

 private:
  class Loop;      // one epoll loop and the connections it owns (origin_server.cpp)
  class Downstream;  // the requests in service and the overload law, shared by all loops

  // Called by the loops for every complete request head.
  void count_request(std::string_view path);

  OriginOptions options_;
  proxy::Socket listener_;
  std::uint16_t port_ = 0;
  std::string address_;
  std::unique_ptr<Downstream> downstream_;
  std::vector<std::unique_ptr<Loop>> loops_;
  std::vector<std::jthread> threads_;

  std::mutex stop_mutex_;  // guards stopped_; serializes concurrent stop() calls
  bool stopped_ = false;

  // Sums counts_ for one prefix. Called with counts_mutex_ held.
  std::uint64_t count_locked(std::string_view path_prefix) const;

  mutable std::mutex counts_mutex_;  // guards counts_; counted_ is notified on every change
  mutable std::condition_variable counted_;
  std::map<std::string, std::uint64_t, std::less<>> counts_;
  std::atomic<std::uint64_t> accepted_{0};
};

}  // namespace harness
