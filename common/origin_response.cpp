// Talking to the origin: connecting (or to a CONNECT target), and reading its response head
// past interim 1xx responses. The proxy answers the client itself when the origin fails it:
// 502 unreachable or malformed, 503 out of descriptors, 504 too slow.
#include <array>

#include "rewrite.h"
#include "transaction.h"

namespace proxy {
namespace {

constexpr std::size_t kMaxResponseHead = 64 * 1024;

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

}  // namespace

// Reads the origin's response head, relaying interim 1xx responses. Answers the client itself
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
      if (head.status >= 100 && head.status < 200 && head.status != 101) {
        if (!relay_interim(ctx, head)) return false;
        buffer.erase(0, parsed.consumed);
        continue;  // the final response follows
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
