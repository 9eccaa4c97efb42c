// The HTTP caching rules of a shared cache (RFC 9111), as pure functions on parsed heads and
// times: may this response be stored, how long is it fresh, may this stored response answer
// this request, and how does a 304 refresh it. No sockets and no clock inside (callers pass
// Unix seconds), so every rule is a one-line unit test; proxy.cpp applies them at its lookup
// and store points. Thread-safe: nothing here has state.
//
// The subset implemented, and the choices the RFC leaves open:
// - Stored: complete responses to GET with status 200 only (RFC 9111 §3). Never stored:
//   `no-store` or `private` responses, responses to a request with `no-store` (§5.2.1.5), with
//   `Authorization` unless the response says `public`, `s-maxage` or `must-revalidate` (§3.5),
//   with `Set-Cookie`, with `Vary: *` (§4.1), to a `Range` request (bypassed altogether).
// - Fresh for s-maxage, else max-age, else Expires − Date (§4.2.1); a malformed value makes
//   the response stale on arrival (§4.2.1 encourages it). Without any of those a 200 gets a
//   heuristic lifetime (§4.2.2): 10% of Date − Last-Modified, at most `heuristic_freshness_s`,
//   or `heuristic_freshness_s` itself without Last-Modified; 0 turns heuristics off, and then
//   only responses with explicit freshness are stored.
// - A response stale on arrival (max-age=0, Expires in the past, `no-cache`) is stored only when
//   it has a validator (ETag or Last-Modified): then each use revalidates it (§4.3); without
//   one it could never be used. Stale entries are never served without revalidation, so
//   `must-revalidate` / `proxy-revalidate` hold by construction; `max-stale` is ignored.
// - Unknown directives are ignored (§5.2.3); the qualified forms `no-cache="F"` and
//   `private="F"` are treated as their unqualified, stricter forms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache.h"
#include "http/http_message.h"

