// The one proxy transaction every stage runs, unchanged: read the request, look it up in the
// cache, fetch from the origin on a miss, relay the response and maybe store it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/cache.h"
#include "http/http_message.h"
#include "net/socket.h"
#include "transaction/admission.h"

namespace proxy {

class OriginPool;

/// A CONNECT tunnel after the proxy's 200 (RFC 9110 §9.3.6), handed to whoever relays it
/// (ProxyOptions::adopt_tunnel): both sockets, and what log lines name it by.
struct EstablishedTunnel {
  Socket client;
  Socket origin;
  std::string peer;    ///< the client's "HOST:PORT"
  std::string target;  ///< "host:port" the client asked for
};

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
  /// responses with explicit freshness. See http_cache_rules.h for every caching rule.
  std::chrono::seconds heuristic_freshness{86'400};
  /// When set, an origin-form `GET /metrics` addressed to the proxy itself is answered 200 with
  /// this function's result as `text/plain; version=0.0.4` (Prometheus text format). Called on
  /// the serving thread, so it must be thread-safe.
  std::function<std::string()> metrics;
  /// Request bodies (RFC 9112 §6): the first kCheckedRequestBodyBytes (1 MiB) of a body are read
  /// and checked whole before the origin hears of the request; a longer body is then streamed.
  /// A body over this many bytes gets 413 (Content-Length: before connecting; chunked: when it
  /// crosses the limit, the origin connection then reset). Bytes.
  std::uint64_t max_request_body = 100ull * 1024 * 1024;
  /// CONNECT (RFC 9110 §9.3.6) is allowed only to these ports; others get 403. Default 443.
  std::vector<std::uint16_t> connect_ports{443};
  /// A CONNECT tunnel with no byte in either direction for this long is closed.
  Millis tunnel_idle_timeout{60'000};
  /// Most CONNECT tunnels open at once in this process (ProxyStats::tunnels_open); past it a
  /// CONNECT gets 503 with Retry-After. 0: no cap (stages 1-3, where a tunnel holds a thread
  /// anyway); stage 4 sets one so tunnels cannot pin every worker.
  std::size_t max_tunnels = 0;
  /// When set, an established CONNECT tunnel (the 200 sent, bytes the client sent after its
  /// head already passed to the origin) is handed to this function instead of being relayed on
  /// the serving thread. It owns both sockets from then on, and the tunnel's place in
  /// ProxyStats::tunnels_open, which it gives back (fetch_sub) when the tunnel ends. Called on
  /// the serving thread; must be thread-safe and must not block. Stage 4 sets it, so a tunnel
  /// holds no worker; stages 1-3 relay on their thread (run_tunnel).
  std::function<void(EstablishedTunnel)> adopt_tunnel;
  /// While waiting for the origin's response head, also watch the client: when it hangs up
  /// (a close, a half-close or a reset), the origin request is dropped — its connection closed,
  /// nothing stored, nothing sent — and the thread is free at once, instead of waiting out
  /// origin_timeout for a client that is gone. A half-close counts as a hang-up (as in Squid's
  /// default, half_closed_clients off): a client cannot be told apart from one that closed.
  /// Off for stages 1-3 (their lesson keeps every request to its end); stage 4 sets it.
  bool drop_abandoned = false;
  /// With drop_abandoned, when set: the connection of an origin request dropped that way is
  /// handed here instead of closed, since the origin may still be serving the request (stage 4
  /// keeps its origin's permit until the origin answers on it). Called on the thread that
  /// dropped it; the callee owns the socket. Empty: the connection closes.
  std::function<void(Socket)> keep_abandoned;
  /// Persistent origin connections (RFC 9112 §9.3), when set: a request goes out without
  /// `Connection: close` on a kept connection to its origin (or a new one), and a connection
  /// whose response ended whole and may carry another request is given back to this pool. A
  /// kept connection the origin closed before any byte of the response is replaced once by a
  /// new one for an idempotent request (RFC 9112 §9.3.1), never for another. Not owned; must
  /// outlive every transaction. Null (stages 1-3): one request per origin connection, closed
  /// after it. Stage 4 sets it unless --no-origin-reuse.
  OriginPool* origin_pool = nullptr;
  /// The pseudonym in the `Via` field this proxy adds to requests and responses it forwards
  /// (RFC 9110 §7.6.3), e.g. "1.1 stage3-pool". run_stage sets it to the stage's name.
  std::string via_name = "proxy";
};

/// Request body bytes read and checked whole before the origin is contacted (see
/// ProxyOptions::max_request_body): every smuggling check on the framing happens within them.
inline constexpr std::uint64_t kCheckedRequestBodyBytes = 1024 * 1024;

/// Counters shared by every connection of a process. Thread-safe (atomics; relaxed order is
/// enough because they are only ever summed for the stats line).
struct ProxyStats {
  std::atomic<std::uint64_t> requests{0};  ///< requests read completely, valid or not
  std::atomic<std::uint64_t> errors{0};    ///< responses the proxy generated itself (4xx/5xx)
  std::atomic<std::uint64_t> tunnels{0};       ///< CONNECT tunnels established, in all
  std::atomic<std::uint64_t> tunnels_open{0};  ///< CONNECT tunnels open now (max_tunnels)
  std::atomic<std::uint64_t> origin_connects{0};  ///< origin connections opened (not tunnels)
  /// Requests sent again on a new connection after a kept one closed unanswered (origin_pool).
  std::atomic<std::uint64_t> origin_retries{0};
};

/// One cache lookup: the key and what find() returned for it (null: a miss).
struct CacheLookup {
  std::string key;
  std::shared_ptr<const CachedResponse> entry;
};

/// What serve_hit_now did with a request.
enum class HitOutcome {
  not_served,   ///< it needs serve_request: not a hit, or not one that may be answered at once
  served,       ///< answered whole from the cache; the connection may carry another request
  partly_sent,  ///< answered, but the client's socket took only part: send_unsent() the rest
  failed        ///< the client's socket failed mid-answer: close the connection
};

/// A miss stage 4's poller has sent to its origin and waits on without a thread
/// (start_miss_now below; defined in serve_miss_now.cpp). Owned by one thread at a time.
struct MissInFlight;
/// Destroying a MissInFlight closes its origin connection (never given back to the pool).
struct MissInFlightDeleter {
  void operator()(MissInFlight* miss) const noexcept;
};
using PendingMiss = std::unique_ptr<MissInFlight, MissInFlightDeleter>;

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
  /// Adds request bytes someone else read from this connection's socket (stage 4's poller
  /// reads a whole request head before a worker is involved) to those the next serve_request
  /// parses first, before it reads more. `front`, when given, is classify's verdict on the
  /// request at the front of `bytes`, made by whoever read them: serve_request goes on from it
  /// instead of parsing the head again. It is kept only when nothing was buffered before.
  void add_buffered(std::string_view bytes, std::optional<ClassifiedRequest> front = {}) {
    if (buffered_.empty() && front && front->status != ParseStatus::incomplete) {
      front_ = std::move(front);
    }
    buffered_.append(bytes);
  }
  /// Moves out the request bytes buffered past the last request (a pipelined next request), so
  /// that stage 4's poller reads and admits it itself; the connection keeps none.
  [[nodiscard]] std::string take_buffered() {
    looked_up_.reset();  // it belonged to the request at the front of those bytes
    front_.reset();      // and so did this
    return std::exchange(buffered_, {});
  }
  /// Gives up the socket (e.g. to answer it with reply_overloaded); the connection is empty.
  [[nodiscard]] Socket release() noexcept { return std::move(socket_); }
  /// True when serve_hit_now looked up the request at the front of the buffered bytes and
  /// found a fresh stored response that answers it, but did not send it itself (a large body,
  /// or a connection that closes after it): serve_request answers it from the cache without
  /// the origin, so stage 4 lets it skip its origin's concurrency limit. A stored response that
  /// must be revalidated first (stale, or `no-cache`) is not one: that goes to the origin.
  [[nodiscard]] bool found_stored() const noexcept {
    return looked_up_ && looked_up_->entry && stored_serves_;
  }
  /// The status of the last response a request on this connection got from serve_request,
  /// complete_miss_now or finish_miss: the origin's (relayed) or the proxy's own (a 502 or 504
  /// when the origin failed); 0 when none was sent. Stage 4 tells its origin limit of failures
  /// by it.
  [[nodiscard]] int last_status() const noexcept { return last_status_; }
  /// True when serve_hit_now left part of a response unsent.
  [[nodiscard]] bool has_unsent() const noexcept { return !unsent_.empty(); }
  /// Bytes of a partly sent hit still to go (0 when none).
  [[nodiscard]] std::size_t unsent_bytes() const noexcept { return unsent_.size(); }
  /// Sends what serve_hit_now left unsent, as much as the socket takes without blocking: ok when
  /// all of it is out, timeout when the socket is full (wait until it is writable), error when
  /// the client is gone (close the connection).
  IoStatus send_unsent();

 private:
  friend bool serve_request(ClientConnection&, Cache&, const ProxyOptions&, ProxyStats&);
  friend HitOutcome serve_hit_now(ClientConnection&, std::string&,
                                  std::optional<ClassifiedRequest>&, Cache&, const ProxyOptions&,
                                  ProxyStats&);
  friend PendingMiss start_miss_now(ClientConnection&, std::string&,
                                    std::optional<ClassifiedRequest>&, const ProxyOptions&,
                                    ProxyStats&);
  friend HitOutcome complete_miss_now(ClientConnection&, PendingMiss, Cache&, const ProxyOptions&,
                                      ProxyStats&);
  friend bool finish_miss(ClientConnection&, PendingMiss, Cache&, const ProxyOptions&,
                          ProxyStats&, Millis);
  Socket socket_;
  std::string peer_;
  std::string buffered_;
  /// classify's verdict on the request at the front of buffered_, when the poller made it
  /// (add_buffered): serve_request goes on from it rather than parsing that head again.
  std::optional<ClassifiedRequest> front_;
  std::string unsent_;
  /// A cache lookup serve_hit_now made for the request at the front of buffered_ and did not
  /// serve: serve_request uses it instead of looking up (and counting a hit or a miss) again.
  std::optional<CacheLookup> looked_up_;
  std::uint64_t requests_ = 0;
  int last_status_ = 0;
  bool stored_serves_ = false;  // serve_hit_now: looked_up_'s entry answers it without the origin
};

/// Serves one request on `connection`, as serve_connection describes, and returns true when
/// the connection stays open for another request (options.keep_alive and a response whose end
/// the client can see); then any pipelined bytes stay buffered in `connection`. Returns false
/// after it has closed the connection (an orderly close, or a reset after a cut body).
/// A connection whose peer closed, or that stays silent for client_timeout, is closed quietly.
/// Thread-safety and errors: as serve_connection.
bool serve_request(ClientConnection& connection, Cache& cache, const ProxyOptions& options,
                   ProxyStats& stats);

/// Answers the request at the front of `head` (a whole request head, read by the caller) from
/// the cache without ever blocking, when it is a hit serve_request would answer the same way.
/// `front` is classify's verdict on that request (admission.h), made once by the caller: only a
/// request it puts on ServingPath::poller is answered here — a GET for an http:// URI, no body,
/// on a connection that persists (options.keep_alive and RFC 9112 §9.3) — and only when its
/// fresh stored response RFC 9111 lets answer it. Then the response goes out with one
/// non-blocking send (and send_unsent() for what did not fit), the request's bytes leave
/// `head`, `front` is reset, and the counters move as serve_request's would. For any other
/// request (or a null `front`) it returns not_served and leaves `head` and `front` alone; its
/// cache lookup, if it made one (ServingPath::poller_lookup, a connection that closes, included),
/// is kept in `connection` for serve_request, so no lookup is counted twice. The proxy's own `GET
/// /metrics` (options.metrics set) is answered the same way. For stage 4's poller: a hit then costs
/// no hand-off to a worker, and /metrics answers while every worker is busy or the queue sheds.
/// Thread-safety: as serve_request.
HitOutcome serve_hit_now(ClientConnection& connection, std::string& head,
                         std::optional<ClassifiedRequest>& front, Cache& cache,
                         const ProxyOptions& options, ProxyStats& stats);

// ---- A miss without a thread (serve_miss_now.cpp), for stage 4's poller ----
// A miss spends nearly all its time waiting for the origin. On a thread that blocks, that wait
// costs a thread, and the origin's answer costs a wake-up of it; the poller instead sends the
// request, waits in epoll with everything else, and relays an answer that has arrived whole.

/// Sends the request at the front of `head` to its origin, on a kept connection from
/// options.origin_pool and without blocking, when serve_hit_now has just returned not_served
/// for it as a plain miss: a request `front` (classify's verdict on it) puts on
/// ServingPath::poller as a cache_get, for which the cache holds no response at all, and not
/// only-if-cached. The request's bytes then leave `head`, its parsed request moves from `front`
/// into the miss (`front` is reset), the counters move as serve_request's would, and the poller
/// waits for origin_fd() to be readable. Returns null and leaves everything as it was for any
/// other request, when no kept connection is idle (a connect may block: a worker makes it), or
/// when the origin's socket did not take the request at once. Thread-safety: as serve_request.
PendingMiss start_miss_now(ClientConnection& connection, std::string& head,
                           std::optional<ClassifiedRequest>& front, const ProxyOptions& options,
                           ProxyStats& stats);

/// The origin connection a miss waits on, for epoll.
int origin_fd(const MissInFlight& miss) noexcept;

/// The origin's own latency for a miss: from writing the request to the kernel's receive time
/// of the answer's first byte (SO_TIMESTAMPNS), so the time the answer then waited for the
/// poller is not the origin's. nullopt before that byte, or when the kernel gave no stamp.
std::optional<std::chrono::nanoseconds> origin_latency(const MissInFlight& miss) noexcept;

/// What read_miss_now found.
enum class MissRead {
  waiting,      ///< the response head has not all arrived: wait for the origin again
  arriving,     ///< the head has, the body not all: wait again (the caller hands a body still
                ///< arriving after a while to a worker, which relays it as it comes)
  whole,        ///< the whole response is here: complete_miss_now
  needs_worker  ///< anything else (the origin closed, or sent what a worker must judge: a 1xx,
                ///< a malformed head, a close-delimited or larger body): finish_miss
};

/// Reads what the origin has sent, never blocking, and says what to do next. `progressed` is
/// set when a byte arrived (the origin timeout runs from the last one).
MissRead read_miss_now(MissInFlight& miss, bool& progressed);

/// Relays a response read_miss_now found whole, as serve_request would (stored when it may be;
/// the origin connection back to the pool), sending it without blocking: served, partly_sent
/// (send_unsent() the rest) or failed (close the connection), as serve_hit_now.
HitOutcome complete_miss_now(ClientConnection& connection, PendingMiss miss, Cache& cache,
                             const ProxyOptions& options, ProxyStats& stats);

/// Goes on with a miss on a worker, blocking, exactly as serve_request would have from the
/// moment its request went out (a kept connection the origin closed is retried once on a new
/// one; 502; a large body streamed). `origin_wait_left`: what is left of options.origin_timeout
/// since the origin's last byte (0 or less: none). When no byte comes within it, 504 if no
/// response head came, else the stalled body is cut at once; after that byte each read waits
/// the whole timeout, as a worker's do. Returns as serve_request.
bool finish_miss(ClientConnection& connection, PendingMiss miss, Cache& cache,
                 const ProxyOptions& options, ProxyStats& stats, Millis origin_wait_left);

/// The client hung up while its miss waited on the origin: the origin request is dropped
/// (nothing stored; the connection is closed, not pooled) and a line logged, as a worker does
/// with options.drop_abandoned. The caller closes the client.
void drop_miss(ClientConnection& connection, PendingMiss miss, const ProxyOptions& options,
               ProxyStats& stats);

/// Serves one client connection: serve_request until the connection closes. With
/// options.keep_alive false (stages 1-3) that is one request, one response, then close
/// (HTTP/1.1 with `Connection: close`). Every final response carries `X-Cache: HIT` or
/// `X-Cache: MISS`; forwarded ones carry this proxy's `Via` (RFC 9110 §7.6.3).
/// Methods (RFC 9110 §9): GET is served from the cache or the origin; HEAD is always forwarded,
/// its response relayed without a body whatever its Content-Length says, never stored and never
/// answered from a GET's entry; POST, PUT, PATCH, DELETE and OPTIONS are forwarded with their
/// bodies (Content-Length or chunked, re-framed by the proxy, bytes exact) and never stored, and
/// a 2xx/3xx answer to POST, PUT, PATCH or DELETE erases the stored entry for the target URI and
/// for a same-origin Location / Content-Location (RFC 9111 §4.4). CONNECT host:port opens a byte
/// tunnel (RFC 9110 §9.3.6): 200, then bytes both ways until both sides have closed (an EOF one
/// way half-closes the other), or options.tunnel_idle_timeout passes with no byte; the tunnel
/// holds the calling thread for its whole life. Interim 1xx responses (but 101) are relayed to
/// HTTP/1.1 clients before the final one; 204, 304 and HEAD responses have no body.
/// Errors are answered with a status and a one-line log: 400 malformed (an HTTP/1.1 request
/// without a Host field, or any with more than one, included: RFC 9112 §3.2), 403 CONNECT to a
/// port not in options.connect_ports, 408 request head or body too slow, 413 request body over
/// options.max_request_body, 414/431 too long, 501 any other method (TRACE, unknown tokens) or a
/// scheme other than http, 503 too many tunnels (options.max_tunnels), 505 an HTTP version other
/// than 1.x, 502 origin unreachable or malformed, 504 origin timeout; to a HEAD, the error's head
/// alone (RFC 9110 §9.3.2). A response is stored only when it is complete, status 200, answers a
/// GET without a body, fits max_object_bytes() and
/// RFC 9111 allows it (http_cache_rules.h). A stored response is served only while fresh, with an
/// Age field; a stale one with a validator is revalidated, and a 304 serves it as a HIT.
/// Bodies are streamed, never held whole unless they may be stored (request bodies: the first
/// kCheckedRequestBodyBytes are).
/// Thread-safety: safe to run concurrently on different sockets when `cache` is thread-safe.
/// Never throws for I/O or protocol errors; may throw std::bad_alloc.
void serve_connection(Socket client, Cache& cache, const ProxyOptions& options,
                      ProxyStats& stats);

}  // namespace proxy
