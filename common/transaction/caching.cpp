// The transaction's caching steps (RFC 9111; the rules themselves are in http_cache_rules.h):
// the head and entry a response is stored as, serving a revalidated entry after a 304, and
// invalidating entries after an unsafe request.
#include <memory>

#include "http/rewrite.h"
#include "http/uri.h"
#include "transaction/transaction.h"

namespace proxy {

// The head we store has only end-to-end fields (and a Date); the head we send adds this hop's.
std::string head_to_store(const ResponseHead& head, const BodyFraming& framing,
                          UnixSeconds response_time) {
  std::string stored = "HTTP/1.1 " + std::to_string(head.status) + " " + head.reason + "\r\n";
  for (const auto& field : head.fields) {
    // A 204 may not carry Content-Length (RFC 9110 §8.6); a 304's or a HEAD's describes the
    // GET's body and goes on.
    bool framing_field = iequals(field.name, "Content-Length") &&
                         (framing.kind != BodyKind::none || head.status == 204);
    if (framing_field || iequals(field.name, "X-Cache") || is_hop_by_hop_in(field.name, head.fields)) {
      continue;
    }
    if (iequals(field.name, "Age")) continue;  // the age is kept in Freshness, sent afresh
    stored.append(field.name).append(": ").append(field.value).append("\r\n");
  }
  // A response cached or forwarded without a Date gets one (RFC 9110 §6.6.1).
  if (!find_field(head.fields, "Date")) {
    stored += "Date: " + format_http_date(response_time) + "\r\n";
  }
  return stored;
}

// The entry to store once the body is complete (the body is filled in then), or nullopt when
// this response may not be stored: RFC 9111 §3 (http_cache_rules.h), and it must fit.
std::optional<CachedResponse> entry_to_store(const Context& ctx, const ResponseHead& head,
                                             const Request& request, const std::string& key,
                                             std::string stored_head, std::size_t object_limit,
                                             UnixSeconds response_time) {
  const std::optional<Freshness> freshness =
      make_freshness(head.status, head.fields, ctx.request_time, response_time,
                     ctx.options.heuristic_freshness.count());
  CachedResponse entry{std::move(stored_head), {}, freshness.value_or(Freshness{}),
                       vary_fields(head.fields, request).value_or(std::vector<VaryField>{})};
  if (entry_bytes(key, entry) > object_limit ||
      !decide_store(request, request_cache_rules(request), head.status, head.fields, freshness)
           .store) {
    return std::nullopt;
  }
  return entry;
}

// A 304 answered our conditional request for a stale stored response (RFC 9111 §4.3.3): the
// stored response, its fields updated from the 304 (§4.3.4), is fresh again. It replaces the
// stored entry (or leaves the cache, if the update forbids storing it) and is served as a HIT.
void serve_revalidated(Context& ctx, const ResponseHead& not_modified, const Request& request,
                       const std::string& key, bool may_store, Cache& cache) {
  const CachedResponse& stale = *ctx.revalidating;
  std::optional<ResponseHead> stored = parse_stored_head(stale.head);
  if (!stored) {  // serve_http parsed it before asking: cannot happen
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

}  // namespace proxy
