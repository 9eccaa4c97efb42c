// RFC 9111's rules for a shared cache; see http_cache_rules.h for the subset and the choices.
#include "http/http_cache_rules.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "http/rewrite.h"

namespace proxy {
namespace {

// RFC 9111 §1.2.2: a delta-seconds value too large to represent is taken as 2^31.
constexpr std::int64_t kMaxDelta = 2147483648;

constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
constexpr std::array<std::string_view, 7> kDays = {"Sun", "Mon", "Tue", "Wed",
                                                   "Thu", "Fri", "Sat"};

// delta-seconds (RFC 9111 §1.2.2): digits only. nullopt when malformed.
std::optional<std::int64_t> parse_delta_seconds(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = std::min(kMaxDelta, value * 10 + (c - '0'));
  }
  return value;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// All lines of field `name` joined by ", " (RFC 9110 §5.3), or nullopt when there are none.
std::optional<std::string> joined_field(const HeaderFields& fields, std::string_view name) {
  std::optional<std::string> joined;
  for (const auto& field : fields) {
    if (!iequals(field.name, name)) continue;
    if (joined) {
      joined->append(", ").append(field.value);
    } else {
      joined = field.value;
    }
  }
  return joined;
}

bool has_field(const HeaderFields& fields, std::string_view name) {
  return find_field(fields, name).has_value();
}

// A small cursor over a date string: each step consumes what it matched or fails.
struct DateCursor {
  std::string_view rest;
  bool literal(std::string_view text) {
    if (!rest.starts_with(text)) return false;
    rest.remove_prefix(text.size());
    return true;
  }
  // Exactly `digits` digits (a leading space stands for a zero when space_pad, as asctime pads).
  std::optional<int> number(std::size_t digits, bool space_pad = false) {
    if (rest.size() < digits) return std::nullopt;
    int value = 0;
    for (std::size_t i = 0; i < digits; ++i) {
      char c = rest[i];
      if (space_pad && i == 0 && c == ' ') continue;
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
    }
    rest.remove_prefix(digits);
    return value;
  }
  std::optional<unsigned> month() {
    for (std::size_t i = 0; i < kMonths.size(); ++i) {
      if (literal(kMonths[i])) return static_cast<unsigned>(i + 1);
    }
    return std::nullopt;
  }
  // "HH:MM:SS" as seconds into the day.
  std::optional<std::int64_t> time_of_day() {
    auto h = number(2);
    if (!h || !literal(":")) return std::nullopt;
    auto m = number(2);
    if (!m || !literal(":")) return std::nullopt;
    auto s = number(2);
    // 60 is a leap second, which the RFC's grammar allows.
    if (!s || *h > 23 || *m > 59 || *s > 60) return std::nullopt;
    return *h * 3600 + *m * 60 + *s;
  }
};

std::optional<UnixSeconds> to_unix(int year, unsigned month, int day, std::int64_t seconds) {
  using namespace std::chrono;
  const year_month_day date{std::chrono::year{year}, std::chrono::month{month},
                            std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok()) return std::nullopt;
  return sys_days(date).time_since_epoch().count() * std::int64_t{86400} + seconds;
}

bool is_validator_field(std::string_view name) {
  return iequals(name, "ETag") || iequals(name, "Last-Modified");
}

}  // namespace

UnixSeconds unix_now() noexcept {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<UnixSeconds> parse_http_date(std::string_view text) {
  DateCursor in{text};
  const std::size_t comma = text.find(',');
  if (comma != std::string_view::npos) {
    // IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT" or RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT".
    in.rest.remove_prefix(comma + 1);
    if (!in.literal(" ")) return std::nullopt;
    auto day = in.number(2);
    if (!day) return std::nullopt;
    const bool rfc850 = in.literal("-");
    if (!rfc850 && !in.literal(" ")) return std::nullopt;
    auto month = in.month();
    if (!month || !in.literal(rfc850 ? "-" : " ")) return std::nullopt;
    std::optional<int> year = in.number(rfc850 ? 2 : 4);
    if (!year) return std::nullopt;
    // RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the past century;
    // without a clock here, 70-99 is the 1900s and 00-69 the 2000s.
    if (rfc850) *year += *year >= 70 ? 1900 : 2000;
    if (!in.literal(" ")) return std::nullopt;
    auto seconds = in.time_of_day();
    if (!seconds || !in.literal(" GMT") || !in.rest.empty()) return std::nullopt;
    return to_unix(*year, *month, *day, *seconds);
  }
  // asctime "Sun Nov  6 08:49:37 1994"
  bool weekday = false;
  for (std::string_view name : kDays) weekday = weekday || in.literal(name);
  if (!weekday || !in.literal(" ")) return std::nullopt;
  auto month = in.month();
  if (!month || !in.literal(" ")) return std::nullopt;
  auto day = in.number(2, true);
  if (!day || !in.literal(" ")) return std::nullopt;
  auto seconds = in.time_of_day();
  if (!seconds || !in.literal(" ")) return std::nullopt;
  auto year = in.number(4);
  if (!year || !in.rest.empty()) return std::nullopt;
  return to_unix(*year, *month, *day, *seconds);
}

std::string format_http_date(UnixSeconds time) {
  using namespace std::chrono;
  const sys_seconds point{seconds{time}};
  const sys_days day = floor<days>(point);
  const year_month_day date{day};
  const std::int64_t in_day = (point - day).count();
  char out[40];
  std::snprintf(out, sizeof out, "%s, %02u %s %04d %02d:%02d:%02d GMT",
                kDays[weekday{day}.c_encoding()].data(), static_cast<unsigned>(date.day()),
                kMonths[static_cast<unsigned>(date.month()) - 1].data(),
                static_cast<int>(date.year()), static_cast<int>(in_day / 3600),
                static_cast<int>(in_day / 60 % 60), static_cast<int>(in_day % 60));
  return out;
}

CacheControl parse_cache_control(const HeaderFields& fields) {
  CacheControl cc;
  auto set_delta = [&](std::optional<std::int64_t>& slot, std::optional<std::string_view> value) {
    if (slot) return;  // the first occurrence wins (RFC 9111 §4.2.1)
    std::optional<std::int64_t> parsed = value ? parse_delta_seconds(*value) : std::nullopt;
    if (parsed) {
      slot = parsed;
    } else {
      cc.malformed_age = true;
    }
  };
  for (const auto& field : fields) {
    if (!iequals(field.name, "Cache-Control")) continue;
    std::string_view rest = field.value;
    while (!rest.empty()) {
      // One directive: token [ "=" ( token / quoted-string ) ], up to a comma outside quotes.
      std::size_t end = 0;
      bool quoted = false;
      for (; end < rest.size(); ++end) {
        if (rest[end] == '\\' && quoted) {
          ++end;
        } else if (rest[end] == '"') {
          quoted = !quoted;
        } else if (rest[end] == ',' && !quoted) {
          break;
        }
      }
      std::string_view directive = rest.substr(0, std::min(end, rest.size()));
      rest.remove_prefix(std::min(end + 1, rest.size()));
      while (!directive.empty() && (directive.front() == ' ' || directive.front() == '\t')) {
        directive.remove_prefix(1);
      }
      while (!directive.empty() && (directive.back() == ' ' || directive.back() == '\t')) {
        directive.remove_suffix(1);
      }
      if (directive.empty()) continue;
      const std::size_t equals = directive.find('=');
      const std::string_view name = directive.substr(0, equals);
      std::optional<std::string_view> value;
      if (equals != std::string_view::npos) {
        value = directive.substr(equals + 1);
        // A quoted delta-seconds is invalid strictly speaking, but harmless to accept.
        if (value->size() >= 2 && value->front() == '"' && value->back() == '"') {
          value = value->substr(1, value->size() - 2);
        }
      }
      if (iequals(name, "no-store")) {
        cc.no_store = true;
      } else if (iequals(name, "no-cache")) {
        cc.no_cache = true;
      } else if (iequals(name, "private")) {
        cc.is_private = true;
      } else if (iequals(name, "public")) {
        cc.is_public = true;
      } else if (iequals(name, "must-revalidate") || iequals(name, "proxy-revalidate")) {
        cc.must_revalidate = true;
      } else if (iequals(name, "only-if-cached")) {
        cc.only_if_cached = true;
      } else if (iequals(name, "max-age")) {
        set_delta(cc.max_age, value);
      } else if (iequals(name, "s-maxage")) {
        set_delta(cc.s_maxage, value);
      } else if (iequals(name, "min-fresh")) {
        set_delta(cc.min_fresh, value);
      }
      // Anything else (max-stale, stale-while-revalidate, immutable, extensions) is ignored:
      // RFC 9111 §5.2.3.
    }
  }
  return cc;
}

RequestCacheRules request_cache_rules(const Request& request) {
  RequestCacheRules rules;
  const CacheControl cc = parse_cache_control(request.fields);
  rules.bypass = has_field(request.fields, "Range");
  rules.may_store = !rules.bypass && !cc.no_store;
  // Pragma: no-cache counts only when the request has no Cache-Control (RFC 9111 §5.4).
  const bool pragma = !has_field(request.fields, "Cache-Control") &&
                      field_has_token(request.fields, "Pragma", "no-cache");
  rules.must_revalidate = cc.no_cache || pragma;
  rules.max_age = cc.max_age;
  rules.min_fresh = cc.min_fresh;
  rules.only_if_cached = cc.only_if_cached;
  return rules;
}

std::optional<std::int64_t> freshness_lifetime(int status, const HeaderFields& fields,
                                               UnixSeconds response_time,
                                               std::int64_t heuristic_freshness_s) {
  const CacheControl cc = parse_cache_control(fields);
  if (cc.no_cache || cc.malformed_age) return 0;
  // A shared cache prefers s-maxage, then max-age, then Expires (RFC 9111 §4.2.1).
  if (cc.s_maxage) return *cc.s_maxage;
  if (cc.max_age) return *cc.max_age;
  std::optional<UnixSeconds> date;
  if (auto value = find_field(fields, "Date")) date = parse_http_date(*value);
  const UnixSeconds date_value = date.value_or(response_time);
  if (auto expires = find_field(fields, "Expires")) {
    // An invalid Expires, "0" above all, is a time in the past (RFC 9111 §5.3).
    std::optional<UnixSeconds> when = parse_http_date(*expires);
    return when ? std::max<std::int64_t>(0, *when - date_value) : 0;
  }
  // Heuristic freshness (RFC 9111 §4.2.2): only for heuristically cacheable statuses, of
  // which this cache stores just 200.
  if (status != 200 || heuristic_freshness_s <= 0) return std::nullopt;
  if (auto value = find_field(fields, "Last-Modified")) {
    if (std::optional<UnixSeconds> modified = parse_http_date(*value)) {
      return std::clamp<std::int64_t>((date_value - *modified) / 10, 0, heuristic_freshness_s);
    }
  }
  return heuristic_freshness_s;
}

std::optional<Freshness> make_freshness(int status, const HeaderFields& fields,
                                        UnixSeconds request_time, UnixSeconds response_time,
                                        std::int64_t heuristic_freshness_s) {
  std::optional<std::int64_t> lifetime =
      freshness_lifetime(status, fields, response_time, heuristic_freshness_s);
  if (!lifetime) return std::nullopt;
  // RFC 9111 §4.2.3, in its own terms.
  std::int64_t age_value = 0;
  if (auto age = find_field(fields, "Age")) age_value = parse_delta_seconds(*age).value_or(0);
  std::optional<UnixSeconds> date;
  if (auto value = find_field(fields, "Date")) date = parse_http_date(*value);
  const std::int64_t apparent_age = std::max<std::int64_t>(0, response_time - date.value_or(response_time));
  const std::int64_t response_delay = std::max<std::int64_t>(0, response_time - request_time);
  const std::int64_t corrected_age_value = age_value + response_delay;
  Freshness freshness;
  freshness.response_time = response_time;
  freshness.corrected_initial_age = std::max(apparent_age, corrected_age_value);
  freshness.lifetime = *lifetime;
  freshness.has_validator = std::any_of(fields.begin(), fields.end(), [](const HeaderField& f) {
    return is_validator_field(f.name);
  });
  return freshness;
}

std::int64_t current_age(const Freshness& freshness, UnixSeconds now) noexcept {
  const std::int64_t resident_time = std::max<std::int64_t>(0, now - freshness.response_time);
  return freshness.corrected_initial_age + resident_time;
}

StoreDecision decide_store(const Request& request, const RequestCacheRules& rules, int status,
                           const HeaderFields& fields, const std::optional<Freshness>& freshness) {
  if (rules.bypass) return {false, "a Range request bypasses the cache"};
  if (!rules.may_store) return {false, "the request said no-store (RFC 9111 §5.2.1.5)"};
  if (request.method != "GET") return {false, "only responses to GET are stored"};
  if (status != 200) return {false, "only status 200 is stored"};
  const CacheControl cc = parse_cache_control(fields);
  if (cc.no_store) return {false, "the response said no-store (RFC 9111 §5.2.2.5)"};
  if (cc.is_private) return {false, "a shared cache never stores private (RFC 9111 §5.2.2.7)"};
  if (has_field(request.fields, "Authorization") &&
      !(cc.is_public || cc.s_maxage || cc.must_revalidate)) {
    return {false, "a response to a request with Authorization (RFC 9111 §3.5)"};
  }
  if (has_field(fields, "Set-Cookie")) return {false, "a response that sets a cookie"};
  if (!vary_fields(fields, Request{})) return {false, "Vary: * never matches (RFC 9111 §4.1)"};
  if (!freshness) {
    return {false, "no explicit freshness and heuristic freshness is off (RFC 9111 §4.2.2)"};
  }
  if (freshness->lifetime <= freshness->corrected_initial_age && !freshness->has_validator) {
    return {false, "stale on arrival and no validator to revalidate it with (RFC 9111 §4.3)"};
  }
  return {true, {}};
}

std::optional<std::vector<VaryField>> vary_fields(const HeaderFields& response_fields,
                                                  const Request& request) {
  std::vector<VaryField> out;
  for (const auto& field : response_fields) {
    if (!iequals(field.name, "Vary")) continue;
    for (std::string_view item : split_list(field.value)) {
      if (item == "*") return std::nullopt;
      std::string name = lower(item);
      if (std::any_of(out.begin(), out.end(), [&](const VaryField& v) { return v.name == name; })) {
        continue;
      }
      std::optional<std::string> value = joined_field(request.fields, name);
      out.push_back({std::move(name), std::move(value)});
    }
  }
  return out;
}

StoredUse decide_use(const CachedResponse& stored, const Request& request,
                     const RequestCacheRules& rules, UnixSeconds now) {
  for (const VaryField& field : stored.vary) {
    if (joined_field(request.fields, field.name) != field.value) return StoredUse::miss;
  }
  const Freshness& f = stored.freshness;
  const std::int64_t age = current_age(f, now);
  const bool acceptable = f.lifetime > age && !rules.must_revalidate &&
                          (!rules.max_age || age <= *rules.max_age) &&
                          (!rules.min_fresh || f.lifetime - age >= *rules.min_fresh);
  if (acceptable) return StoredUse::serve;
  return f.has_validator ? StoredUse::revalidate : StoredUse::miss;
}

std::optional<ResponseHead> parse_stored_head(std::string_view head) {
  std::string text(head);
  text += "\r\n";
  ResponseHead parsed;
  if (parse_response_head(text, parsed, text.size() + 1).status != ParseStatus::complete) {
    return std::nullopt;
  }
  return parsed;
}

std::string stored_head_text(int status, std::string_view reason, const HeaderFields& fields) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " ";
  head.append(reason).append("\r\n");
  for (const auto& field : fields) {
    if (iequals(field.name, "Age")) continue;
    head.append(field.name).append(": ").append(field.value).append("\r\n");
  }
  return head;
}

Request conditional_request(const Request& request, const HeaderFields& stored_fields) {
  Request out = request;
  std::erase_if(out.fields, [](const HeaderField& field) {
    return iequals(field.name, "If-None-Match") || iequals(field.name, "If-Modified-Since");
  });
  if (auto etag = find_field(stored_fields, "ETag")) {
    out.fields.push_back({"If-None-Match", std::string(*etag)});
  }
  if (auto modified = find_field(stored_fields, "Last-Modified")) {
    out.fields.push_back({"If-Modified-Since", std::string(*modified)});
  }
  return out;
}

HeaderFields merge_not_modified(const HeaderFields& stored, const HeaderFields& not_modified) {
  auto updates = [&](std::string_view name) {
    return !iequals(name, "Content-Length") && !iequals(name, "X-Cache") &&
           !is_hop_by_hop_in(name, not_modified);
  };
  HeaderFields merged;
  for (const auto& field : stored) {
    const bool replaced =
        std::any_of(not_modified.begin(), not_modified.end(), [&](const HeaderField& f) {
          return iequals(f.name, field.name) && updates(f.name);
        });
    if (!replaced) merged.push_back(field);
  }
  for (const auto& field : not_modified) {
    if (updates(field.name)) merged.push_back(field);
  }
  return merged;
}

}  // namespace proxy