namespace proxy {

/// Seconds since the Unix epoch, UTC: the resolution of HTTP dates.
using UnixSeconds = std::int64_t;

/// The system clock in UnixSeconds. Thread-safe.
UnixSeconds unix_now() noexcept;

/// Parses an HTTP-date in any of its three forms (RFC 9110 §5.6.7): IMF-fixdate
/// "Sun, 06 Nov 1994 08:49:37 GMT", RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT" (two-digit years
/// taken as 1970-2069) and asctime "Sun Nov  6 08:49:37 1994". nullopt when malformed.
std::optional<UnixSeconds> parse_http_date(std::string_view text);

/// Formats `time` as an IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 9110 §5.6.7).
std::string format_http_date(UnixSeconds time);

/// The Cache-Control directives this cache acts on, from every `Cache-Control` line of a
/// request or a response (RFC 9111 §5.2). Names are case-insensitive; unknown ones are ignored
/// (§5.2.3); a repeated directive counts once, its first value winning (§4.2.1).
struct CacheControl {
  bool no_store = false;         ///< §5.2.1.5 (request), §5.2.2.5 (response)
  bool no_cache = false;         ///< §5.2.1.4, §5.2.2.4 (qualified form counts as unqualified)
  bool is_private = false;       ///< §5.2.2.7 (qualified form counts as unqualified)
  bool is_public = false;        ///< §5.2.2.9
  bool must_revalidate = false;  ///< §5.2.2.2
  bool only_if_cached = false;   ///< §5.2.1.7 (request)
  std::optional<std::int64_t> max_age;   ///< seconds (§5.2.1.1, §5.2.2.1)
  std::optional<std::int64_t> s_maxage;  ///< seconds (§5.2.2.10)
  std::optional<std::int64_t> min_fresh;  ///< seconds (§5.2.1.3, request)
  /// A max-age, s-maxage or min-fresh whose value is not delta-seconds: such a response is
  /// treated as stale on arrival (§4.2.1).
  bool malformed_age = false;
};

/// Parses every `Cache-Control` field in `fields`. Values over 2^31 are capped to 2^31
/// (RFC 9111 §1.2.2). Never fails: what it does not understand it ignores.
CacheControl parse_cache_control(const HeaderFields& fields);

/// What the request itself allows a cache to do (RFC 9111 §4, §5.2.1).
struct RequestCacheRules {
  /// A `Range` request: neither looked up nor stored, forwarded as it is. A 206, or a 200 that
  /// answers it, is never stored as the full object.
  bool bypass = false;
  /// False for request `no-store` (§5.2.1.5), and for bypass.
  bool may_store = true;
  /// Request `no-cache`, or `Pragma: no-cache` without Cache-Control (§5.2.1.4, §5.4): a stored
  /// response must be revalidated before it is used.
  bool must_revalidate = false;
  std::optional<std::int64_t> max_age;    ///< use only a stored response at most this old
  std::optional<std::int64_t> min_fresh;  ///< ... and fresh for at least this long still
  bool only_if_cached = false;  ///< answer 504 rather than contact the origin (§5.2.1.7)
};

/// The rules `request` sets (its Cache-Control, Pragma and Range fields).
RequestCacheRules request_cache_rules(const Request& request);

/// How long a response stays fresh, in seconds from its generation (RFC 9111 §4.2.1, §4.2.2),
/// or nullopt when it has no explicit freshness and heuristics may not give it any (status not
/// 200, or heuristic_freshness_s == 0). `response_time` stands in for a missing Date. A
/// `no-cache` response, or one with malformed freshness, gets 0 (stale on arrival).
std::optional<std::int64_t> freshness_lifetime(int status, const HeaderFields& fields,
                                               UnixSeconds response_time,
                                               std::int64_t heuristic_freshness_s);

/// The Freshness to store with a response fetched by a request sent at `request_time` whose
/// head arrived at `response_time`: RFC 9111 §4.2.3's corrected_initial_age from Date and Age,
/// `lifetime` from freshness_lifetime, `has_validator` from ETag / Last-Modified. nullopt when
/// freshness_lifetime is (the response has no freshness at all, so is never stored).
std::optional<Freshness> make_freshness(int status, const HeaderFields& fields,
                                        UnixSeconds request_time, UnixSeconds response_time,
                                        std::int64_t heuristic_freshness_s);

/// The age of a stored response at `now`, in seconds (RFC 9111 §4.2.3): its corrected initial
/// age plus the time it has been stored. Never negative.
std::int64_t current_age(const Freshness& freshness, UnixSeconds now) noexcept;

/// Whether a response may be stored, and if not why (for tests and log lines).
struct StoreDecision {
  bool store = false;
  std::string_view reason;  ///< why not, citing the rule; empty when store is true
};

/// RFC 9111 §3 for this shared cache: may the response `status`/`fields` to `request` be
/// stored? `rules` is request_cache_rules(request); `freshness` is make_freshness for this
/// response. A response stale on arrival is stored only with a validator. Completeness and
/// size are the caller's to check (a cut body is never stored).
StoreDecision decide_store(const Request& request, const RequestCacheRules& rules, int status,
                           const HeaderFields& fields, const std::optional<Freshness>& freshness);

/// The request field values a response's `Vary` selects (RFC 9111 §4.1), to store with it.
/// nullopt for `Vary: *` (never matches, so never stored).
std::optional<std::vector<VaryField>> vary_fields(const HeaderFields& response_fields,
                                                  const Request& request);

/// What to do with a stored response found for a request.
enum class StoredUse {
  serve,       ///< fresh, and the request accepts it: a hit without contacting the origin
  revalidate,  ///< stale or refused as is, but has a validator: ask the origin conditionally
  miss,        ///< another Vary variant, or stale without a validator: fetch it whole
};

/// RFC 9111 §4: may `stored` answer `request` at `now`? Checks the Vary'd fields (§4.1),
/// freshness (§4.2) and the request's no-cache, max-age and min-fresh (§5.2.1).
StoredUse decide_use(const CachedResponse& stored, const Request& request,
                     const RequestCacheRules& rules, UnixSeconds now);

/// The status line and fields of a stored head (CachedResponse::head), parsed. nullopt only
/// when the head is not one this module wrote.
std::optional<ResponseHead> parse_stored_head(std::string_view head);

/// A stored head's text: "HTTP/1.1 STATUS REASON" and `fields`, each line ending in CRLF,
/// without the blank line; Age is left out (the age lives in Freshness).
std::string stored_head_text(int status, std::string_view reason, const HeaderFields& fields);

/// `request` made conditional on the stored response's validators (RFC 9111 §4.3.1):
/// If-None-Match with its ETag, If-Modified-Since with its Last-Modified. Any conditional
/// fields of the client's own are replaced: the client gets the full stored response.
Request conditional_request(const Request& request, const HeaderFields& stored_fields);

/// The stored fields updated by a 304 (RFC 9111 §3.2, §4.3.4): every field the 304 carries,
/// except Content-Length and hop-by-hop fields, replaces all stored lines of that name.
HeaderFields merge_not_modified(const HeaderFields& stored, const HeaderFields& not_modified);

}  // namespace proxy
