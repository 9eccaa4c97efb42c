// The scripted origin's routes (origin_routes.h): a table from path to the function that makes
// its Plan. httpbin-style paths with deterministic bodies; README "The harness origin" lists them.
#include "origin_routes.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace harness {
namespace {

constexpr std::uint64_t kMaxDelayMs = 3'600'000;
constexpr std::uint64_t kMaxBodyBytes = std::uint64_t{1} << 40;
constexpr std::string_view kLastModified = "Thu, 01 Jan 2015 00:00:00 GMT";

std::optional<std::uint64_t> parse_number(std::string_view text, std::uint64_t max) {
  std::uint64_t value = 0;
  if (text.empty() || text.size() > 19) return std::nullopt;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value > max) {
    return std::nullopt;
  }
  return value;
}

// "/bytes/10" with prefix "/bytes/" gives "10"; nullopt when `path` does not start so.
std::optional<std::string_view> after(std::string_view path, std::string_view prefix) {
  if (!path.starts_with(prefix)) return std::nullopt;
  return path.substr(prefix.size());
}

}  // namespace

Reply text_reply(int status, std::string body) {
  Reply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

namespace {

Reply bytes_reply(std::uint64_t n) {
  Reply reply;
  reply.content_type = "application/octet-stream";
  reply.generated = n;
  return reply;
}

std::string anything_json(const RequestView& request) {
  nlohmann::ordered_json echo;
  echo["method"] = request.head.method;
  echo["target"] = request.head.target;
  auto headers = nlohmann::ordered_json::array();
  for (const auto& field : request.head.fields) headers.push_back({field.name, field.value});
  echo["headers"] = std::move(headers);
  echo["body"] = request.body;
  echo["body_length"] = request.body.size();
  // Bodies and obs-text header values need not be UTF-8; replace bad bytes with U+FFFD rather
  // than fail, and report the exact length so tests can still check what arrived.
  return echo.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

// ---- /respond: any response fields from the query string (the RFC 9111 tests) ----

// "%3D" -> "=": the query's percent-escapes decoded ('+' stays a '+'). nullopt when malformed.
std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= text.size()) return std::nullopt;
    auto [end, error] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    if (error != std::errc() || end != text.data() + i + 3) return std::nullopt;
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

// /respond?h=NAME:VALUE&h=...&status=CODE: a response with exactly those extra fields (values
// percent-decoded, e.g. h=Cache-Control:max-age%3D60) and that status (default 200); the body
// is the request's header lines, so a test sees which request a stored response came from. A
// request whose If-None-Match equals the ETag given, or whose If-Modified-Since equals the
// Last-Modified given, gets 304 with the same fields: a validator check in its simplest form.
// `h304=NAME:VALUE` fields replace those of the same name on a 304 only (a refreshed header).
std::optional<Plan> respond_route(const RequestView& request) {
  const std::string_view target = request.head.target;
  const auto question = target.find('?');
  std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  Plan plan;
  plan.reply = text_reply(200, std::string(request.raw_fields));
  std::vector<std::pair<std::string, std::string>> on_304;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const bool only_304 = pair.starts_with("h304=");
    if (auto field = only_304 ? after(pair, "h304=") : after(pair, "h=")) {
      std::optional<std::string> decoded = percent_decode(*field);
      const auto colon = decoded ? decoded->find(':') : std::string::npos;
      if (colon == std::string::npos || colon == 0) return std::nullopt;
      const auto value = decoded->find_first_not_of(" \t", colon + 1);
      (only_304 ? on_304 : plan.reply.fields)
          .emplace_back(decoded->substr(0, colon),
                        value == std::string::npos ? std::string() : decoded->substr(value));
    } else if (auto code = after(pair, "status=")) {
      auto status = parse_number(*code, 599);
      if (!status || *status < 200) return std::nullopt;
      plan.reply.status = static_cast<int>(*status);
    }
  }
  for (const auto& [name, value] : plan.reply.fields) {
    const char* condition = proxy::iequals(name, "ETag")            ? "If-None-Match"
                            : proxy::iequals(name, "Last-Modified") ? "If-Modified-Since"
                                                                    : nullptr;
    if (condition == nullptr) continue;
    if (auto asked = proxy::find_field(request.head.fields, condition); asked && *asked == value) {
      plan.reply.status = 304;
    }
  }
  if (plan.reply.status == 304) {
    for (const auto& update : on_304) {
      std::erase_if(plan.reply.fields,
                    [&](const auto& f) { return proxy::iequals(f.first, update.first); });
    }
    plan.reply.fields.insert(plan.reply.fields.end(), on_304.begin(), on_304.end());
  }
  if (plan.reply.status == 304 || plan.reply.status == 204) {
    plan.reply.body.clear();
    plan.reply.framing = Framing::none;
  }
  return plan;
}

// ---- The routes, one function each; `rest` is the path after the route's prefix ----

std::optional<Plan> route(std::string_view path, const RequestView& request);

std::optional<Plan> bytes_of(std::string_view n, Framing framing, Ending ending = Ending::keep_alive) {
  auto count = parse_number(n, kMaxBodyBytes);
  if (!count) return std::nullopt;
  Plan plan;
  plan.reply = bytes_reply(*count);
  plan.reply.framing = framing;
  plan.reply.ending = ending;
  return plan;
}

// For the routes that wrap another (/delay/MS[/PATH], /interim/CODE[/PATH]): the plan of PATH,
// given as `rest` from the slash after the number on; or, with no PATH, one that names no route,
// or the stats route, a 200 with `text`.
Plan wrapped_plan(std::string_view rest, std::size_t slash, const RequestView& request,
                  const std::string& text) {
  std::optional<Plan> inner;
  if (slash != std::string_view::npos) inner = route(rest.substr(slash), request);
  if (inner && !inner->stats) return std::move(*inner);
  Plan plan;
  plan.reply = text_reply(200, text);
  return plan;
}

// /delay/MS[/PATH]: PATH's answer (or a short text), MS milliseconds late.
std::optional<Plan> delay_route(std::string_view rest, const RequestView& request) {
  auto slash = rest.find('/');
  auto ms = parse_number(rest.substr(0, slash), kMaxDelayMs);
  if (!ms) return std::nullopt;
  Plan plan = wrapped_plan(rest, slash, request, "delayed " + std::to_string(*ms) + " ms\n");
  plan.delay_ms = std::min(kMaxDelayMs, plan.delay_ms + *ms);
  return plan;
}

std::optional<Plan> bytes_route(std::string_view rest, const RequestView&) {
  return bytes_of(rest, Framing::content_length);
}

std::optional<Plan> stream_bytes_route(std::string_view rest, const RequestView&) {
  return bytes_of(rest, Framing::chunked);
}

std::optional<Plan> close_route(std::string_view rest, const RequestView&) {
  return bytes_of(rest, Framing::close_delimited, Ending::close);
}

// /truncate/N and /reset/N: promise N bytes, send half, then close or reset.
std::optional<Plan> cut_body(std::string_view n, Ending ending) {
  auto count = parse_number(n, kMaxBodyBytes);
  if (!count) return std::nullopt;
  Plan plan;
  plan.reply = bytes_reply(*count / 2);
  plan.reply.promised_length = *count;
  plan.reply.ending = ending;
  return plan;
}

std::optional<Plan> truncate_route(std::string_view rest, const RequestView&) {
  return cut_body(rest, Ending::close);
}

std::optional<Plan> reset_route(std::string_view rest, const RequestView&) {
  return cut_body(rest, Ending::reset);
}

std::optional<Plan> stall_route(std::string_view, const RequestView&) {
  Plan plan;
  plan.stall = true;
  return plan;
}

// /drop-next[/PATH]: PATH's answer (or a short text), on a connection kept open; the next request
// on it is read and then dropped with a close, unanswered — an origin that timed out an idle
// connection just as a request arrived (RFC 9112 §9.3.1), which a proxy may retry only when the
// request is idempotent.
std::optional<Plan> drop_next_route(std::string_view rest, const RequestView& request) {
  std::optional<Plan> inner;
  if (!rest.empty()) inner = route("/" + std::string(rest), request);
  Plan plan;
  if (inner && !inner->stats) {
    plan = std::move(*inner);
  } else {
    plan.reply = text_reply(200, "the next request on this connection is dropped\n");
  }
  plan.drop_next = true;
  return plan;
}

std::optional<Plan> status_route(std::string_view rest, const RequestView&) {
  auto status = parse_number(rest, 599);
  if (!status || *status < 100) return std::nullopt;
  int value = static_cast<int>(*status);
  Plan plan;
  plan.reply =
      text_reply(value, std::to_string(value) + " " + std::string(proxy::reason_phrase(value)) + "\n");
  if (value < 200 || value == 204 || value == 304) {
    plan.reply.body.clear();
    plan.reply.framing = Framing::none;
  }
  // A 1xx is interim; a client would wait for a final response that never comes, so the
  // connection closes after it.
  if (value < 200) plan.reply.ending = Ending::close;
  return plan;
}

std::optional<Plan> headers_route(std::string_view, const RequestView& request) {
  Plan plan;
  plan.reply = text_reply(200, std::string(request.raw_fields));
  return plan;
}

std::optional<Plan> anything_route(std::string_view, const RequestView& request) {
  Plan plan;
  plan.reply = text_reply(200, anything_json(request));
  plan.reply.content_type = "application/json";
  return plan;
}

// /cache/SECONDS: max-age=SECONDS with a validator; a matching If-None-Match gets 304.
std::optional<Plan> cache_route(std::string_view rest, const RequestView& request) {
  auto max_age = parse_number(rest, 1'000'000'000);
  if (!max_age) return std::nullopt;
  Plan plan;
  std::string etag = "\"cache-" + std::to_string(*max_age) + "\"";
  auto if_none_match = proxy::find_field(request.head.fields, "If-None-Match");
  if (if_none_match && (*if_none_match == etag || *if_none_match == "*")) {
    plan.reply.status = 304;
    plan.reply.framing = Framing::none;
  } else {
    plan.reply = text_reply(200, "cacheable for " + std::to_string(*max_age) + " s\n");
  }
  plan.reply.fields = {{"Cache-Control", "max-age=" + std::to_string(*max_age)},
                       {"ETag", etag},
                       {"Last-Modified", std::string(kLastModified)}};
  return plan;
}

std::optional<Plan> no_store_route(std::string_view rest, const RequestView&) {
  std::optional<Plan> plan = bytes_of(rest, Framing::content_length);
  if (plan) plan->reply.fields = {{"Cache-Control", "no-store"}};
  return plan;
}

std::optional<Plan> respond_route_of(std::string_view, const RequestView& request) {
  return respond_route(request);
}

// /echo: the request body byte for byte, whatever the method.
std::optional<Plan> echo_route(std::string_view, const RequestView& request) {
  Plan plan;
  plan.reply.content_type = "application/octet-stream";
  plan.reply.body = request.body;
  plan.reply.fields = {{"X-Echo-Method", request.head.method}};
  return plan;
}

// /interim/CODE[/PATH]: an interim CODE response (100 or 103) before PATH's answer.
std::optional<Plan> interim_route(std::string_view rest, const RequestView& request) {
  auto slash = rest.find('/');
  auto code = parse_number(rest.substr(0, slash), 199);
  if (!code || *code < 100 || *code == 101) return std::nullopt;
  Plan plan = wrapped_plan(rest, slash, request,
                           "final response after a " + std::to_string(*code) + "\n");
  plan.reply.interim = "HTTP/1.1 " + std::to_string(*code) + " " +
                       std::string(proxy::reason_phrase(static_cast<int>(*code))) + "\r\n" +
                       (*code == 103 ? "Link: </style.css>; rel=preload; as=style\r\n" : "") +
                       "\r\n";
  return plan;
}

std::optional<Plan> stats_route(std::string_view, const RequestView&) {
  Plan plan;
  plan.stats = true;
  plan.reply.content_type = "application/json";
  return plan;
}

// A route: a path matched exactly, or a prefix (ending in '/') whose rest the handler reads.
struct Route {
  std::string_view path;
  bool prefix;
  std::optional<Plan> (*handler)(std::string_view rest, const RequestView& request);
};

constexpr Route kRoutes[] = {
    {"/delay/", true, delay_route},         {"/bytes/", true, bytes_route},
    {"/stream-bytes/", true, stream_bytes_route},
    {"/close/", true, close_route},         {"/truncate/", true, truncate_route},
    {"/reset/", true, reset_route},         {"/stall", false, stall_route},
    {"/status/", true, status_route},       {"/headers", false, headers_route},
    {"/anything", false, anything_route},   {"/anything/", true, anything_route},
    {"/cache/", true, cache_route},         {"/respond", false, respond_route_of},
    {"/no-store/", true, no_store_route},   {"/echo", false, echo_route},
    {"/interim/", true, interim_route},     {"/drop-next", false, drop_next_route},
    {"/drop-next/", true, drop_next_route}, {"/__stats", false, stats_route},
};

// Maps a path (no query) to a plan; nullopt when no route matches (404).
std::optional<Plan> route(std::string_view path, const RequestView& request) {
  for (const Route& r : kRoutes) {
    if (r.prefix ? path.starts_with(r.path) : path == r.path) {
      return r.handler(path.substr(r.prefix ? r.path.size() : path.size()), request);
    }
  }
  return std::nullopt;
}

// type is ignored in standards mode, and an SVG displays in <img> only as image/svg+xml.
std::string_view site_content_type(std::string_view file) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},  // RFC 9239 §6
      {".json", "application/json"},         {".txt", "text/plain; charset=utf-8"},
      {".png", "image/png"},                 {".gif", "image/gif"},
      {".svg", "image/svg+xml"},             {".jpg", "image/jpeg"},
      {".ico", "image/vnd.microsoft.icon"},
  };
  for (auto [extension, type] : kTypes) {
    if (file.ends_with(extension)) return type;
  }
  return "application/octet-stream";
}

