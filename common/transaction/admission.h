// Admission: the one place a request head is parsed and judged. classify() reads the head at the
// front of a buffer and says what the transaction will do with it (refuse it, answer /metrics,
// open a tunnel, look it up in the cache, forward it) and which thread may do that (stage 4's
// poller, or only a thread that may block). Every path calls it once per request — serve_request
// on a worker (proxy.cpp), and stage 4's poller before it answers a hit (serve_hit_now.cpp),
// sends a miss (serve_miss_now.cpp) or asks the origin's concurrency limit for a permit — and
// carries the result to where it is used instead of parsing again. HeadReader is how stage 4's
// poller gets a head to classify: read as it arrives, without ever waiting.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "http/body_reader.h"
#include "http/http_cache_rules.h"
#include "http/http_message.h"
#include "http/uri.h"
#include "net/socket.h"

namespace proxy {

struct ProxyOptions;
class ClientConnection;

/// What the transaction does with a request: serve_request's branches, in the order it tries
/// them.
enum class Route {
  refuse,     ///< the proxy answers ClassifiedRequest::error_status itself
  metrics,    ///< the proxy's own origin-form `GET /metrics` (ProxyOptions::metrics set)
  tunnel,     ///< CONNECT (RFC 9110 §9.3.6)
  cache_get,  ///< a GET of an http:// URI: the cache is looked up first (RFC 9111 §4)
  forward,    ///< any other http:// request (a Range GET included): straight to the origin
};

/// Which thread may serve a request in stage 4. Stages 1-3 serve every request on a thread that
/// may block, and never read this.
enum class ServingPath {
  /// Only a thread that may block: a body to read, a tunnel, a refusal, a request that is not a
  /// plain GET, or a connection without keep-alive (ProxyOptions::keep_alive off).
  worker,
  /// A plain GET (no body) on a connection that closes after it: the poller may look it up, so
  /// that a stored answer skips its origin's concurrency limit, but a worker answers it.
  poller_lookup,
  /// A plain GET on a persistent connection, or the proxy's /metrics: the poller may answer it
  /// itself — a hit (serve_hit_now), or a miss on a kept origin connection (start_miss_now).
  poller,
};

/// A request head parsed and judged once (classify). Move-only in practice (it owns strings);
/// owned by whichever thread holds the connection, and carried with it.
struct ClassifiedRequest {
  /// incomplete: more bytes are needed, and nothing below is set. invalid: the head is malformed
  /// (route refuse, with parse_request's status and reason).
  ParseStatus status = ParseStatus::incomplete;
  std::size_t head_bytes = 0;  ///< bytes of the head, final CRLF included (when complete)
  Request request;
  Route route = Route::refuse;
  ServingPath path = ServingPath::worker;
  int error_status = 0;      ///< route refuse: 400, 414, 431, 501 or 505
  std::string error_detail;  ///< route refuse: a one-line reason for the reply and the log
  /// The target as an absolute-form URI (any scheme), when it parses as one (RFC 9112 §3.2.2).
  std::optional<AbsoluteUri> uri;
  std::string cache_key;  ///< uri->cache_key() for an http:// target; empty otherwise
  /// request_body_framing's verdict; nullopt when the framing is ambiguous (route refuse).
  std::optional<BodyFraming> body;
  /// request_cache_rules (RFC 9111 §5.2.1), for routes cache_get and forward.
  RequestCacheRules rules;
  /// The connection may carry another request after this one's response: ProxyOptions::
  /// keep_alive, not CONNECT, no body, and the client wants it (RFC 9112 §9.3).
  bool persistent = false;

  /// "host:port" of the origin an http:// request goes to, the key of its concurrency limit in
  /// stage 4; empty for CONNECT (a tunnel, no request in flight), origin-form (the proxy's own
  /// /metrics), another scheme, a head that is not complete, or one the proxy refuses itself.
  [[nodiscard]] std::string origin() const;
};

/// Parses the request head at the front of `buffer` (parse_request, within options.limits) and
/// classifies it: its route, the thread that may serve it, its target, body framing and caching
/// rules. `buffer` must start at the request line (the caller drops leading empty lines,
/// leading_empty_lines). The one admission step: every path calls it once per request and carries
/// the result. Never fails: a malformed or unsupported request is classified as route refuse.
/// Thread-safe (no shared state; `options` is only read).
ClassifiedRequest classify(std::string_view buffer, const ProxyOptions& options);

/// A request head read without ever waiting (stage 4's poller, RFC 9112 §2.2): the bytes that
/// have arrived on a connection, when the first of them came (a client timeout runs from it),
/// and classify's verdict on the head at their front, made once when it is whole and carried
/// with the bytes — to the hit, the origin's limit, the miss or a worker — until the request
/// leaves. Owned by the one thread that holds the connection.
class HeadReader {
 public:
  using Clock = std::chrono::steady_clock;
  /// What a read found: more bytes are needed, a whole (or malformed) head is at the front
  /// (front() is set), or the client closed or failed before a whole head.
  enum class Status { more, ready, closed };

  HeadReader() = default;
  /// Starts with `bytes` someone else read (a pipelined next request) as if they arrived `now`.
  HeadReader(std::string bytes, Clock::time_point now) : bytes_(std::move(bytes)), first_byte_(now) {}

  /// Reads whatever has arrived on `socket` (Socket::read_now) until nothing more is there,
  /// the head is past what parse_request must see to judge it (options.limits), or the client
  /// ends, drops the empty lines before a request line, and classifies a whole head once.
  /// ready: a whole head is at the front, front() set — or bytes past the limits, which a
  /// worker answers (414 or 431). more: wait for the socket again. closed: the client ended
  /// before a whole head, or reset.
  Status read(const Socket& socket, const ProxyOptions& options);

  [[nodiscard]] bool empty() const noexcept { return bytes_.empty(); }
  /// The bytes held; whoever answers the request at the front erases its head_bytes.
  [[nodiscard]] std::string& bytes() noexcept { return bytes_; }
  /// classify's verdict on the head at the front of bytes(); empty until it is whole. Whoever
  /// answers that request resets it.
  [[nodiscard]] std::optional<ClassifiedRequest>& front() noexcept { return front_; }
  [[nodiscard]] Clock::time_point first_byte() const noexcept { return first_byte_; }
  /// The bytes held now begin a new request, at `now`: its client timeout runs from then.
  void restart_clock(Clock::time_point now) noexcept { first_byte_ = now; }
  /// Forgets the bytes and the verdict (the connection is closing).
  void clear() noexcept {
    bytes_.clear();
    front_.reset();
  }
  /// Hands the bytes and the verdict to `connection` (ClientConnection::add_buffered), whose
  /// serve_request goes on from them without parsing the head again; this reader is empty after.
  void hand_to(ClientConnection& connection);

 private:
  // classify's verdict on the bytes held, made once: ready when a whole head is at the front
  // (judged now or already), else `wait`.
  Status classify_front(const ProxyOptions& options, Status wait);

  std::string bytes_;
  Clock::time_point first_byte_{};
  std::optional<ClassifiedRequest> front_;
};

}  // namespace proxy
