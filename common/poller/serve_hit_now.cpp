// Stage 4's fast path for a hit (proxy.h, serve_hit_now): the same answer serve_request would
// give a request a fresh stored response serves — or the proxy's own /metrics — sent without
// ever blocking, so the thread that read the request head can send it and no worker is needed.
#include "transaction/admission.h"
#include "transaction/transaction.h"

namespace proxy {

HitOutcome serve_hit_now(ClientConnection& connection, std::string& head,
                         std::optional<ClassifiedRequest>& front, Cache& cache,
                         const ProxyOptions& options, ProxyStats& stats) {
  // classify (admission.h) has judged the request once: only a plain GET, or /metrics, may be
  // answered or looked up without a worker.
  if (!options.keep_alive || !connection.unsent_.empty() || !front ||
      front->status != ParseStatus::complete || front->path == ServingPath::worker) {
    return HitOutcome::not_served;
  }
  const ClassifiedRequest& admitted = *front;
  const Request& request = admitted.request;
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
    head.erase(0, admitted.head_bytes);
    front.reset();  // the request has left `head`: nothing refers to it after this
    switch (connection.send_unsent()) {
      case IoStatus::ok:
        return HitOutcome::served;
      case IoStatus::timeout:
        return HitOutcome::partly_sent;
      default:
        return HitOutcome::failed;
    }
  };
  // The proxy's own /metrics, answered here too: under overload, when it matters most, the
  // workers are busy or the queue sheds, and an operator would see nothing.
  if (admitted.route == Route::metrics) {
    return send_now([&](const Context& ctx) { return metrics_response(ctx, options.metrics()); });
  }
  // A connection that would close (ServingPath::poller_lookup) is answered by a worker (which
  // closes it), but still looked up here: stage 4 lets a stored response skip its origin's
  // concurrency limit (found_stored).
  CacheLookup lookup{admitted.cache_key, nullptr};
  lookup.entry = cache.find(lookup.key);
  const UnixSeconds now = unix_now();
  const bool serves = lookup.entry &&
                      decide_use(*lookup.entry, request, admitted.rules, now) == StoredUse::serve;
  // A large body goes out from the worker, in two writes and without a copy (send_cached).
  if (admitted.path != ServingPath::poller || !serves ||
      lookup.entry->body.size() > kOneWriteBytes) {
    connection.stored_serves_ = serves;
    connection.looked_up_ = std::move(lookup);  // serve_request goes on from this lookup
    return HitOutcome::not_served;
  }
  return send_now(
      [&](const Context& ctx) { return hit_head(ctx, *lookup.entry) + lookup.entry->body; });
}

IoStatus ClientConnection::send_unsent() {
  const IoResult sent = socket_.write_now(unsent_);
  unsent_.erase(0, sent.bytes);
  if (sent.status == IoStatus::error) unsent_.clear();
  return sent.status;
}

}  // namespace proxy
