// classify (admission.h): a request head parsed once and judged in serve_request's order — the
// Host field, the proxy's own /metrics, CONNECT, what the proxy does not serve, and the cache;
// and HeadReader, which reads a head for stage 4's poller without waiting.
#include "transaction/admission.h"

#include <array>

#include "transaction/proxy.h"
#include "transaction/transaction.h"

namespace proxy {
namespace {

// GET and HEAD are handled apart from these; CONNECT too. TRACE is left out on purpose: it
// would echo a client's credentials back through us (RFC 9110 §9.3.8), and nobody needs it.
bool is_forwarded_method(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    if (method == known) return true;
  }
  return false;
}

void refuse(ClassifiedRequest& out, int status, std::string detail) {
  out.route = Route::refuse;
  out.error_status = status;
  out.error_detail = std::move(detail);
}

// The route of a complete request head, in the order serve_request answers: a missing or
// repeated Host first, then the proxy's own /metrics, CONNECT, what this proxy does not serve (a method it
// does not forward: 501; a target that is not an absolute http:// URI: 501 for another scheme,
// else 400; an ambiguous body framing: 400), and last an http:// request.
void route(ClassifiedRequest& out, const ProxyOptions& options) {
  const Request& request = out.request;
  // RFC 9112 §3.2: a server answers 400 to an HTTP/1.1 request without a Host field and to any
  // request with more than one (identical ones too). HTTP/1.0 had no Host, so it may lack one.
  const std::size_t hosts = count_fields(request.fields, "Host");
  if (hosts > 1) {
    refuse(out, 400, "more than one Host field (RFC 9112 §3.2)");
  } else if (hosts == 0 && request.version_minor >= 1) {
    refuse(out, 400, "an HTTP/1.1 request without a Host field (RFC 9112 §3.2)");
  } else if (options.metrics && request.method == "GET" && request.target == "/metrics") {
    out.route = Route::metrics;
  } else if (request.method == "CONNECT") {
    out.route = Route::tunnel;
  } else if (!is_forwarded_method(request.method)) {
    refuse(out, 501, "method " + request.method + " is not supported; this proxy forwards "
                     "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS and CONNECT");
  } else if (!out.uri || out.uri->scheme != "http") {
    const std::size_t scheme_end = request.target.find("://");
    if (scheme_end != std::string::npos && !iequals(request.target.substr(0, scheme_end), "http")) {
      refuse(out, 501, "only http:// targets are supported, not '" +
                           request.target.substr(0, scheme_end) + "://'");
    } else {
      refuse(out, 400, "a proxy request needs a valid absolute-form target, such as "
                       "GET http://example.com/ HTTP/1.1");
    }
  } else if (!out.body) {
    refuse(out, 400, "ambiguous request body framing (Content-Length with "
                     "Transfer-Encoding, or conflicting lengths)");
  } else {
    out.rules = request_cache_rules(request);
    // RFC 9111 §4: only a GET may be answered from the cache, and never a Range request.
    out.route = request.method == "GET" && !out.rules.bypass ? Route::cache_get : Route::forward;
  }
}

}  // namespace

ClassifiedRequest classify(std::string_view buffer, const ProxyOptions& options) {
  ClassifiedRequest out;
  const RequestParseResult parsed = parse_request(buffer, out.request, options.limits);
  out.status = parsed.status;
  if (parsed.status == ParseStatus::incomplete) return out;
  if (parsed.status == ParseStatus::invalid) {
    refuse(out, parsed.error_status, parsed.error_reason);
    return out;
  }
  out.head_bytes = parsed.consumed;
  const Request& request = out.request;
  out.uri = parse_absolute_uri(request.target);
  if (out.uri && out.uri->scheme == "http") out.cache_key = out.uri->cache_key();
  out.body = request_body_framing(request);
  const bool no_body = out.body && out.body->kind == BodyKind::none;
  // After a CONNECT the connection is a tunnel: what follows its head is tunnel bytes.
  out.persistent = options.keep_alive && request.method != "CONNECT" && no_body &&
                   wants_persistence(request);
  route(out, options);
  // Stage 4's poller never blocks, so it takes only what needs no read of a body and no wait
  // for a connect: a plain GET, and /metrics on a connection that stays open.
  if (out.route == Route::cache_get && no_body && options.keep_alive) {
    out.path = out.persistent ? ServingPath::poller : ServingPath::poller_lookup;
  } else if (out.route == Route::metrics && out.persistent) {
    out.path = ServingPath::poller;
  }
  return out;
}

std::string ClassifiedRequest::origin() const {
  // A request the proxy refuses itself never reaches its origin: taking a permit for it would
  // make it wait behind a full limit for its 400, and its microseconds would read as the
  // origin's latency.
  if (status != ParseStatus::complete || route == Route::refuse || request.method == "CONNECT" ||
      !uri || uri->scheme != "http") {
    return {};
  }
  return uri->host + ":" + std::to_string(uri->port);
}

HeadReader::Status HeadReader::read(const Socket& socket, const ProxyOptions& options) {
  const RequestLimits& limits = options.limits;
  // Past this, parse_request has its verdict (414 or 431) whatever follows.
  const std::size_t most = limits.max_header_bytes + limits.max_request_line;
  std::array<char, 16 * 1024> chunk;
  bool ended = false;  // the client closed its side (a FIN): a whole head before it still counts
  while (bytes_.size() <= most) {
    const IoResult got = socket.read_now(chunk);
    if (got.status == IoStatus::ok) {
      if (bytes_.empty()) first_byte_ = Clock::now();
      bytes_.append(chunk.data(), got.bytes);
      if (got.bytes < chunk.size()) break;  // most likely all there is
      continue;
    }
    if (got.status == IoStatus::eof) {
      ended = true;
      break;
    }
    if (got.status == IoStatus::timeout) break;  // nothing more has arrived
    return Status::closed;  // a reset
  }
  bytes_.erase(0, leading_empty_lines(bytes_));  // RFC 9112 §2.2
  const Status wait = ended ? Status::closed : Status::more;
  // Parsed even when nothing new arrived: the bytes held may be a pipelined request that came
  // in behind a miss the poller served, not yet looked at.
  if (bytes_.empty()) return wait;
  // Incomplete: if the read above stopped short of EAGAIN, a re-armed level-triggered fd
  // fires again at once for the rest; that is one extra wakeup, not a spin. Past `most` a worker
  // answers whatever the parser says (414 or 431).
  return classify_front(options, bytes_.size() > most ? Status::ready : wait);
}

HeadReader::Status HeadReader::classify_front(const ProxyOptions& options, Status wait) {
  if (front_) return Status::ready;  // judged already
  ClassifiedRequest front = classify(bytes_, options);
  if (front.status == ParseStatus::incomplete) return wait;
  front_ = std::move(front);
  return Status::ready;
}

void HeadReader::hand_to(ClientConnection& connection) {
  connection.add_buffered(bytes_, std::move(front_));
  bytes_.clear();
  front_.reset();
}

}  // namespace proxy
