// Stage 4's fast path for a hit (proxy.h, serve_hit_now): the same answer serve_request would
// give a request a fresh stored response serves — or the proxy's own /metrics — sent without
// ever blocking, so the thread that read the request head can send it and no worker is needed.
#include <sys/socket.h>

#include <cerrno>

#include "transaction.h"
#include "uri.h"

namespace proxy {

HitOutcome serve_hit_now(ClientConnection& connection, std::string& head, Cache& cache,
                         const ProxyOptions& options, ProxyStats& stats) {
  if (!options.keep_alive || !connection.unsent_.empty()) return HitOutcome::not_served;
  Request request;
  head.erase(0, leading_empty_lines(head));  // RFC 9112 §2.2, as read_request does
  const RequestParseResult parsed = parse_request(head, request, options.limits);
  if (parsed.status != ParseStatus::complete || request.method != "GET") {
    return HitOutcome::not_served;
  }
  // Counts the request as serve_request would, takes its bytes from `head`, and sends the
  // response `build` makes without blocking (the rest waits for send_unsent).
  auto send_now = [&](auto build) {
    stats.requests.fetch_add(1, std::memory_order_relaxed);
    ++connection.requests_;
    Context ctx{connection.socket_, options, stats, connection.peer_,
                request.method + " " + request.target};
    ctx.persistent = true;
    ctx.version_minor = request.version_minor;
    connection.unsent_ = build(ctx);
    head.erase(0, parsed.consumed);
    switch (connection.send_unsent()) {
      case IoStatus::ok:
        return HitOutcome::served;
      case IoStatus::timeout:
        return HitOutcome::partly_sent;
      default:
        return HitOutcome::failed;
    }
  };
  std::optional<BodyFraming> body = request_body_framing(request);
  // The branch serve_request takes first.
  if (!body || body->kind != BodyKind::none || count_fields(request.fields, "Host") > 1) {
    return HitOutcome::not_served;
  }
  // A connection that would close is answered by a worker (which closes it), but still looked
  // up here: stage 4 lets a stored response skip its origin's concurrency limit (found_stored).
  const bool persists = wants_persistence(request);
  // The proxy's own /metrics, answered here too: under overload, when it matters most, the
  // workers are busy or the queue sheds, and an operator would see nothing.
  if (persists && options.metrics && request.target == "/metrics") {
    return send_now([&](const Context& ctx) { return metrics_response(ctx, options.metrics()); });
  }
  // The branches serve_request takes before the cache.
  std::optional<AbsoluteUri> uri = parse_absolute_uri(request.target);
  if (!uri || uri->scheme != "http") return HitOutcome::not_served;
  const RequestCacheRules rules = request_cache_rules(request);
  if (rules.bypass) return HitOutcome::not_served;
  CacheLookup lookup{uri->cache_key(), nullptr};
  lookup.entry = cache.find(lookup.key);
  const UnixSeconds now = unix_now();
  const bool serves =
      lookup.entry && decide_use(*lookup.entry, request, rules, now) == StoredUse::serve;
  // A large body goes out from the worker, in two writes and without a copy (send_cached).
  if (!persists || !serves || lookup.entry->body.size() > kOneWriteBytes) {
    connection.stored_serves_ = serves;
    connection.looked_up_ = std::move(lookup);  // serve_request goes on from this lookup
    return HitOutcome::not_served;
  }
  return send_now(
      [&](const Context& ctx) { return hit_head(ctx, *lookup.entry) + lookup.entry->body; });
}

IoStatus ClientConnection::send_unsent() {
  std::size_t sent = 0;
  IoStatus status = IoStatus::ok;
  while (sent < unsent_.size()) {
    const ssize_t n = ::send(socket_.fd(), unsent_.data() + sent, unsent_.size() - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      status = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? IoStatus::timeout
                                                                 : IoStatus::error;
      break;
    }
  }
  unsent_.erase(0, sent);
  if (status == IoStatus::error) unsent_.clear();
  return status;
}

}  // namespace proxy
