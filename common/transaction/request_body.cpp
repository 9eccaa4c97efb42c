// Request bodies (RFC 9112 §6). The first kCheckedRequestBodyBytes of a body are read and
// checked before the origin hears of the request, so a malformed chunk, an oversized
// Content-Length or a client that stalls never leaves a half-sent request at the origin (request
// smuggling, slow clients: see "Hardening" in docs/) — whole bodies, for every body that fits,
// which is nearly all of them. A longer body (an upload) is streamed after that: holding
// megabytes per worker would cost a Raspberry Pi its memory. Its framing is the proxy's own, so
// a cut or a malformed chunk later on reaches the origin only as an incomplete request on a
// connection we reset, never as a second request.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>

#include "http/rewrite.h"
#include "transaction/body_relay.h"
#include "transaction/transaction.h"

namespace proxy {
namespace {

std::string over_limit(std::uint64_t limit) {
  return "request body over this proxy's limit of " + std::to_string(limit) +
         " bytes (--max-request-body-bytes)";
}

// Reads into body.checked until the body is whole or kCheckedRequestBodyBytes long, all within
// the client timeout: a body trickled in a byte at a time cannot hold a worker longer than a
// stalled one.
bool read_checked_part(Context& ctx, std::string_view buffered, RequestBody& body) {
  const std::uint64_t limit = ctx.options.max_request_body;
  const auto deadline = std::chrono::steady_clock::now() + ctx.options.client_timeout;
  std::array<char, 16 * 1024> chunk;
  std::string_view input = buffered;
  for (;;) {
    BodyReader::Result fed = body.rest->feed(input, body.checked);
    if (fed.error) {
      reply_error(ctx, 400, "malformed chunked request body");
      return false;
    }
    if (body.checked.size() > limit) {
      reply_error(ctx, 413, over_limit(limit));
      return false;
    }
    if (fed.done) body.rest.reset();
    if (fed.done || body.checked.size() >= kCheckedRequestBodyBytes) return true;
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

}  // namespace

std::string RequestBody::framing_field(const Request& request) const {
  return origin_framing_field(request, framing, rest ? framing.length : checked.size(),
                              rest && framing.kind == BodyKind::chunked);
}

std::string RequestBody::first_bytes() const {
  if (!(rest && framing.kind == BodyKind::chunked)) return checked;
  char size_line[32];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", checked.size());
  return std::string(size_line, static_cast<std::size_t>(n)) + checked + "\r\n";
}

bool read_request_body(Context& ctx, const Request& request, const BodyFraming& framing,
                       std::string_view buffered, RequestBody& body) {
  body.framing = framing;
  if (framing.kind == BodyKind::none) return true;
  const std::uint64_t limit = ctx.options.max_request_body;
  if (framing.kind == BodyKind::content_length && framing.length > limit) {
    reply_error(ctx, 413, "request body of " + std::to_string(framing.length) +
                              " bytes is over this proxy's limit of " + std::to_string(limit) +
                              " (--max-request-body-bytes)");
    return false;
  }
  // We ask for the body ourselves, so a client waiting for 100 Continue (RFC 9110 §10.1.1)
  // gets it from us; an HTTP/1.0 client may not be sent a 1xx (RFC 9110 §15.2).
  if (ctx.version_minor >= 1 && field_has_token(request.fields, "Expect", "100-continue")) {
    ctx.sent_continue = true;
    ctx.client.write_all("HTTP/1.1 100 Continue\r\n\r\n", ctx.options.write_timeout);
  }
  body.rest.emplace(framing);
  return read_checked_part(ctx, buffered, body);
}

bool stream_request_body(Context& ctx, Socket& origin, RequestBody& body) {
  if (!body.rest) return true;
  const bool chunked = body.framing.kind == BodyKind::chunked;
  BodySink sink;
  sink.socket = &origin;
  sink.encode_chunked = chunked;
  sink.limit = ctx.options.max_request_body;
  sink.delivered = body.checked.size();
  // Each read from the client is bounded by the client timeout, not the whole body: an upload
  // of megabytes may take longer than a head.
  switch (relay_body(ctx.client, {}, *body.rest, sink, ctx.options.client_timeout,
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
      reply_error(ctx, 413, over_limit(ctx.options.max_request_body));
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

}  // namespace proxy
