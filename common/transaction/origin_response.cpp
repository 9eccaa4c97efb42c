// Talking to the origin: connecting (or to a CONNECT target), or taking a kept connection from
// the origin pool; sending the request; reading the response head past interim 1xx responses;
// giving a reusable connection back. The proxy answers the client itself when the origin fails it:
// 502 unreachable or malformed, 503 out of descriptors, 504 too slow.
#include <array>

#include "http/rewrite.h"
#include "poller/origin_pool.h"
#include "transaction/transaction.h"

namespace proxy {
namespace {

// Relays an interim 1xx response to an HTTP/1.1 client (RFC 9110 §15.2: a proxy forwards them,
// but never to HTTP/1.0). A 100 is dropped when we answered the client's Expect ourselves.
bool relay_interim(Context& ctx, const ResponseHead& head) {
  if (ctx.version_minor < 1 || (head.status == 100 && ctx.sent_continue)) return true;
  std::string interim = "HTTP/1.1 " + std::to_string(head.status) + " " + head.reason + "\r\n";
  for (const auto& field : head.fields) {
    if (is_hop_by_hop_in(field.name, head.fields)) continue;
    interim.append(field.name).append(": ").append(field.value).append("\r\n");
  }
  interim += via_field(ctx, head.version_minor) + "\r\n";
  if (ctx.client.write_all(interim, ctx.options.write_timeout).status != IoStatus::ok) {
    log_failure(ctx, "client went away before the final response");
    return false;
  }
  return true;
}

// How one attempt at reading a response head ended.
enum class HeadRead {
  complete,
  answered,  // failed, and the client has been answered (or the wait was cut)
  abandoned,  // the client hung up (or shutdown cut the wait) before the origin answered
  closed_unanswered  // the origin closed or reset before any byte: not answered yet
};

HeadRead read_head_once(Context& ctx, const Socket& origin, std::string& buffer,
                        ResponseHead& head, std::size_t& head_bytes, IoStatus& closed_by) {
  std::array<char, 16 * 1024> chunk;
  // Bytes already in `buffer` (read by stage 4's poller) are the origin's answer begun: a close
  // after them is no idle connection closing, and the request is not sent again.
  bool any_byte = !buffer.empty();
  for (;;) {
    ResponseParseResult parsed = parse_response_head(buffer, head, kMaxResponseHead);
    if (parsed.status == ParseStatus::invalid) {
      reply_error(ctx, 502, "malformed response from origin: " + parsed.error_reason);
      return HeadRead::answered;
    }
    if (parsed.status == ParseStatus::complete) {
      if (head.status >= 100 && head.status < 200 && head.status != 101) {
        if (!relay_interim(ctx, head)) return HeadRead::answered;
        buffer.erase(0, parsed.consumed);
        continue;  // the final response follows
      }
      if (head.status < 200) {
        reply_error(ctx, 502, "origin switched protocols, which this proxy never asked for");
        return HeadRead::answered;
      }
      head_bytes = parsed.consumed;
      if (ctx.status_out != nullptr) *ctx.status_out = head.status;
      return HeadRead::complete;
    }
    IoResult got = origin.read_some(chunk, ctx.options.origin_timeout,
                                    ctx.options.drop_abandoned ? ctx.client.fd() : -1);
    switch (got.status) {
      case IoStatus::ok:
        buffer.append(chunk.data(), got.bytes);
        any_byte = true;
        break;
      case IoStatus::timeout:
        reply_origin_timeout(ctx);
        return HeadRead::answered;
      case IoStatus::cancelled:
        if (ctx.options.drop_abandoned) {
          log_failure(ctx, "client hung up (or shutdown cut the wait) before the origin "
                           "answered; origin request dropped, nothing stored");
        }
        return HeadRead::abandoned;
      case IoStatus::eof:
      case IoStatus::error:
        if (!any_byte) {
          closed_by = got.status;
          return HeadRead::closed_unanswered;
        }
        reply_error(ctx, 502, got.status == IoStatus::eof
                                  ? "origin closed the connection mid-head"
                                  : "origin connection failed while reading the response head");
        return HeadRead::answered;
    }
  }
}

// The origin closed a kept connection just as the request went out on it (it had timed the
// connection out, RFC 9112 §9.3.1): the request goes once more, on a new connection.
bool retry_on_new_connection(Context& ctx, OriginConnection& origin) {
  ctx.stats.origin_retries.fetch_add(1, std::memory_order_relaxed);
  origin.may_retry = false;
  origin.reused = false;
  origin.socket.close();
  std::optional<Socket> fresh = connect_to_origin(ctx, origin.host, origin.port);
  if (!fresh) return false;
  ctx.stats.origin_connects.fetch_add(1, std::memory_order_relaxed);
  origin.socket = std::move(*fresh);
  if (origin.socket.write_all(origin.resend, ctx.options.write_timeout).status != IoStatus::ok) {
    reply_error(ctx, 502, "origin closed the connection before taking the request");
    return false;
  }
  origin.resend.clear();
  return true;
}

}  // namespace

std::optional<OriginConnection> open_origin(Context& ctx, const std::string& host,
                                            std::uint16_t port, bool from_pool) {
  OriginConnection origin;
  origin.host = host;
  origin.port = port;
  if (from_pool && ctx.options.origin_pool != nullptr) {
    if (std::optional<Socket> kept = ctx.options.origin_pool->acquire(host, port)) {
      origin.socket = std::move(*kept);
      origin.reused = true;
      return origin;
    }
  }
  std::optional<Socket> fresh = connect_to_origin(ctx, host, port);
  if (!fresh) return std::nullopt;
  ctx.stats.origin_connects.fetch_add(1, std::memory_order_relaxed);
  origin.socket = std::move(*fresh);
  return origin;
}

bool send_to_origin(Context& ctx, OriginConnection& origin, const std::string& request_bytes) {
  if (origin.socket.write_all(request_bytes, ctx.options.write_timeout).status == IoStatus::ok) {
    return true;
  }
  if (origin.reused && origin.may_retry) return retry_on_new_connection(ctx, origin);
  reply_error(ctx, 502, "origin closed the connection before taking the request");
  return false;
}

bool read_response_head(Context& ctx, OriginConnection& origin, std::string& buffer,
                        ResponseHead& head, std::size_t& head_bytes) {
  IoStatus closed_by = IoStatus::eof;
  HeadRead got = read_head_once(ctx, origin.socket, buffer, head, head_bytes, closed_by);
  if (got == HeadRead::closed_unanswered && origin.reused && origin.may_retry) {
    if (!retry_on_new_connection(ctx, origin)) return false;
    got = read_head_once(ctx, origin.socket, buffer, head, head_bytes, closed_by);
  }
  if (got == HeadRead::abandoned && ctx.options.keep_abandoned) {
    // The origin may still be serving it: whoever keeps the connection knows when it is done.
    ctx.options.keep_abandoned(std::move(origin.socket));
  }
  if (got == HeadRead::closed_unanswered) {
    reply_error(ctx, 502, closed_by == IoStatus::eof
                              ? "origin closed the connection without answering"
                              : "origin connection failed while reading the response head");
  }
  return got == HeadRead::complete;
}

void finish_origin(Context& ctx, OriginConnection origin) {
  if (origin.reusable && ctx.options.origin_pool != nullptr) {
    ctx.options.origin_pool->release(origin.host, origin.port, std::move(origin.socket));
  }
  // Otherwise the connection closes here, with `origin`.
}

void reply_origin_timeout(Context& ctx) {
  reply_error(ctx, 504, "origin did not answer within " +
                            std::to_string(ctx.options.origin_timeout.count()) + " ms");
}

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

}  // namespace proxy