// The plan for /site/PATH: the file's bytes, or a 404 for a missing file or any path that could
// leave the directory (an empty, "." or ".." segment, or a percent-escape we do not decode).
std::optional<Plan> site_route(const std::string& site_dir, std::string_view path) {
  auto rest = after(path, "/site/");
  if (!rest) return std::nullopt;
  std::string relative(*rest);
  if (relative.empty() || relative.ends_with('/')) relative += "index.html";
  if (relative.find('%') != std::string::npos || relative.find('\\') != std::string::npos) {
    return std::nullopt;
  }
  for (std::size_t start = 0; start <= relative.size();) {
    auto slash = relative.find('/', start);
    auto segment = std::string_view(relative).substr(start, slash - start);
    if (segment.empty() || segment == "." || segment == "..") return std::nullopt;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  std::error_code error;
  const std::filesystem::path file = std::filesystem::path(site_dir) / relative;
  if (!std::filesystem::is_regular_file(file, error)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  std::string body{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return std::nullopt;
  Plan plan;
  plan.reply = text_reply(200, std::move(body));
  plan.reply.content_type = std::string(site_content_type(relative));
  plan.reply.fields = {{"Cache-Control", "max-age=3600"},
                       {"Last-Modified", std::string(kLastModified)}};
  return plan;
}

}  // namespace

std::optional<Plan> plan_for(std::string_view path, const RequestView& request,
                             const std::string& site_dir) {
  std::optional<Plan> plan = route(path, request);
  if (!plan && !site_dir.empty()) plan = site_route(site_dir, path);
  return plan;
}

// The value of ?delay_ms=MS, 0 when absent; nullopt when malformed.
std::optional<std::uint64_t> query_delay(std::string_view query) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    if (auto value = after(pair, "delay_ms=")) return parse_number(*value, kMaxDelayMs);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return 0;
}

}  // namespace harness
