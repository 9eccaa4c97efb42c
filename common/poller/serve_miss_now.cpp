// Stage 4's miss without a thread (proxy.h, start_miss_now): the request goes to the origin on
// a kept connection from the poller, the poller waits in epoll for the answer, and an answer
// that arrives whole is relayed into the connection's unsent bytes and sent without blocking.
// Anything else goes to a worker, which goes on exactly as serve_request would have.
#include <sys/socket.h>
#include <time.h>

#include <array>
#include <cstdint>
#include <optional>

#include "poller/origin_pool.h"
#include "transaction/transaction.h"

namespace proxy {

/// A miss in flight: what serve_request would hold on its stack while it waits on the origin.
struct MissInFlight {
  Request request;
  std::string what;  ///< "GET http://host/path", for log lines
  std::string key;
  bool may_store = false;
  UnixSeconds request_time = 0;
  OriginConnection origin;
  std::string buffer;  ///< the response's bytes so far
  bool ended = false;  ///< the origin closed or failed: a worker judges what that means
  /// CLOCK_REALTIME, ns: when the request was written, and when the kernel received the
  /// answer's first byte (SO_TIMESTAMPNS; 0 until then). Their difference is the origin's own
  /// latency, whatever the poller was doing when that byte arrived (origin_latency).
  std::int64_t sent_ns = 0;
  std::int64_t first_byte_ns = 0;
};

namespace {

std::int64_t realtime_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

void MissInFlightDeleter::operator()(MissInFlight* miss) const noexcept { delete miss; }

namespace {

// serve_request's Context for a miss on a connection with this client socket and peer.
Context miss_context(const Socket& client, const std::string& peer, const MissInFlight& miss,
                     const ProxyOptions& options, ProxyStats& stats) {
  Context ctx{client, options, stats, peer, miss.what};
  ctx.persistent = true;  // start_miss_now took only requests on a persistent connection
  ctx.version_minor = miss.request.version_minor;
  ctx.request_time = miss.request_time;
  return ctx;
}

// Whether a response head (an interim 1xx or the final one) is all in `buffer`, or a malformed
// one: either way the origin has answered, and relay_response has something to go on with.
bool head_arrived(const std::string& buffer) {
  ResponseHead head;
  return parse_response_head(buffer, head, kMaxResponseHead).status != ParseStatus::incomplete;
}

}  // namespace

PendingMiss start_miss_now(ClientConnection& connection, std::string& head,
                           std::optional<ClassifiedRequest>& front, const ProxyOptions& options,
                           ProxyStats& stats) {
  // classify (admission.h) judged the request once, and serve_hit_now's lookup of it (the same
  // key) found nothing stored: a plain miss, no revalidation.
  if (options.origin_pool == nullptr || !connection.unsent_.empty() || !front ||
      front->status != ParseStatus::complete || front->path != ServingPath::poller ||
      front->route != Route::cache_get || !connection.looked_up_ ||
      connection.looked_up_->entry || connection.looked_up_->key != front->cache_key) {
    return nullptr;
  }
  const ClassifiedRequest& admitted = *front;
  if (admitted.rules.only_if_cached) return nullptr;  // a worker answers 504
  const Request& request = admitted.request;
  const AbsoluteUri& uri = *admitted.uri;
  PendingMiss miss(new MissInFlight);
  miss->key = connection.looked_up_->key;
  miss->may_store = admitted.rules.may_store;  // a GET without a body (ServingPath::poller)
  miss->what = request.method + " " + request.target;

  Context ctx{connection.socket_, options, stats, connection.peer_, miss->what};
  ctx.version_minor = request.version_minor;
  RequestBody body;  // none
  bool keep_open = false;
  const std::string out = origin_request_bytes(ctx, request, uri, body, keep_open);
  if (!keep_open) return nullptr;  // fetch_from_origin would not take a kept connection
  std::optional<Socket> kept = options.origin_pool->acquire(uri.host, uri.port);
  if (!kept) return nullptr;
  OriginConnection& origin = miss->origin;
  origin.socket = std::move(*kept);
  origin.host = uri.host;
  origin.port = uri.port;
  origin.reused = true;
  origin.keep_allowed = true;
  origin.may_retry = may_retry_on_new_connection(request.method, true, false, true, 0);
  if (origin.may_retry) origin.resend = out;
  // The kernel stamps what arrives on it from now on: the origin's latency, measured without
  // the poller's own delays (a failure only leaves origin_latency without a stamp).
  set_int_option(origin.socket, SOL_SOCKET, SO_TIMESTAMPNS, 1);
  miss->sent_ns = realtime_ns();
  // Millis{0}: never waits. A socket that does not take the request at once (full, or closed
  // by the origin) leaves it to a worker, which takes (or makes) another connection; this one,
  // with part of a request on it, is closed with `miss`.
  if (origin.socket.write_all(out, Millis{0}).status != IoStatus::ok) return nullptr;
  // Gone out: from here on the request is this miss's, as serve_request counts it.
  stats.requests.fetch_add(1, std::memory_order_relaxed);
  ++connection.requests_;
  connection.looked_up_.reset();
  miss->request_time = unix_now();
  head.erase(0, admitted.head_bytes);
  miss->request = std::move(front->request);  // the miss holds it now, as serve_request would
  front.reset();
  return miss;
}

int origin_fd(const MissInFlight& miss) noexcept { return miss.origin.socket.fd(); }

std::optional<std::chrono::nanoseconds> origin_latency(const MissInFlight& miss) noexcept {
  if (miss.sent_ns == 0 || miss.first_byte_ns < miss.sent_ns) return std::nullopt;
  return std::chrono::nanoseconds(miss.first_byte_ns - miss.sent_ns);
}

MissRead read_miss_now(MissInFlight& miss, bool& progressed) {
  progressed = false;
  std::array<char, 16 * 1024> chunk;
  while (!miss.ended && miss.buffer.size() <= kMaxResponseHead + kOneWriteBytes) {
    std::int64_t stamp = 0;
    const IoResult got = miss.origin.socket.read_now(chunk, stamp);
    if (got.status == IoStatus::ok) {
      if (miss.first_byte_ns == 0) miss.first_byte_ns = stamp;
      miss.buffer.append(chunk.data(), got.bytes);
      progressed = true;
    } else if (got.status == IoStatus::timeout) {
      break;  // nothing more has arrived
    } else {
      miss.ended = true;  // a close or a reset: the worker's read sees it too, and judges it
    }
  }
  // Past this much, the worker streams the rest: the poller holds a response only as big as
  // one it sends in one write (kOneWriteBytes).
  if (miss.ended || miss.buffer.size() > kMaxResponseHead + kOneWriteBytes) {
    return MissRead::needs_worker;
  }
  ResponseHead head;
  const ResponseParseResult parsed = parse_response_head(miss.buffer, head, kMaxResponseHead);
  if (parsed.status == ParseStatus::incomplete) return MissRead::waiting;
  if (parsed.status == ParseStatus::invalid || head.status < 200) return MissRead::needs_worker;
  const std::optional<BodyFraming> framing = response_body_framing(head, miss.request.method);
  if (!framing) return MissRead::needs_worker;
  const std::string_view body = std::string_view(miss.buffer).substr(parsed.consumed);
  switch (framing->kind) {
    case BodyKind::none:
      return MissRead::whole;
    case BodyKind::content_length:
      return body.size() >= framing->length ? MissRead::whole : MissRead::arriving;
    case BodyKind::chunked: {
      // An HTTP/1.0 client gets it decoded and ended by a close: a worker's job.
      if (miss.request.version_minor < 1) return MissRead::needs_worker;
      BodyReader reader(*framing);
      std::string decoded;
      const BodyReader::Result r = reader.feed(body, decoded);
      if (r.error) return MissRead::needs_worker;
      return r.done ? MissRead::whole : MissRead::arriving;
    }
    default:
      return MissRead::needs_worker;  // ended by the origin's close
  }
}

HitOutcome complete_miss_now(ClientConnection& connection, PendingMiss miss, Cache& cache,
                             const ProxyOptions& options, ProxyStats& stats) {
  Context ctx = miss_context(connection.socket_, connection.peer_, *miss, options, stats);
  ctx.status_out = &connection.last_status_;
  ctx.connection_requests = &connection.requests_;
  ctx.out = &connection.unsent_;
  // Every read below finds its bytes in the buffer (read_miss_now saw the response whole), and
  // every write lands in unsent_.
  const bool orderly = relay_response(ctx, miss->origin, miss->request, miss->key,
                                      miss->may_store, cache, std::move(miss->buffer));
  finish_origin(ctx, std::move(miss->origin));
  const IoStatus sent = connection.send_unsent();
  if (!orderly || !ctx.persistent || sent == IoStatus::error) return HitOutcome::failed;
  return sent == IoStatus::ok ? HitOutcome::served : HitOutcome::partly_sent;
}

bool finish_miss(ClientConnection& connection, PendingMiss miss, Cache& cache,
                 const ProxyOptions& options, ProxyStats& stats, Millis origin_wait_left) {
  Socket& client = connection.socket_;
  Context ctx = miss_context(client, connection.peer_, *miss, options, stats);
  ctx.status_out = &connection.last_status_;
  ctx.connection_requests = &connection.requests_;
  // The origin timeout runs from the origin's last byte, wherever the miss waited for it. With
  // no head yet, the next byte is waited for only as long as is left; with a head, what has
  // arrived goes out at once (a stream must not wait on its next piece), unless no time is
  // left: then only a byte already here keeps the body from being cut.
  const bool answered = head_arrived(miss->buffer);
  bool origin_timed_out = false;
  if (!answered || origin_wait_left <= Millis{0}) {
    std::array<char, 16 * 1024> chunk;
    const IoResult got = miss->origin.socket.read_some(
        chunk, answered ? Millis{0} : std::max(origin_wait_left, Millis{0}),
        options.drop_abandoned ? client.fd() : -1);
    if (got.status == IoStatus::ok) miss->buffer.append(chunk.data(), got.bytes);
    if (got.status == IoStatus::cancelled) {
      // Nothing has gone to the client yet: it is closed, as a worker's own wait ends.
      log_failure(ctx, "client hung up (or shutdown cut the wait) before the origin answered; "
                       "origin request dropped, nothing stored");
      if (options.keep_abandoned) options.keep_abandoned(std::move(miss->origin.socket));
      ctx.persistent = false;
      return end_request(client, ctx, true);
    }
    // A close or a reset is left for relay_response's own read to meet and judge.
    origin_timed_out = got.status == IoStatus::timeout;
  }
  if (origin_timed_out && !answered) {
    reply_origin_timeout(ctx);  // what a worker's read of the head would have said
    return end_request(client, ctx, true);
  }
  // A body that stalled for the origin timeout on the poller is not waited for again.
  ProxyOptions stalled;
  if (origin_timed_out) {
    stalled = options;
    stalled.origin_timeout = Millis{0};
  }
  Context go_on = miss_context(client, connection.peer_, *miss,
                               origin_timed_out ? stalled : options, stats);
  go_on.connection_requests = &connection.requests_;
  const bool orderly = relay_response(go_on, miss->origin, miss->request, miss->key,
                                      miss->may_store, cache, std::move(miss->buffer));
  finish_origin(go_on, std::move(miss->origin));
  return end_request(client, go_on, orderly);
}

void drop_miss(ClientConnection& connection, PendingMiss miss, const ProxyOptions& options,
               ProxyStats& stats) {
  const Context ctx = miss_context(connection.socket(), connection.peer(), *miss, options, stats);
  log_failure(ctx, "client hung up before the origin answered; origin request dropped, nothing "
                   "stored");
}

}  // namespace proxy
