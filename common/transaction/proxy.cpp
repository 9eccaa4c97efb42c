// The proxy transaction, as the protocol runs it: read_request, cache.find, fetch_from_origin,
// relay_response, cache.insert. serve_request comes first and reads as that summary; the steps
// follow in the same order. What a request is — refused, /metrics, a tunnel, a cacheable GET,
// something to forward — is judged once, by classify (admission.cpp), which read_request calls. Request bodies (request_body.cpp), CONNECT (connect_method.cpp),
// the body relay (body_relay.cpp), a hit's response (hit_response.cpp) and the proxy's own
// replies (replies.cpp) live in files of their own, and so do origin connections
// (origin_response.cpp). Stages 1-3 call serve_connection (one request per connection); stage 4
// calls serve_request per request on a persistent connection, after its poller has tried
// serve_hit_now (serve_hit_now.cpp).
#include "transaction/proxy.h"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/rewrite.h"
#include "http/uri.h"
#include "poller/origin_pool.h"
#include "transaction/body_relay.h"
#include "transaction/transaction.h"

namespace proxy {
namespace {

// The steps of the transaction, in the order the protocol runs them; serve_request below
// calls them, and their definitions follow it in the same order.
bool read_request(Context& ctx, std::string& buffer, ClassifiedRequest& request);
bool serve_http(Context& ctx, Cache& cache, const ClassifiedRequest& admitted,
                std::string_view after_head);
std::optional<OriginConnection> fetch_from_origin(Context& ctx, const Request& request,
                                                  const AbsoluteUri& uri,
                                                  const BodyFraming& framing,
                                                  std::string_view buffered_body);
// Helpers, defined last.
bool may_send_late_body(const ResponseHead& head, std::string_view method);
bool is_unsafe_method(std::string_view method);
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
  connection.last_status_ = 0;
  ctx.status_out = &connection.last_status_;
  ctx.looked_up = std::move(connection.looked_up_);
  connection.looked_up_.reset();
  std::string buffer = std::move(connection.buffered_);
  connection.buffered_.clear();
  // Stage 4's poller may have classified the request at the front of these bytes already: it is
  // carried here, not parsed again.
  ClassifiedRequest admitted;
  if (connection.front_) admitted = std::move(*connection.front_);
  connection.front_.reset();
  if (!read_request(ctx, buffer, admitted)) {
    finish(client);
    return false;
  }
  const Request& request = admitted.request;
  const std::string_view after_head = std::string_view(buffer).substr(admitted.head_bytes);
  ctx.version_minor = request.version_minor;
  ctx.head_method = request.method == "HEAD";
  ctx.persistent = admitted.persistent;
  if (ctx.persistent) connection.buffered_ = after_head;  // the next pipelined request

