// What stage 4's poller does with a request head, without a worker: reads it — whatever has
// arrived, never waiting — until it is whole; answers a head that trickles past
// --client-timeout-ms with 408, so that slow clients cannot hold the pool; and answers a cache
// hit itself, so that a hit costs no hand-off (tuned_server.h).
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <string_view>

#include "http_message.h"
#include "log.h"
#include "tuned_server.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

// A head that trickles past --client-timeout-ms, answered by the poller without a worker.
constexpr std::string_view k408Body = "408 Request Timeout: request head not received in time\n";
constexpr std::string_view k408 =
    "HTTP/1.1 408 Request Timeout\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 55\r\n"
    "Connection: close\r\n"
    "X-Cache: MISS\r\n"
    "\r\n"
    "408 Request Timeout: request head not received in time\n";
static_assert(k408Body.size() == 55, "update Content-Length in k408");
static_assert(k408.ends_with(k408Body));

}  // namespace

// Reads whatever has arrived, without waiting, until the head is complete (or malformed: the
// worker answers that), the peer ends, or nothing more is there.
TunedServer::HeadState TunedServer::read_head(Idle& idle) {
  const RequestLimits& limits = options_.limits;
  // Past this, parse_request has its verdict (414 or 431) whatever follows.
  const std::size_t most = limits.max_header_bytes + limits.max_request_line;
  std::array<char, 16 * 1024> chunk;
  bool ended = false;  // the client closed its side (a FIN): a whole head before it still counts
  while (idle.head.size() <= most) {
    const ssize_t n = ::recv(idle.client.connection.socket().fd(), chunk.data(), chunk.size(),
                             MSG_DONTWAIT);
    if (n > 0) {
      if (idle.head.empty()) idle.first_byte = Clock::now();
      idle.head.append(chunk.data(), static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < chunk.size()) break;  // most likely all there is
      continue;
    }
    if (n == 0) {
      ended = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return HeadState::closed;  // a reset
  }
  idle.head.erase(0, leading_empty_lines(idle.head));  // RFC 9112 §2.2
  const HeadState wait = ended ? HeadState::closed : HeadState::more;
  // Parsed even when nothing new arrived: the bytes held may be a pipelined request that came
  // in behind a miss the poller served (poller_misses.cpp), not yet looked at.
  if (idle.head.empty()) return wait;
  // Incomplete: if the read above stopped short of EAGAIN, a re-armed level-triggered fd
  // fires again at once for the rest; that is one extra wakeup, not a spin. Past `most` a worker
  // answers whatever the parser says (414 or 431).
  return classify_head(idle, idle.head.size() > most ? HeadState::ready : wait);
}

// The one parse of a request on the poller: classify (admission.h) judges the head once, and
// idle.front carries the verdict to answer_hit, admit, start_miss and dispatch.
TunedServer::HeadState TunedServer::classify_head(Idle& idle, HeadState wait) {
  if (idle.front) return HeadState::ready;  // judged already
  ClassifiedRequest front = classify(idle.head, options_);
  if (front.status == ParseStatus::incomplete) return wait;
  idle.front = std::move(front);
  return HeadState::ready;
}

// A request head that trickled past --client-timeout-ms: 408, from the poller, never a worker
// (slow-loris clients cannot hold the pool). The bytes fit an empty send buffer; what the
// client sent has been read, so the close is an orderly FIN, not a reset that could destroy the
// 408. Logged at most once a second: two thousand slow clients must not flood stderr.
bool TunedServer::time_out_head(Idle& idle, Clock::time_point now) {
  if (now - idle.first_byte < options_.client_timeout) return false;
  const Socket& socket = idle.client.connection.socket();
  server_.stats().errors.fetch_add(1, std::memory_order_relaxed);
  head_timeouts_.fetch_add(1, std::memory_order_relaxed);
  [[maybe_unused]] ssize_t sent =
      ::send(socket.fd(), k408.data(), k408.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  socket.shutdown_write();
  if (now >= next_408_log_) {
    std::string line = "client " + idle.client.connection.peer() +
                       ": 408 request head not received in time";
    if (unlogged_408_ > 0) line += " (and " + std::to_string(unlogged_408_) + " more not logged)";
    log_line(line);
    unlogged_408_ = 0;
    next_408_log_ = now + Millis{1000};
  } else {
    ++unlogged_408_;
  }
  return true;
}

// A hit answered here, on the poller (serve_hit_now): a cache's most common request costs no
// hand-off to a worker and back, which is most of what a hit costs (stage4-tuned/README.md).
// `ready` when a worker must take the request, `more` when the connection stays parked.
TunedServer::HeadState TunedServer::answer_hit(Idle& idle) {
  const auto began = Clock::now();
  const HitOutcome outcome = serve_hit_now(idle.client.connection, idle.head, idle.front,
                                           server_.cache(), options_, server_.stats());
  if (outcome == HitOutcome::not_served) return HeadState::ready;
  latency_.observe(Clock::now() - began);
  if (outcome == HitOutcome::failed) {
    idle.head.clear();
    idle.front.reset();
    return HeadState::closed;
  }
  idle.since = began;  // the idle timeout runs from the last response
  // A pipelined request already read goes to a worker, judged here first (for its origin's
  // limit); a partly sent hit waits in epoll.
  if (outcome == HitOutcome::served && !idle.head.empty()) {
    return classify_head(idle, HeadState::ready);
  }
  return HeadState::more;
}

// The rest of a hit the client's socket did not take at once (answer_hit); then, as readable()
// would, the next request: one already read (pipelined), or whatever has arrived.
TunedServer::HeadState TunedServer::send_unsent(Idle& idle) {
  const std::size_t before = idle.client.connection.unsent_bytes();
  switch (idle.client.connection.send_unsent()) {
    case IoStatus::ok:
      idle.since = Clock::now();
      return idle.head.empty() ? read_head(idle) : classify_head(idle, HeadState::ready);
    case IoStatus::timeout:
      // The client is reading: the write timeout runs from its last progress.
      if (idle.client.connection.unsent_bytes() != before) idle.since = Clock::now();
      return HeadState::more;
    default:
      return HeadState::closed;
  }
}

}  // namespace proxy
