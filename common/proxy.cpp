// The proxy transaction, as the protocol runs it: read_request, cache.find, fetch_from_origin,
// relay_response, cache.insert. serve_request comes first and reads as that summary; the
// steps follow in the same order, then the helpers they share. Stages 1-3 call
// serve_connection (one request per connection); stage 4 calls serve_request per request on a
// persistent connection.
#include "proxy.h"

#include <sys/ioctl.h>

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "body_reader.h"
#include "http_cache_rules.h"
#include "log.h"
#include "rewrite.h"
#include "tunnel.h"
#include "uri.h"

namespace proxy {
namespace {

constexpr std::size_t kBufferBytes = 64 * 1024;
constexpr std::size_t kMaxResponseHead = 64 * 1024;

// What we know of the connection being served, for replies and log lines.
struct Context {
  const Socket& client;
  const ProxyOptions& options;
  ProxyStats& stats;
  const std::string& peer;  // "HOST:PORT", taken at accept: a reset peer has no address later
  std::string what;  // "GET http://host/path", filled in once the request line is known
  // The connection may carry another request after this response (RFC 9112 §9.3). Decided
  // from the request, then cleared by anything that ends the response without visible framing.
  bool persistent = false;
  int version_minor = 1;  // the client's HTTP/1.x: a 1.0 client needs keep-alive spelled out
  std::uint64_t* connection_requests = nullptr;  // the connection's count, beside stats.requests
  // RFC 9111 (http_cache_rules.h): when the request went to the origin, and the stale stored
  // response it asks the origin to revalidate (null when the request is not conditional).
  UnixSeconds request_time = 0;
  std::shared_ptr<const CachedResponse> revalidating{};
  bool sent_continue = false;  // we answered the client's Expect: 100-continue ourselves
};

// Where relay_body writes what it decodes.
struct BodySink {
  const Socket* socket = nullptr;  // null: decode only (discard)
  bool encode_chunked = false;     // re-frame each piece as a chunk (RFC 9112 §7.1)
  std::string* capture = nullptr;  // also keep the decoded body here, while it may be stored
  std::size_t capture_limit = 0;   // give up capturing past this many bytes
  // Runs once the whole body is captured, before its last bytes go out: a client on a
  // persistent connection may ask again the moment it has them, and must find the entry stored.
  std::function<void()> before_last_write;
  // A streamed request body may not grow past this many decoded bytes (max_request_body).
  std::uint64_t limit = UINT64_MAX;
  std::uint64_t delivered = 0;  // decoded bytes seen so far, against `limit`
};

enum class BodyOutcome {
  complete, source_failed, source_timeout, sink_failed, malformed, cancelled, too_large
};


// The steps of the transaction, in the order the protocol runs them. serve_connection, right
// below, calls them; their definitions follow it in the same order.
bool read_request(Context& ctx, std::string& buffer, Request& request, std::size_t& head_bytes);
void send_cached(Context& ctx, const CachedResponse& cached);
std::optional<Socket> fetch_from_origin(Context& ctx, const Request& request,
                                        const AbsoluteUri& uri, const BodyFraming& body,
                                        std::string_view buffered_body);
bool relay_response(Context& ctx, const Socket& origin, const Request& request,
                    const std::string& key, bool may_store, Cache& cache);
bool read_request_body(Context& ctx, const BodyFraming& framing, std::string_view buffered,
                       BodyReader& reader, std::string& out, bool& whole);
void serve_revalidated(Context& ctx, const ResponseHead& not_modified, const Request& request,
                       const std::string& key, bool may_store, Cache& cache);
bool stream_request_body(Context& ctx, Socket& origin, BodyReader& reader, bool chunked,
                         std::uint64_t already);
bool serve_connect(Context& ctx, Socket& client, const Request& request,
                   std::string_view early_bytes);

// Methods (RFC 9110 §9.3): which ones we forward, and which ones invalidate (RFC 9111 §4.4).
bool is_forwarded_method(std::string_view method);
bool is_unsafe_method(std::string_view method);
void invalidate_after_unsafe(Cache& cache, const std::string& key, const ResponseHead& head);

// Helpers, defined last: persistence, streaming a body, answering with an error, closing.
bool wants_persistence(const Request& request);
std::string connection_field(const Context& ctx);
void send_metrics(Context& ctx, const std::string& text);
std::optional<Socket> connect_to_origin(Context& ctx, const std::string& host, std::uint16_t port);
std::string via_field(const Context& ctx, int version_minor);
BodyOutcome relay_body(const Socket& source, std::string_view buffered, BodyReader& reader,
                       BodySink& sink, Millis read_timeout, Millis write_timeout);
void reply_error(Context& ctx, int status, std::string_view detail);
void log_failure(const Context& ctx, std::string_view message);
void finish(Socket& client);

}  // namespace

void serve_connection(Socket client, Cache& cache, const ProxyOptions& options,
                      ProxyStats& stats) {
  ClientConnection connection(std::move(client));
  while (serve_request(connection, cache, options, stats)) {
  }
}

ClientConnection::ClientConnection(Socket socket)
    : socket_(std::move(socket)), peer_(peer_address(socket_)) {}

bool serve_request(ClientConnection& connection, Cache& cache, const ProxyOptions& options,
                   ProxyStats& stats) {
  Socket& client = connection.socket_;
  Context ctx{client, options, stats, connection.peer_, {}};
  ctx.connection_requests = &connection.requests_;
  std::string buffer = std::move(connection.buffered_);
  connection.buffered_.clear();
  Request request;
  std::size_t head_bytes = 0;
  if (!read_request(ctx, buffer, request, head_bytes)) {
    finish(client);
    return false;
  }
  std::optional<AbsoluteUri> uri = parse_absolute_uri(request.target);
  std::optional<BodyFraming> body = request_body_framing(request);
  ctx.version_minor = request.version_minor;
  const bool connect = request.method == "CONNECT";
  // After a CONNECT the connection is a tunnel: what follows its head is tunnel bytes.
  ctx.persistent = options.keep_alive && !connect && body && body->kind == BodyKind::none &&
                   wants_persistence(request);
  if (ctx.persistent) {
    // Bytes past this head are the next pipelined request: keep them for the next call.
    connection.buffered_.assign(buffer, head_bytes, std::string::npos);
  }
  if (count_fields(request.fields, "Host") > 1) {
    reply_error(ctx, 400, "more than one Host field (RFC 9112 §3.2)");
  } else if (options.metrics && request.method == "GET" && request.target == "/metrics") {
    send_metrics(ctx, options.metrics());
  } else if (connect) {
    if (!serve_connect(ctx, client, request, std::string_view(buffer).substr(head_bytes))) {
      client.reset();  // a cut tunnel: neither side may take it for an orderly end
      return false;
    }
  } else if (!is_forwarded_method(request.method)) {
    reply_error(ctx, 501, "method " + request.method + " is not supported; this proxy forwards "
                          "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS and CONNECT");
  } else if (!uri || uri->scheme != "http") {
    const std::size_t scheme_end = request.target.find("://");
    if (scheme_end != std::string::npos && !iequals(request.target.substr(0, scheme_end), "http")) {
      reply_error(ctx, 501, "only http:// targets are supported, not '" +
                                request.target.substr(0, scheme_end) + "://'");
    } else {
      reply_error(ctx, 400, "a proxy request needs a valid absolute-form target, such as "
                            "GET http://example.com/ HTTP/1.1");
    }
  } else if (!body) {
    reply_error(ctx, 400, "ambiguous request body framing (Content-Length with "
                          "Transfer-Encoding, or conflicting lengths)");
  } else {
    const std::string key = uri->cache_key();
    // RFC 9111 §4: only a GET is answered from the cache (a HEAD never gets the GET's entry, and
    // every other method must reach the origin), and only by a stored response that is fresh and
    // acceptable to the request; a stale one with a validator is revalidated (a 304 then serves
    // it, as a HIT).
    const bool get = request.method == "GET";
    const RequestCacheRules rules = request_cache_rules(request);
    ctx.request_time = unix_now();
    std::shared_ptr<const CachedResponse> cached =
        get && !rules.bypass ? cache.find(key) : nullptr;
    const StoredUse use =
        cached ? decide_use(*cached, request, rules, ctx.request_time) : StoredUse::miss;
    std::optional<ResponseHead> stored_head =
        use == StoredUse::revalidate ? parse_stored_head(cached->head) : std::nullopt;
    if (stored_head) ctx.revalidating = cached;
    if (use == StoredUse::serve) {
      send_cached(ctx, *cached);
    } else if (get && rules.only_if_cached) {
      reply_error(ctx, 504, "only-if-cached, and no fresh stored response (RFC 9111 §5.2.1.7)");
    } else if (std::optional<Socket> origin = fetch_from_origin(
                   ctx, stored_head ? conditional_request(request, stored_head->fields) : request,
                   *uri, *body, std::string_view(buffer).substr(head_bytes))) {
      // Only a GET's response is stored, and not one with a body: the entry is not keyed by it.
      if (!relay_response(ctx, *origin, request, key,
                          get && body->kind == BodyKind::none && rules.may_store, cache)) {
        client.reset();  // a reset, not a FIN: the client must not take a cut body as whole
        return false;
      }
    } else {
      ctx.persistent = false;  // answered with an error, or cut without one at shutdown
    }
  }
  if (ctx.persistent) return true;
  finish(client);
  return false;
}

namespace {

// Reads until a complete request head is buffered. On success `buffer` starts with the head
// and may hold the first bytes of a body, or of a pipelined request, after it (`head_bytes`
// marks the boundary). `buffer` may arrive holding bytes read earlier on this connection.
bool read_request(Context& ctx, std::string& buffer, Request& request, std::size_t& head_bytes) {
  const RequestLimits& limits = ctx.options.limits;
  const auto deadline = std::chrono::steady_clock::now() + ctx.options.client_timeout;
  std::array<char, 16 * 1024> chunk;
  // A pipelined request may already be buffered whole: parse before waiting for more.
  bool worth_parsing = !buffer.empty();
  for (;;) {
    if (worth_parsing) {
      RequestParseResult parsed = parse_request(buffer, request, limits);
      if (parsed.status == ParseStatus::complete) {
        head_bytes = parsed.consumed;
        ctx.stats.requests.fetch_add(1, std::memory_order_relaxed);
        ++*ctx.connection_requests;
        ctx.what = request.method + " " + request.target;
        return true;
      }
      if (parsed.status == ParseStatus::invalid) {
        ctx.stats.requests.fetch_add(1, std::memory_order_relaxed);
        ++*ctx.connection_requests;
        reply_error(ctx, parsed.error_status, parsed.error_reason);
        return false;
      }
    }
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    IoResult got = ctx.client.read_some(chunk, std::max(left, Millis{0}));
    if (got.status != IoStatus::ok) {
      // A client that opens a connection and says nothing (a browser's preconnect, or a
      // keep-alive connection it is done with) is closed quietly; one that stops half-way
      // through a request is told why.
      if (got.status == IoStatus::timeout && !buffer.empty()) {
        reply_error(ctx, 408, "request head not received in time");
      } else if (got.status == IoStatus::eof && !buffer.empty()) {
        log_failure(ctx, "client closed before finishing its request");
      }
      return false;
    }
    const std::string_view fresh(chunk.data(), got.bytes);
    const std::size_t before = buffer.size();
    buffer.append(fresh);
    // The parser starts over from the first byte, so run it only when this read could change
    // its verdict — a line ended, or a size limit was crossed — not after every byte a slow
    // client trickles in, which would cost time quadratic in the length of the head.
    worth_parsing =
        fresh.find_first_of("\r\n") != std::string_view::npos ||
        (before <= limits.max_request_line && buffer.size() > limits.max_request_line) ||
        buffer.size() > limits.max_header_bytes;
  }
}

// Sends a stored response: its head, our framing and X-Cache, then the body.
void send_cached(Context& ctx, const CachedResponse& cached) {
  std::string head = cached.head;
  // A response from a cache says how old it is (RFC 9111 §5.1).
  head += "Age: " + std::to_string(current_age(cached.freshness, unix_now())) + "\r\n";
  head += "Content-Length: " + std::to_string(cached.body.size()) + "\r\n" +
          via_field(ctx, 1) + connection_field(ctx) + "X-Cache: HIT\r\n\r\n";
  // One write for a small entry: a hit is the proxy's fastest path, and two sends would cost
  // a second system call and, on a persistent connection, a delayed ACK (Nagle).
  if (cached.body.size() <= kBufferBytes) {
    head += cached.body;
    if (ctx.client.write_all(head, ctx.options.write_timeout).status != IoStatus::ok) {
      ctx.persistent = false;
    }
    return;
  }
  if (ctx.client.write_all(head, ctx.options.write_timeout).status != IoStatus::ok ||
      ctx.client.write_all(cached.body, ctx.options.write_timeout).status != IoStatus::ok) {
    ctx.persistent = false;
  }
}

// Connects to the origin and sends the rewritten request, body included. Answers the client
// itself (400/408/413 for the request body, 502/504 for the origin) and returns nullopt when
// that fails.
std::optional<Socket> fetch_from_origin(Context& ctx, const Request& request,
                                        const AbsoluteUri& uri, const BodyFraming& body,
                                        std::string_view buffered_body) {
  // The first kCheckedRequestBodyBytes of a body are read and checked before the origin hears
  // of the request, so a malformed chunk, an oversized Content-Length or a client that stalls
  // never leaves a half-sent request at the origin (request smuggling, slow clients: issue 10)
  // — whole bodies, for every body that fits, which is nearly all of them. A longer body (an
  // upload) is streamed after that: holding megabytes per worker would cost a Raspberry Pi its
  // memory. Its framing is the proxy's own, so a cut or a malformed chunk later on reaches the
  // origin only as an incomplete request on a connection we reset, never as a second request.
  std::string request_body;
  std::optional<BodyReader> rest;  // set while the body goes on past the checked part
  if (body.kind != BodyKind::none) {
    // We ask for the body ourselves, so a client waiting for 100 Continue (RFC 9110 §10.1.1)
    // gets it from us; an HTTP/1.0 client may not be sent a 1xx (RFC 9110 §15.2).
    if (ctx.version_minor >= 1 && field_has_token(request.fields, "Expect", "100-continue")) {
      ctx.sent_continue = true;
      ctx.client.write_all("HTTP/1.1 100 Continue\r\n\r\n", ctx.options.write_timeout);
    }
    rest.emplace(body);
    bool whole = false;
    if (!read_request_body(ctx, body, buffered_body, *rest, request_body, whole)) {
      return std::nullopt;
    }
    if (whole) rest.reset();
  }
  std::optional<Socket> origin = connect_to_origin(ctx, uri.host, uri.port);
  if (!origin) return std::nullopt;
  // A chunked body that was read whole was decoded above: the origin gets a Content-Length.
  // A streamed one keeps the client's kind of framing, re-made by us.
  const bool stream_chunked = rest && body.kind == BodyKind::chunked;
  std::string fields = via_field(ctx, request.version_minor);
  fields.resize(fields.size() - 2);  // build_origin_request adds the CRLF
  const std::string framing = origin_framing_field(
      request, body, rest ? body.length : request_body.size(), stream_chunked);
  if (!framing.empty()) fields.append("\r\n").append(framing);
  std::string out = build_origin_request(request, uri, fields);
  if (stream_chunked) {
    char size_line[32];
    int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", request_body.size());
    out.append(size_line, static_cast<std::size_t>(n)).append(request_body).append("\r\n");
  } else {
    out += request_body;
  }
  if (origin->write_all(out, ctx.options.write_timeout).status != IoStatus::ok) {
    reply_error(ctx, 502, "origin closed the connection before taking the request");
    return std::nullopt;
  }
  if (rest && !stream_request_body(ctx, *origin, *rest, stream_chunked, request_body.size())) {
    return std::nullopt;
  }
  return origin;
}

// Reads the start of a request body into `out`: the whole body (`whole` set), or its first
// kCheckedRequestBodyBytes or a little more (`whole` clear; `reader` goes on from there), all
// within the client timeout: a body trickled in a byte at a time cannot hold a worker longer
// than a stalled one. Answers the client itself (400, 408, 413) and returns false on failure.
bool read_request_body(Context& ctx, const BodyFraming& framing, std::string_view buffered,
                       BodyReader& reader, std::string& out, bool& whole) {
  const std::uint64_t limit = ctx.options.max_request_body;
  if (framing.kind == BodyKind::content_length && framing.length > limit) {
    reply_error(ctx, 413, "request body of " + std::to_string(framing.length) +
                              " bytes is over this proxy's limit of " + std::to_string(limit) +
                              " (--max-request-body-bytes)");
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + ctx.options.client_timeout;
  std::array<char, 16 * 1024> chunk;
  std::string_view input = buffered;
  for (;;) {
    BodyReader::Result fed = reader.feed(input, out);
    if (fed.error) {
      reply_error(ctx, 400, "malformed chunked request body");
      return false;
    }
    if (out.size() > limit) {
      reply_error(ctx, 413, "request body over this proxy's limit of " + std::to_string(limit) +
                                " bytes (--max-request-body-bytes)");
      return false;
    }
    whole = fed.done;
    if (fed.done || out.size() >= kCheckedRequestBodyBytes) return true;
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    IoResult got = ctx.client.read_some(chunk, std::max(left, Millis{0}));
    switch (got.status) {
      case IoStatus::ok:
        input = std::string_view(chunk.data(), got.bytes);
        break;
      case IoStatus::timeout:
        reply_error(ctx, 408, "request body not received in time");
        return false;
      case IoStatus::cancelled:
        return false;
      case IoStatus::eof:
      case IoStatus::error:
        log_failure(ctx, "client did not send its whole request body");
        return false;
    }
  }
}

// Streams the rest of a long request body from the client to the origin (`already` decoded
// bytes went with the head), re-chunked when `chunked`. Each read from the client is bounded by
// the client timeout, not the whole body: an upload of megabytes may take longer than a head.
// On failure the origin connection is reset — it never takes an incomplete body for a whole
// one — the client is answered (400, 408, 413) and false returned. An origin that stops taking
// the body may have answered already (413, 401...): true, and its answer is relayed.
bool stream_request_body(Context& ctx, Socket& origin, BodyReader& reader, bool chunked,
                         std::uint64_t already) {
  BodySink sink{&origin, chunked, nullptr, 0, {}};
  sink.limit = ctx.options.max_request_body;
  sink.delivered = already;
  switch (relay_body(ctx.client, {}, reader, sink, ctx.options.client_timeout,
                     ctx.options.write_timeout)) {
    case BodyOutcome::complete:
      if (chunked && origin.write_all("0\r\n\r\n", ctx.options.write_timeout).status != IoStatus::ok) {
        break;  // the origin stopped reading: see what it said
      }
      return true;
    case BodyOutcome::sink_failed:
      log_failure(ctx, "origin stopped taking the request body; relaying what it answered");
      return true;
    case BodyOutcome::malformed:
      origin.reset();
      reply_error(ctx, 400, "malformed chunked request body (after the first MiB; the origin "
                            "connection was reset)");
      return false;
    case BodyOutcome::too_large:
      origin.reset();
      reply_error(ctx, 413, "request body over this proxy's limit of " +
                                std::to_string(ctx.options.max_request_body) +
                                " bytes (--max-request-body-bytes)");
      return false;
    case BodyOutcome::source_timeout:
      origin.reset();
      reply_error(ctx, 408, "request body stalled");
      return false;
    case BodyOutcome::source_failed:
      origin.reset();
      log_failure(ctx, "client did not send its whole request body; origin connection reset");
      return false;
    case BodyOutcome::cancelled:
      origin.reset();
      return false;
  }
  return true;
}

// CONNECT host:port (RFC 9110 §9.3.6): check the target and the port, connect, answer 200 and
// relay bytes both ways until both sides are done. The connection ends with the tunnel.
// Returns false when the tunnel was cut (reset, shutdown): the caller resets the client.
// With options.adopt_tunnel the relay is handed over after the 200 and `client` left empty.
bool serve_connect(Context& ctx, Socket& client, const Request& request,
                   std::string_view early_bytes) {
  std::optional<AbsoluteUri> target = parse_authority_form(request.target);
  if (!target) {
    reply_error(ctx, 400, "CONNECT needs an authority-form target, such as "
                          "CONNECT example.com:443 HTTP/1.1");
    return true;
  }
  const auto& ports = ctx.options.connect_ports;
  if (std::find(ports.begin(), ports.end(), target->port) == ports.end()) {
    // Without this, the proxy would relay to any port: SMTP spam, internal services.
    reply_error(ctx, 403, "CONNECT to port " + std::to_string(target->port) +
                              " is not allowed (--connect-ports)");
    return true;
  }
  // A place among max_tunnels, given back however this returns.
  std::atomic<std::uint64_t>& open = ctx.stats.tunnels_open;
  const std::uint64_t now_open = open.fetch_add(1, std::memory_order_relaxed) + 1;
  struct Release {
    std::atomic<std::uint64_t>& open;
    bool handed_over = false;  // then the taker gives the place back
    ~Release() {
      if (!handed_over) open.fetch_sub(1, std::memory_order_relaxed);
    }
  } release{open};
  if (ctx.options.max_tunnels != 0 && now_open > ctx.options.max_tunnels) {
    reply_error(ctx, 503, "too many CONNECT tunnels open (--max-tunnels " +
                              std::to_string(ctx.options.max_tunnels) + ")");
    return true;
  }
  std::optional<Socket> origin = connect_to_origin(ctx, target->host, target->port);
  if (!origin) return true;
  ctx.stats.tunnels.fetch_add(1, std::memory_order_relaxed);
  // No Content-Length or Transfer-Encoding in a 2xx to CONNECT (RFC 9110 §9.3.6).
  if (ctx.client.write_all("HTTP/1.1 200 Connection Established\r\nX-Cache: MISS\r\n\r\n",
                           ctx.options.write_timeout).status != IoStatus::ok ||
      (!early_bytes.empty() &&
       origin->write_all(early_bytes, ctx.options.write_timeout).status != IoStatus::ok)) {
    origin->reset();
    return true;
  }
  if (ctx.options.adopt_tunnel) {
    release.handed_over = true;
    ctx.options.adopt_tunnel(
        EstablishedTunnel{std::move(client), std::move(*origin), ctx.peer, request.target});
    return true;  // `client` is empty now: closing it does nothing
  }
  TunnelResult result = run_tunnel(ctx.client, *origin, ctx.options.tunnel_idle_timeout,
                                   ctx.options.write_timeout);
  switch (result.end) {
    case TunnelEnd::closed:
      return true;
    case TunnelEnd::idle:
      log_failure(ctx, "tunnel idle for " + std::to_string(ctx.options.tunnel_idle_timeout.count()) +
                           " ms; closed");
      return true;
    case TunnelEnd::cancelled:
    case TunnelEnd::error:
      origin->reset();  // neither side may take a cut stream for a finished one
      return false;
  }
  return true;
}

// Reads the origin's response head, skipping interim 1xx responses. Answers the client itself
// (502/504) and returns false on failure. On success `buffer` holds the head and any body
// bytes after it; `head_bytes` marks the boundary.
bool read_response_head(Context& ctx, const Socket& origin, std::string& buffer,
                        ResponseHead& head, std::size_t& head_bytes) {
  std::array<char, 16 * 1024> chunk;
  for (;;) {
    ResponseParseResult parsed = parse_response_head(buffer, head, kMaxResponseHead);
    if (parsed.status == ParseStatus::invalid) {
      reply_error(ctx, 502, "malformed response from origin: " + parsed.error_reason);
      return false;
    }
    if (parsed.status == ParseStatus::complete) {
      // Interim responses (100 Continue, 103 Early Hints) go on to an HTTP/1.1 client
      // (RFC 9110 §15.2: a proxy forwards them, but never to HTTP/1.0). A 100 is dropped when
      // we answered the client's Expect ourselves. The final response follows.
      if (head.status >= 100 && head.status < 200 && head.status != 101) {
        if (ctx.version_minor >= 1 && !(head.status == 100 && ctx.sent_continue)) {
          std::string interim = "HTTP/1.1 " + std::to_string(head.status) + " " + head.reason +
                                "\r\n";
          for (const auto& field : head.fields) {
            if (is_hop_by_hop_in(field.name, head.fields)) continue;
            interim.append(field.name).append(": ").append(field.value).append("\r\n");
          }
          interim += via_field(ctx, head.version_minor) + "\r\n";
          if (ctx.client.write_all(interim, ctx.options.write_timeout).status != IoStatus::ok) {
            log_failure(ctx, "client went away before the final response");
            return false;
          }
        }
        buffer.erase(0, parsed.consumed);
        continue;
      }
      if (head.status < 200) {
        reply_error(ctx, 502, "origin switched protocols, which this proxy never asked for");
        return false;
      }
      head_bytes = parsed.consumed;
      return true;
    }
    IoResult got = origin.read_some(chunk, ctx.options.origin_timeout,
                                    ctx.options.drop_abandoned ? ctx.client.fd() : -1);
    switch (got.status) {
      case IoStatus::ok:
        buffer.append(chunk.data(), got.bytes);
        break;
      case IoStatus::timeout:
        reply_error(ctx, 504, "origin did not answer within " +
                                  std::to_string(ctx.options.origin_timeout.count()) + " ms");
        return false;
      case IoStatus::cancelled:
        if (ctx.options.drop_abandoned) {
          log_failure(ctx, "client hung up (or shutdown cut the wait) before the origin "
                           "answered; origin request dropped, nothing stored");
        }
        return false;
      case IoStatus::eof:
        reply_error(ctx, 502, buffer.empty() ? "origin closed the connection without answering"
                                             : "origin closed the connection mid-head");
        return false;
      case IoStatus::error:
        reply_error(ctx, 502, "origin connection failed while reading the response head");
        return false;
    }
  }
}

// Relays the origin's response to the client, streaming the body, and stores it when it is
// complete and cacheable. `may_store` is false when the request rules storing out.
// Returns false when the response was cut after its head went out and the client, reading a
// body that ends at close, could not tell a cut from the end: the caller then resets the
// connection instead of closing it.
bool relay_response(Context& ctx, const Socket& origin, const Request& request,
                    const std::string& key, bool may_store, Cache& cache) {
  std::string buffer;
  ResponseHead head;
  std::size_t head_bytes = 0;
  if (!read_response_head(ctx, origin, buffer, head, head_bytes)) {
    ctx.persistent = false;  // a cut (shutdown) gets no reply, so nothing may follow it
    return true;
  }
  const UnixSeconds response_time = unix_now();
  if (ctx.revalidating && head.status == 304) {
    serve_revalidated(ctx, head, request, key, may_store, cache);
    return true;
  }
  std::optional<BodyFraming> framing = response_body_framing(head, request.method);
  if (!framing) {
    reply_error(ctx, 502, "origin sent conflicting or malformed Content-Length, or a "
                          "transfer coding other than chunked");
    return true;
  }
  // Before the client hears the answer, so a GET it sends next cannot meet the old entry.
  if (is_unsafe_method(request.method) && head.status >= 200 && head.status < 400) {
    invalidate_after_unsafe(cache, key, head);
  }

  // The head we store has only end-to-end fields; the head we send adds this hop's framing.
  std::string stored_head = "HTTP/1.1 " + std::to_string(head.status) + " " + head.reason + "\r\n";
  for (const auto& field : head.fields) {
    // A 204 may not carry Content-Length (RFC 9110 §8.6); a 304's or a HEAD's describes the
    // GET's body and goes on.
    bool framing_field = iequals(field.name, "Content-Length") &&
                         (framing->kind != BodyKind::none || head.status == 204);
    if (framing_field || iequals(field.name, "X-Cache") || is_hop_by_hop_in(field.name, head.fields)) {
      continue;
    }
    if (iequals(field.name, "Age")) continue;  // the age is kept in Freshness, sent afresh
    stored_head.append(field.name).append(": ").append(field.value).append("\r\n");
  }
  // A response cached or forwarded without a Date gets one (RFC 9110 §6.6.1).
  if (!find_field(head.fields, "Date")) {
    stored_head += "Date: " + format_http_date(response_time) + "\r\n";
  }
  // An HTTP/1.0 client cannot read chunked coding: it gets the decoded body, ended by close.
  const bool chunked_to_client = framing->kind == BodyKind::chunked && request.version_minor >= 1;
  std::string sent_head = stored_head;
  if (auto age = find_field(head.fields, "Age")) sent_head.append("Age: ").append(*age).append("\r\n");
  if (framing->kind == BodyKind::content_length) {
    sent_head += "Content-Length: " + std::to_string(framing->length) + "\r\n";
  } else if (chunked_to_client) {
    sent_head += "Transfer-Encoding: chunked\r\n";
  }
  const bool client_sees_cut = framing->kind == BodyKind::content_length || chunked_to_client;
  // A body that ends at close ends the connection with it (RFC 9112 §9.3).
  if (!client_sees_cut && framing->kind != BodyKind::none) ctx.persistent = false;
  sent_head += via_field(ctx, head.version_minor) + connection_field(ctx) + "X-Cache: MISS\r\n\r\n";
  if (ctx.client.write_all(sent_head, ctx.options.write_timeout).status != IoStatus::ok) {
    log_failure(ctx, "client went away before the response head was sent");
    ctx.persistent = false;
    return true;
  }
  // Only a complete body leaves the connection reusable; every other outcome below closes it.
  const bool persistent = ctx.persistent;
  ctx.persistent = false;

  // Capture the body only while it could still be stored: never more than one object may be.
  const std::size_t object_limit = std::min(cache.max_object_bytes(), cache.capacity_bytes());
  // RFC 9111 §3 (http_cache_rules.h): whether this response may be stored, and how long it is fresh.
  const std::optional<Freshness> freshness =
      make_freshness(head.status, head.fields, ctx.request_time, response_time,
                     ctx.options.heuristic_freshness.count());
  CachedResponse entry{std::move(stored_head), {}, freshness.value_or(Freshness{}),
                       vary_fields(head.fields, request).value_or(std::vector<VaryField>{})};
  const std::size_t entry_overhead = entry_bytes(key, entry);
  const bool storable =
      may_store && framing->kind != BodyKind::none && entry_overhead <= object_limit &&
      decide_store(request, request_cache_rules(request), head.status, head.fields, freshness).store;
  std::string captured;
  BodyReader reader(*framing);
  BodySink sink{&ctx.client, chunked_to_client, storable ? &captured : nullptr,
                storable ? object_limit - entry_overhead : 0, {}};
  bool stored = false;
  auto store = [&] {
    stored = true;
    entry.body = std::move(captured);
    cache.insert(key, std::make_shared<const CachedResponse>(std::move(entry)));
  };
  sink.before_last_write = store;
  BodyOutcome outcome =
      relay_body(origin, std::string_view(buffer).substr(head_bytes), reader, sink,
                 ctx.options.origin_timeout, ctx.options.write_timeout);
  switch (outcome) {
    case BodyOutcome::complete:
      if (chunked_to_client &&
          ctx.client.write_all("0\r\n\r\n", ctx.options.write_timeout).status != IoStatus::ok) {
        return true;
      }
      ctx.persistent = persistent;
      // sink.capture is reset to null once the body outgrew what may be stored. A body that
      // ended at the origin's close was not known to be complete before its last write.
      if (sink.capture != nullptr && !stored) store();
      return true;
    case BodyOutcome::source_failed:
      log_failure(ctx, "origin closed or reset the connection mid-body; response cut, nothing "
                       "stored");
      return client_sees_cut;
    case BodyOutcome::source_timeout:
      log_failure(ctx, "origin stalled mid-body; response cut, nothing stored");
      return client_sees_cut;
    case BodyOutcome::malformed:
      log_failure(ctx, "origin sent a malformed chunked body; response cut, nothing stored");
      return client_sees_cut;
    case BodyOutcome::sink_failed:
      log_failure(ctx, "client went away mid-body; nothing stored");
      return true;
    case BodyOutcome::cancelled:
    case BodyOutcome::too_large:  // no limit on a response body: not reached
      return client_sees_cut;
  }
  return true;
}

// A 304 answered our conditional request for a stale stored response (RFC 9111 §4.3.3): the
// stored response, its fields updated from the 304 (§4.3.4), is fresh again. It replaces the
// stored entry (or leaves the cache, if the update forbids storing it) and is served as a HIT.
void serve_revalidated(Context& ctx, const ResponseHead& not_modified, const Request& request,
                       const std::string& key, bool may_store, Cache& cache) {
  const CachedResponse& stale = *ctx.revalidating;
  std::optional<ResponseHead> stored = parse_stored_head(stale.head);
  if (!stored) {  // serve_request parsed it before asking: cannot happen
    reply_error(ctx, 502, "stored response unreadable after revalidation");
    return;
  }
  const UnixSeconds response_time = unix_now();
  HeaderFields update = not_modified.fields;
  // A 304 without Date is dated on arrival (RFC 9110 §6.6.1), or the stored Date would age it.
  if (!find_field(update, "Date")) update.push_back({"Date", format_http_date(response_time)});
  const HeaderFields fields = merge_not_modified(stored->fields, update);
  const std::optional<Freshness> freshness =
      make_freshness(stored->status, fields, ctx.request_time, response_time,
                     ctx.options.heuristic_freshness.count());
  auto refreshed = std::make_shared<const CachedResponse>(
      CachedResponse{stored_head_text(stored->status, stored->reason, fields), stale.body,
                     freshness.value_or(Freshness{response_time, 0, 0, false}),
                     vary_fields(fields, request).value_or(std::vector<VaryField>{})});
  if (may_store) {
    if (decide_store(request, request_cache_rules(request), stored->status, fields, freshness)
            .store) {
      cache.insert(key, refreshed);
    } else {
      cache.erase(key);
    }
  }
  send_cached(ctx, *refreshed);
}

// ---- Helpers: streaming a body, answering with an error, closing. ----

// Streams one body from `source` to `sink`, starting with bytes already buffered. Holds at most
// one buffer of it in memory, plus what the sink captures for the cache.
BodyOutcome relay_body(const Socket& source, std::string_view buffered, BodyReader& reader,
                       BodySink& sink, Millis read_timeout, Millis write_timeout) {
  std::string decoded;
  std::array<char, kBufferBytes> chunk;
  auto deliver = [&](bool last) -> bool {
    if (sink.capture != nullptr && !decoded.empty()) {
      if (sink.capture->size() + decoded.size() > sink.capture_limit) {
        sink.capture->clear();
        sink.capture->shrink_to_fit();
        sink.capture = nullptr;  // too big to store: stop holding it
      } else {
        sink.capture->append(decoded);
      }
    }
    if (last && sink.capture != nullptr && sink.before_last_write) sink.before_last_write();
    if (decoded.empty()) return true;
    bool ok = true;
    if (sink.socket != nullptr) {
      if (sink.encode_chunked) {
        char size_line[32];
        int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", decoded.size());
        decoded.insert(0, size_line, static_cast<std::size_t>(n));
        decoded.append("\r\n");
      }
      ok = sink.socket->write_all(decoded, write_timeout).status == IoStatus::ok;
    }
    decoded.clear();
    return ok;
  };
  auto consume = [&](std::string_view input) -> std::optional<BodyOutcome> {
    BodyReader::Result r = reader.feed(input, decoded);
    if (r.error) return BodyOutcome::malformed;
    sink.delivered += decoded.size();
    if (sink.delivered > sink.limit) return BodyOutcome::too_large;
    if (!deliver(r.done)) return BodyOutcome::sink_failed;
    if (r.done) return BodyOutcome::complete;
    return std::nullopt;
  };

  if (reader.done()) return BodyOutcome::complete;
  if (!buffered.empty()) {
    if (auto outcome = consume(buffered)) return *outcome;
  }
  for (;;) {
    IoResult got = source.read_some(chunk, read_timeout);
    switch (got.status) {
      case IoStatus::ok:
        if (auto outcome = consume(std::string_view(chunk.data(), got.bytes))) return *outcome;
        break;
      case IoStatus::eof:
        return reader.complete_at_eof() ? BodyOutcome::complete : BodyOutcome::source_failed;
      case IoStatus::timeout:
        return BodyOutcome::source_timeout;
      case IoStatus::cancelled:
        return BodyOutcome::cancelled;
      case IoStatus::error:
        return BodyOutcome::source_failed;
    }
  }
}

// RFC 9112 §9.3: HTTP/1.1 persists unless either side says close; HTTP/1.0 only when the
// client asks with `Connection: keep-alive`.
bool wants_persistence(const Request& request) {
  if (field_has_token(request.fields, "Connection", "close")) return false;
  return request.version_minor >= 1 || field_has_token(request.fields, "Connection", "keep-alive");
}

// This hop's Connection field for the response: close unless the connection persists, and
// keep-alive spelled out for an HTTP/1.0 client, which would otherwise assume close.
std::string connection_field(const Context& ctx) {
  if (!ctx.persistent) return "Connection: close\r\n";
  return ctx.version_minor == 0 ? "Connection: keep-alive\r\n" : std::string();
}

// Connects to an origin (or a CONNECT target). Answers the client itself and returns nullopt
// on failure: 504 after connect_timeout, 503 when we are out of descriptors, else 502.
std::optional<Socket> connect_to_origin(Context& ctx, const std::string& host, std::uint16_t port) {
  ConnectResult connected = connect_tcp(host, port, ctx.options.connect_timeout);
  switch (connected.error) {
    case ConnectError::none:
      return std::move(connected.socket);
    case ConnectError::timeout:
      reply_error(ctx, 504, connected.message);
      return std::nullopt;
    case ConnectError::cancelled:
      return std::nullopt;
    case ConnectError::exhausted:
      // Our own overload, not a bad gateway: the client may retry (RFC 9110 §15.6.4).
      reply_error(ctx, 503, "no descriptor for the origin connection: " + connected.message);
      return std::nullopt;
    default:
      reply_error(ctx, 502, "origin unreachable: " + connected.message);
      return std::nullopt;
  }
}

// This hop's Via field line (RFC 9110 §7.6.3), for a message received as HTTP/1.<minor>. It
// goes after any Via the message carried, which is how a list field is appended to.
std::string via_field(const Context& ctx, int version_minor) {
  return "Via: 1." + std::to_string(version_minor) + " " + ctx.options.via_name + "\r\n";
}

// GET and HEAD are handled apart from these; CONNECT too. TRACE is left out on purpose: it
// would echo a client's credentials back through us (RFC 9110 §9.3.8), and nobody needs it.
bool is_forwarded_method(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    if (method == known) return true;
  }
  return false;
}

// Methods are case-sensitive (RFC 9110 §9.1). OPTIONS is safe (§9.2.1); these are not.
bool is_unsafe_method(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// RFC 9111 §4.4: a successful unsafe request invalidates the target URI's entry, and those of
// Location and Content-Location when they share its origin (never another origin's: a server
// must not be able to evict a third party's entries).
void invalidate_after_unsafe(Cache& cache, const std::string& key, const ResponseHead& head) {
  cache.erase(key);
  const std::size_t path = key.find('/', key.find("://") + 3);
  const std::string origin = key.substr(0, path);  // "http://host:port"
  for (std::string_view name : {"Location", "Content-Location"}) {
    std::optional<std::string_view> value = find_field(head.fields, name);
    if (!value || value->empty()) continue;
    const bool path_only = value->front() == '/' && !value->starts_with("//");
    std::optional<AbsoluteUri> other =
        parse_absolute_uri(path_only ? origin + std::string(*value) : std::string(*value));
    if (!other) continue;
    const std::string other_key = other->cache_key();
    if (other_key.size() > origin.size() && other_key.starts_with(origin) &&
        other_key[origin.size()] == '/') {
      cache.erase(other_key);
    }
  }
}

// Answers the proxy's own `GET /metrics` (Prometheus text exposition format 0.0.4).
void send_metrics(Context& ctx, const std::string& text) {
  std::string response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
                         "charset=utf-8\r\nCache-Control: no-store\r\nContent-Length: " +
                         std::to_string(text.size()) + "\r\n" + connection_field(ctx) +
                         "X-Cache: MISS\r\n\r\n" + text;
  if (ctx.client.write_all(response, ctx.options.write_timeout).status != IoStatus::ok) {
    ctx.persistent = false;
  }
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

void log_failure(const Context& ctx, std::string_view message) {
  std::string line = "client " + ctx.peer;
  if (!ctx.what.empty()) line += " " + ctx.what;
  line += ": ";
  line += message;
  log_line(line);
}

// Sends a response the proxy makes itself: a status, a one-line plain-text body.
void reply_error(Context& ctx, int status, std::string_view detail) {
  ctx.stats.errors.fetch_add(1, std::memory_order_relaxed);
  ctx.persistent = false;  // after an error, the rest of the connection's bytes are suspect
  log_failure(ctx, std::to_string(status) + " " + std::string(detail));
  std::string body = std::to_string(status) + " " + std::string(reason_phrase(status)) + ": " +
                     std::string(detail) + "\n";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " +
                         std::string(reason_phrase(status)) +
                         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                         std::to_string(body.size()) +
                         (status == 503 ? "\r\nRetry-After: 1" : "") +
                         "\r\nConnection: close\r\nX-Cache: MISS\r\n\r\n" + body;
  ctx.client.write_all(response, ctx.options.write_timeout);
}

// Closes without destroying our last bytes in flight: closing a socket with unread input makes
// the kernel send RST, which can discard a response the client has not read yet. So when the
// client sent more than we read, half-close and drain briefly first.
void finish(Socket& client) {
  int unread = 0;
  if (::ioctl(client.fd(), FIONREAD, &unread) == 0 && unread > 0) {
    client.shutdown_write();
    std::array<char, 4096> sink;
    const auto deadline = std::chrono::steady_clock::now() + Millis{1000};
    for (;;) {
      auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      if (left <= Millis{0} || client.read_some(sink, left).status != IoStatus::ok) break;
    }
  }
  client.close();
}

}  // namespace
}  // namespace proxy