  bool orderly = true;  // false: the response was cut, and the client must see a reset
  switch (admitted.route) {
    case Route::refuse:
      reply_error(ctx, admitted.error_status, admitted.error_detail);
      break;
    case Route::metrics:
      send_metrics(ctx, options.metrics());
      break;
    case Route::tunnel:
      orderly = serve_connect(ctx, client, request, after_head);
      break;
    case Route::cache_get:
    case Route::forward:
      orderly = serve_http(ctx, cache, admitted, after_head);
      break;
  }
  return end_request(client, ctx, orderly);
}

bool end_request(Socket& client, const Context& ctx, bool orderly) {
  if (!orderly) {
    client.reset();  // a reset, not a FIN: the client must not take a cut body as whole
    return false;
  }
  if (ctx.persistent) return true;
  finish(client);
  return false;
}

namespace {

// Reads until a complete request head is buffered, and classifies it (admission.h). On success
// `buffer` starts with the head and may hold the first bytes of a body, or of a pipelined
// request, after it (request.head_bytes marks the boundary). `buffer` may arrive holding bytes
// read earlier on this connection, and `request` classify's verdict on them, made by stage 4's
// poller: then nothing is parsed again. A malformed head is answered here (400, 414, 431, 505).
bool read_request(Context& ctx, std::string& buffer, ClassifiedRequest& request) {
  const RequestLimits& limits = ctx.options.limits;
  const auto deadline = std::chrono::steady_clock::now() + ctx.options.client_timeout;
  std::array<char, 16 * 1024> chunk;
  // A pipelined request may already be buffered whole: parse before waiting for more.
  bool worth_parsing = !buffer.empty();
  for (;;) {
    if (worth_parsing) {
      if (request.status == ParseStatus::incomplete) {  // else the poller's verdict is carried
        buffer.erase(0, leading_empty_lines(buffer));  // RFC 9112 §2.2
        request = classify(buffer, ctx.options);
      }
      if (request.status != ParseStatus::incomplete) {
        ctx.stats.requests.fetch_add(1, std::memory_order_relaxed);
        ++*ctx.connection_requests;
      }
      if (request.status == ParseStatus::complete) {
        ctx.what = request.request.method + " " + request.request.target;
        return true;
      }
      if (request.status == ParseStatus::invalid) {
        reply_error(ctx, request.error_status, request.error_detail);
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

// An http:// request: a fresh stored response answers it (a hit), or it goes to the origin (a
// miss) and the response is relayed, and stored when it may be. Returns false when the response
// was cut after its head went out.
bool serve_http(Context& ctx, Cache& cache, const ClassifiedRequest& admitted,
                std::string_view after_head) {
  const Request& request = admitted.request;
  const AbsoluteUri& uri = *admitted.uri;
  const BodyFraming& body = *admitted.body;
  const std::string& key = admitted.cache_key;
  const RequestCacheRules& rules = admitted.rules;
  // RFC 9111 §4: only a GET is answered from the cache (a HEAD never gets the GET's entry, and
  // every other method must reach the origin), and only by a stored response that is fresh and
  // acceptable to the request (route cache_get); a stale one with a validator is revalidated (a
  // 304 then serves it, as a HIT).
  const bool get = request.method == "GET";
  ctx.request_time = unix_now();
  std::shared_ptr<const CachedResponse> cached;
  if (admitted.route == Route::cache_get) {
    // serve_hit_now may have looked this request up already: a lookup counts once.
    cached = ctx.looked_up && ctx.looked_up->key == key ? std::move(ctx.looked_up->entry)
                                                        : cache.find(key);
  }
  const StoredUse use =
      cached ? decide_use(*cached, request, rules, ctx.request_time) : StoredUse::miss;
  if (use == StoredUse::serve) {
    send_cached(ctx, *cached);
    return true;
  }
  if (get && rules.only_if_cached) {
    reply_error(ctx, 504, "only-if-cached, and no fresh stored response (RFC 9111 §5.2.1.7)");
    return true;
  }
  std::optional<ResponseHead> stored_head =
      use == StoredUse::revalidate ? parse_stored_head(cached->head) : std::nullopt;
  if (stored_head) ctx.revalidating = cached;
  std::optional<OriginConnection> origin = fetch_from_origin(
      ctx, stored_head ? conditional_request(request, stored_head->fields) : request, uri, body,
      after_head);
  if (!origin) {
    ctx.persistent = false;  // answered with an error, or cut without one at shutdown
    return true;
  }
  // Only a GET's response is stored, and not one with a body: the entry is not keyed by it.
  const bool may_store = get && body.kind == BodyKind::none && rules.may_store;
  const bool orderly = relay_response(ctx, *origin, request, key, may_store, cache, {});
  finish_origin(ctx, std::move(*origin));  // back to the origin pool, when it may carry more
  return orderly;
}

// Sends the rewritten request to the origin, body included (request_body.cpp), on a kept
// connection when ctx.options.origin_pool has one, else on a new one. Answers the client itself
// (400/408/413 for the request body, 502/504 for the origin) and returns nullopt when that fails.
std::optional<OriginConnection> fetch_from_origin(Context& ctx, const Request& request,
                                                  const AbsoluteUri& uri,
                                                  const BodyFraming& framing,
                                                  std::string_view buffered_body) {
  RequestBody body;
  if (!read_request_body(ctx, request, framing, buffered_body, body)) return std::nullopt;
  bool keep_open = false;
  std::string out = origin_request_bytes(ctx, request, uri, body, keep_open);
  // A request that may not be sent twice never goes out on a kept connection, which the origin
  // may be closing just then: it takes a new one (and may leave it in the pool afterwards).
  std::optional<OriginConnection> origin =
      open_origin(ctx, uri.host, uri.port, keep_open && is_idempotent(request.method));
  if (!origin) return std::nullopt;
  // A streamed body may be cut, or answered before the origin took all of it: such a
  // connection is never kept, and the request never sent twice.
  origin->keep_allowed = keep_open && !body.rest;
  origin->may_retry = may_retry_on_new_connection(request.method, origin->reused, false,
                                                  !body.rest, 0);
  if (origin->may_retry) origin->resend = out;
  if (!send_to_origin(ctx, *origin, out)) return std::nullopt;
  if (!stream_request_body(ctx, origin->socket, body)) return std::nullopt;
  return origin;
}

}  // namespace

std::string origin_request_bytes(const Context& ctx, const Request& request,
                                 const AbsoluteUri& uri, const RequestBody& body,
                                 bool& keep_open) {
  std::string fields = via_field(ctx, request.version_minor);
  fields.resize(fields.size() - 2);  // build_origin_request adds the CRLF
  if (std::string framing_field = body.framing_field(request); !framing_field.empty()) {
    fields += "\r\n" + framing_field;
  }
  std::string out = build_origin_request(request, uri, fields);
  // With a pool, the request leaves the connection open (stages 1-3 close it after one).
  keep_open = ctx.options.origin_pool != nullptr && keep_origin_connection_open(out);
  return out + body.first_bytes();
}

namespace {

// Sends the response head: the stored head plus this hop's Age, framing, Via, Connection and
// X-Cache. Returns false (the connection then ends) when the client went away.
bool send_response_head(Context& ctx, const ResponseHead& head, const std::string& stored_head,
                        const BodyFraming& framing, bool chunked_to_client) {
  std::string sent_head = stored_head;
  if (auto age = find_field(head.fields, "Age")) sent_head.append("Age: ").append(*age).append("\r\n");
  if (framing.kind == BodyKind::content_length) {
    sent_head += "Content-Length: " + std::to_string(framing.length) + "\r\n";
  } else if (chunked_to_client) {
    sent_head += "Transfer-Encoding: chunked\r\n";
  }
  sent_head += via_field(ctx, head.version_minor) + connection_field(ctx) + "X-Cache: MISS\r\n\r\n";
  if (send_to_client(ctx, sent_head) != IoStatus::ok) {
    log_failure(ctx, "client went away before the response head was sent");
    ctx.persistent = false;
    return false;
  }
  return true;
}

// Logs why a body relay did not complete. Returns what relay_response returns: false when the
// client, reading a body that ends at close, could not tell the cut from the end.
bool report_cut(Context& ctx, BodyOutcome outcome, bool client_sees_cut) {
  switch (outcome) {
    case BodyOutcome::source_failed:
      log_failure(ctx, "origin closed or reset the connection mid-body; response cut, nothing "
                       "stored");
      break;
    case BodyOutcome::source_timeout:
      log_failure(ctx, "origin stalled mid-body; response cut, nothing stored");
      break;
    case BodyOutcome::malformed:
      log_failure(ctx, "origin sent a malformed chunked body; response cut, nothing stored");
      break;
    case BodyOutcome::sink_failed:
      log_failure(ctx, "client went away mid-body; nothing stored");
      return true;
    case BodyOutcome::complete:
    case BodyOutcome::cancelled:
    case BodyOutcome::too_large:  // no limit on a response body: not reached
      break;
  }
  return client_sees_cut;
}

}  // namespace

// Relays the origin's response (transaction.h): `buffer` may arrive holding its first bytes,
// read by stage 4's poller.
bool relay_response(Context& ctx, OriginConnection& origin, const Request& request,
                    const std::string& key, bool may_store, Cache& cache, std::string buffer) {
  ResponseHead head;
  std::size_t head_bytes = 0;
  if (!read_response_head(ctx, origin, buffer, head, head_bytes)) {
    ctx.persistent = false;  // a cut (shutdown) gets no reply, so nothing may follow it
    return true;
  }
  const UnixSeconds response_time = unix_now();
  // RFC 9112 §9.3: the origin keeps the connection open after this response unless it is
  // HTTP/1.0 or says close; the body's framing decides below whether its end can be seen.
  const bool origin_persists = origin.keep_allowed && head.version_minor >= 1 &&
                               !field_has_token(head.fields, "Connection", "close") &&
                               !may_send_late_body(head, request.method);
  if (ctx.revalidating && head.status == 304) {
    origin.reusable = origin_persists && buffer.size() == head_bytes;  // a 304 has no body
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

  std::string stored_head = head_to_store(head, *framing, response_time);
  // An HTTP/1.0 client cannot read chunked coding: it gets the decoded body, ended by close.
  const bool chunked_to_client = framing->kind == BodyKind::chunked && request.version_minor >= 1;
  const bool client_sees_cut = framing->kind == BodyKind::content_length || chunked_to_client;
  // A body that ends at close ends the connection with it (RFC 9112 §9.3).
  if (!client_sees_cut && framing->kind != BodyKind::none) ctx.persistent = false;
  if (!send_response_head(ctx, head, stored_head, *framing, chunked_to_client)) return true;
  // Only a complete body leaves the connection reusable; every other outcome below closes it.
  const bool persistent = ctx.persistent;
  ctx.persistent = false;

  // The body, captured only while it could still be stored: never more than one object may be.
  const std::size_t object_limit = std::min(cache.max_object_bytes(), cache.capacity_bytes());
  std::optional<CachedResponse> entry;
  if (may_store && framing->kind != BodyKind::none) {
    entry = entry_to_store(ctx, head, request, key, std::move(stored_head), object_limit,
                           response_time);
  }
  std::string captured;
  BodySink sink;
  sink.socket = &ctx.client;
  sink.out = ctx.out;
  sink.encode_chunked = chunked_to_client;
  sink.capture = entry ? &captured : nullptr;
  sink.capture_limit = entry ? object_limit - entry_bytes(key, *entry) : 0;
  sink.hold_last = true;  // the last piece goes out after the store step below
  BodyReader reader(*framing);
  const BodyOutcome outcome =
      relay_body(origin.socket, std::string_view(buffer).substr(head_bytes), reader, sink,
                 ctx.options.origin_timeout, ctx.options.write_timeout);
  if (outcome != BodyOutcome::complete) return report_cut(ctx, outcome, client_sees_cut);
  // Whole, and its end was in its framing, not the close: the connection may carry another.
  origin.reusable = origin_persists && framing->kind != BodyKind::close_delimited &&
                    sink.surplus == 0 &&
                    (framing->kind != BodyKind::none || buffer.size() == head_bytes);

  // The store step, before the client has the last bytes: on a persistent connection it may ask
  // again the moment it has them, and must find the entry. sink.capture is null once the body
  // outgrew what may be stored.
  if (sink.capture != nullptr) {
    entry->body = std::move(captured);
    cache.insert(key, std::make_shared<const CachedResponse>(std::move(*entry)));
  }
  if (!write_held(sink, ctx.options.write_timeout) ||
      (chunked_to_client &&
       send_to_client(ctx, "0\r\n\r\n") != IoStatus::ok)) {
    return true;
  }
  ctx.persistent = persistent;
  return true;
}

namespace {

// ---- Helpers ----

// A response that has no body by rule but declares one: a 204 or 304 with a Content-Length
// other than 0 or a Transfer-Encoding (RFC 9110 §8.6, §15.3.5), or a HEAD response with a
// non-zero length. An origin that then sends those bytes after all would have them read as
// the next request's response on a kept connection (RFC 9112 §6.3), so such a connection is
// not kept: a HEAD is rare, and the other two are the origin's error.
bool may_send_late_body(const ResponseHead& head, std::string_view method) {
  const std::optional<std::string_view> length = find_field(head.fields, "Content-Length");
  const bool declares_body = (length && *length != "0") ||
                             find_field(head.fields, "Transfer-Encoding").has_value();
  return declares_body && (method == "HEAD" || head.status == 204 || head.status == 304);
}

// Methods are case-sensitive (RFC 9110 §9.1). OPTIONS is safe (§9.2.1); these are not.
bool is_unsafe_method(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// Closes without destroying our last bytes in flight (Socket::drain_and_close): only when the
// client sent more than we read, which is what makes the kernel answer a close with a reset.
void finish(Socket& client) {
  if (client.unread_bytes() > 0) {
    client.drain_and_close(Millis{1'000});
  } else {
    client.close();
  }
}

}  // namespace

// RFC 9112 §9.3: HTTP/1.1 persists unless either side says close; HTTP/1.0 only when the
// client asks with `Connection: keep-alive`.
bool wants_persistence(const Request& request) {
  if (field_has_token(request.fields, "Connection", "close")) return false;
  return request.version_minor >= 1 || field_has_token(request.fields, "Connection", "keep-alive");
}

}  // namespace proxy
