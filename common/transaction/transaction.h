// The pieces of one proxy transaction that live in files of their own, and the state they share.
// Internal to the transaction (proxy.cpp and the files named below); stages use proxy.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cache/cache.h"
#include "http/body_reader.h"
#include "http/http_cache_rules.h"
#include "http/http_message.h"
#include "http/uri.h"
#include "net/socket.h"
#include "transaction/proxy.h"

namespace proxy {

/// What we know of the connection being served, for replies and log lines. Lives for one
/// request; borrowed by every step of it, on the serving thread only.
struct Context {
  const Socket& client;
  const ProxyOptions& options;
  ProxyStats& stats;
  const std::string& peer;  ///< "HOST:PORT", taken at accept: a reset peer has no address later
  std::string what;  ///< "GET http://host/path", filled in once the request line is known
  /// The connection may carry another request after this response (RFC 9112 §9.3). Decided
  /// from the request, then cleared by anything that ends the response without visible framing.
  bool persistent = false;
  int version_minor = 1;  ///< the client's HTTP/1.x: a 1.0 client needs keep-alive spelled out
  /// The request is a HEAD: the proxy's own replies to it carry no body (RFC 9110 §9.3.2).
  bool head_method = false;
  std::uint64_t* connection_requests = nullptr;  ///< the connection's count, beside stats.requests
  /// RFC 9111 (http_cache_rules.h): when the request went to the origin, and the stale stored
  /// response it asks the origin to revalidate (null when the request is not conditional).
  UnixSeconds request_time = 0;
  std::shared_ptr<const CachedResponse> revalidating{};
  bool sent_continue = false;  ///< we answered the client's Expect: 100-continue ourselves
  /// The lookup serve_hit_now already made for this request, if it made one.
  std::optional<CacheLookup> looked_up{};
  /// When set, what goes to the client is appended here instead of written to `client`
  /// (send_to_client): stage 4's poller relays a whole response this way, then sends it
  /// without blocking (complete_miss_now).
  std::string* out = nullptr;
  /// When set, the status of the final response is written here — the origin's, relayed, or
  /// one the proxy made (reply_error) — so stage 4 can tell its origin limit of a failure
  /// (ClientConnection::last_status).
  int* status_out = nullptr;
};

/// Writes `bytes` to the client, or appends them to ctx.out when set. Returns ok, or how the
/// write failed (Socket::write_all, within ctx.options.write_timeout).
IoStatus send_to_client(Context& ctx, std::string_view bytes);

/// The origin connection one request went out on (ProxyOptions::origin_pool): whether it was a
/// kept one, and what sending the request again on a new connection would need. Owned by the
/// serving thread for one request.
struct OriginConnection {
  Socket socket;
  std::string host;  ///< the pool's key, with port
  std::uint16_t port = 0;
  bool reused = false;  ///< taken from the pool rather than connected for this request
  /// The request bytes as written, kept only while a retry may send them again: an idempotent
  /// request whose body was held whole (may_retry_on_new_connection, RFC 9112 §9.3.1).
  std::string resend;
  bool may_retry = false;
  /// The request went out so that the connection may be kept: without `Connection: close`,
  /// its body whole. Only then may `reusable` be set.
  bool keep_allowed = false;
  /// Set by relay_response when the response ended whole and its framing lets the connection
  /// carry another request (RFC 9112 §9.3): only then is it given back to the pool.
  bool reusable = false;
};

/// A stored response up to this size goes out in one write with its head (send_cached,
/// serve_hit_now): bytes.
inline constexpr std::size_t kOneWriteBytes = 64 * 1024;
/// The longest response head the proxy reads from an origin, in bytes; past it, 502.
inline constexpr std::size_t kMaxResponseHead = 64 * 1024;

/// RFC 9112 §9.3: whether the client wants its connection kept after this request — HTTP/1.1
/// unless it says close, HTTP/1.0 only with `Connection: keep-alive` (proxy.cpp).
bool wants_persistence(const Request& request);

// ---- Canned replies (replies.cpp) ----

/// Sends a response the proxy makes itself: `status`, a one-line plain-text body naming
/// `detail`, Connection: close (and Retry-After: 1 with a 503); to a HEAD (ctx.head_method) the
/// same head without the body (RFC 9110 §9.3.2). Counts an error, logs one line and clears
/// ctx.persistent: after an error the rest of the connection's bytes are suspect.
void reply_error(Context& ctx, int status, std::string_view detail);
/// The whole response to the proxy's own `GET /metrics`: 200 with `text` (Prometheus text
/// exposition format 0.0.4), never stored, and ctx's Connection field.
std::string metrics_response(const Context& ctx, const std::string& text);
/// Answers the proxy's own `GET /metrics` with `text` (metrics_response).
void send_metrics(Context& ctx, const std::string& text);
/// One log line: the client, the request (once known) and `message`.
void log_failure(const Context& ctx, std::string_view message);
/// This hop's Connection field for the response (with its CRLF): close unless the connection
/// persists, and keep-alive spelled out for an HTTP/1.0 client, which would otherwise assume close.
std::string connection_field(const Context& ctx);
/// This hop's Via field line (RFC 9110 §7.6.3, with its CRLF), for a message received as
/// HTTP/1.<minor>. It goes after any Via the message carried, which is how a list field is
/// appended to.
std::string via_field(const Context& ctx, int version_minor);

// ---- The origin (origin_response.cpp) ----

/// Connects to an origin (or a CONNECT target). Answers the client itself and returns nullopt
/// on failure: 504 after connect_timeout, 503 when we are out of descriptors, else 502.
std::optional<Socket> connect_to_origin(Context& ctx, const std::string& host, std::uint16_t port);
/// The origin connection for a request: when `from_pool`, a kept one from
/// ctx.options.origin_pool if it has one, else a new one (connect_to_origin). Answers the client
/// itself and returns nullopt on failure.
std::optional<OriginConnection> open_origin(Context& ctx, const std::string& host,
                                            std::uint16_t port, bool from_pool);
/// Writes the request to the origin. A kept connection the origin closed meanwhile is swapped
/// once for a new one when origin.may_retry (RFC 9112 §9.3.1). Answers the client itself (502)
/// and returns false on failure.
bool send_to_origin(Context& ctx, OriginConnection& origin, const std::string& request_bytes);
/// Reads the origin's response head, relaying interim 1xx responses to an HTTP/1.1 client.
/// When a kept connection turns out closed before any byte of a response, and origin.may_retry,
/// the request is sent once more on a new connection (RFC 9112 §9.3.1: the origin may close an
/// idle connection just as a request goes out on it). Answers the client itself (502/504) and
/// returns false on failure. On success `buffer` holds the head and any body bytes after it;
/// `head_bytes` marks the boundary.
bool read_response_head(Context& ctx, OriginConnection& origin, std::string& buffer,
                        ResponseHead& head, std::size_t& head_bytes);
/// Gives a connection back to ctx.options.origin_pool when its response left it reusable, and
/// closes it otherwise.
void finish_origin(Context& ctx, OriginConnection origin);
/// Answers 504: the origin sent no response head within ctx.options.origin_timeout.
void reply_origin_timeout(Context& ctx);

// ---- Caching steps, RFC 9111 (caching.cpp; the rules are in http_cache_rules.h) ----

/// Sends a stored response: its head, Age, our framing, Via and X-Cache: HIT, then the body
/// (proxy.cpp).
void send_cached(Context& ctx, const CachedResponse& cached);
/// The head send_cached sends (with its blank line).
std::string hit_head(const Context& ctx, const CachedResponse& cached);
/// The head a response is stored as: its end-to-end fields and a Date, none of this hop's.
std::string head_to_store(const ResponseHead& head, const BodyFraming& framing,
                          UnixSeconds response_time);
/// The entry to store once the body is complete (its body is filled in then), or nullopt when
/// the response may not be stored (RFC 9111 §3) or its head alone is over `object_limit` bytes.
std::optional<CachedResponse> entry_to_store(const Context& ctx, const ResponseHead& head,
                                             const Request& request, const std::string& key,
                                             std::string stored_head, std::size_t object_limit,
                                             UnixSeconds response_time);
/// A 304 answered our conditional request for ctx.revalidating (RFC 9111 §4.3.3): updates the
/// stored entry (when `may_store`) and serves it as a HIT.
void serve_revalidated(Context& ctx, const ResponseHead& not_modified, const Request& request,
                       const std::string& key, bool may_store, Cache& cache);
/// RFC 9111 §4.4: a successful unsafe request invalidates the target URI's entry, and those of
/// Location and Content-Location when they share its origin.
void invalidate_after_unsafe(Cache& cache, const std::string& key, const ResponseHead& head);

// ---- Request bodies, RFC 9112 §6 (request_body.cpp) ----

/// A request body as the transaction forwards it: the part read and checked before the origin
/// heard of the request, and, for a longer body, the reader that goes on from there.
struct RequestBody {
  BodyFraming framing;             ///< as the client sent it
  std::string checked;             ///< decoded bytes read before connecting (all of a short body)
  std::optional<BodyReader> rest;  ///< set while the body goes on past `checked`
  /// The framing field line for the origin (no CRLF; see origin_framing_field in rewrite.h): a
  /// body read whole gets a Content-Length, a streamed one keeps the client's kind of framing,
  /// re-made by us, and a client's `Content-Length: 0` is kept (RFC 9110 §8.6).
  [[nodiscard]] std::string framing_field(const Request& request) const;
  /// `checked` as it goes to the origin right after the request head.
  [[nodiscard]] std::string first_bytes() const;
};

/// Reads the start of the request body (see ProxyOptions::max_request_body): the whole body, or
/// its first kCheckedRequestBodyBytes, within the client timeout, sending 100 Continue first when
/// the client waits for it. Answers the client itself (400, 408, 413) and returns false on failure.
bool read_request_body(Context& ctx, const Request& request, const BodyFraming& framing,
                       std::string_view buffered, RequestBody& body);

/// Streams the rest of a long request body (body.rest) from the client to the origin. On failure
/// the origin connection is reset — it never takes an incomplete body for a whole one — the
/// client is answered (400, 408, 413) and false returned. An origin that stops taking the body
/// may have answered already (413, 401...): true, and its answer is relayed.
bool stream_request_body(Context& ctx, Socket& origin, RequestBody& body);

// ---- CONNECT, RFC 9110 §9.3.6 (connect_method.cpp) ----

/// Serves a CONNECT request: checks the target and port, connects, answers 200 and relays bytes
/// both ways until both sides are done. The connection ends with the tunnel. Returns false when
/// the tunnel was cut (reset, shutdown): the caller then resets the client.
bool serve_connect(Context& ctx, Socket& client, const Request& request,
                   std::string_view early_bytes);

// ---- The transaction's steps that other files resume (proxy.cpp) ----

/// The request as it goes to the origin: rewritten (rewrite.h) with this hop's Via and the
/// body's framing field, then the body's first bytes. `keep_open` says whether it leaves the
/// connection open for the origin pool (only when ctx.options.origin_pool is set).
std::string origin_request_bytes(const Context& ctx, const Request& request,
                                 const AbsoluteUri& uri, const RequestBody& body,
                                 bool& keep_open);
/// Relays the origin's response to the client — head, then body, streamed — and stores it when
/// it is complete and cacheable (`may_store` is false when the request rules storing out).
/// `buffer` holds response bytes already read from `origin` (empty unless the poller read
/// them). Answers the client itself when the origin fails (502/504). Returns false when the
/// response was cut after its head went out and the client, reading a body that ends at close,
/// could not tell a cut from the end: the caller then resets the connection.
bool relay_response(Context& ctx, OriginConnection& origin, const Request& request,
                    const std::string& key, bool may_store, Cache& cache, std::string buffer);
/// Ends a request on `client` as serve_request does: a reset when the response was cut
/// (`orderly` false), an orderly close unless ctx.persistent, else nothing. Returns true when
/// the connection stays open for another request.
bool end_request(Socket& client, const Context& ctx, bool orderly);

}  // namespace proxy
