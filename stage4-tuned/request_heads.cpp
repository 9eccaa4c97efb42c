// What stage 4's poller does with a request head, without a worker: reads it — whatever has
// arrived, never waiting — until it is whole (a head that trickles past --client-timeout-ms is
// answered 408 by the timeout sweep, poller_timeouts.cpp); and answers a cache hit itself, so
// that a hit costs no hand-off (tuned_server.h).
#include <array>

#include "http_message.h"
#include "tuned_server.h"

namespace proxy {

using Clock = std::chrono::steady_clock;

// Reads whatever has arrived, without waiting, until the head is complete (or malformed: the
// worker answers that), the peer ends, or nothing more is there.
TunedServer::HeadState TunedServer::read_head(Parked& parked) {
  const RequestLimits& limits = options_.limits;
  // Past this, parse_request has its verdict (414 or 431) whatever follows.
  const std::size_t most = limits.max_header_bytes + limits.max_request_line;
  std::array<char, 16 * 1024> chunk;
  bool ended = false;  // the client closed its side (a FIN): a whole head before it still counts
  while (parked.head.size() <= most) {
    const IoResult got = parked.client.connection.socket().read_now(chunk);
    if (got.status == IoStatus::ok) {
      if (parked.head.empty()) parked.first_byte = Clock::now();
      parked.head.append(chunk.data(), got.bytes);
      if (got.bytes < chunk.size()) break;  // most likely all there is
      continue;
    }
    if (got.status == IoStatus::eof) {
      ended = true;
      break;
    }
    if (got.status == IoStatus::timeout) break;  // nothing more has arrived
    return HeadState::closed;  // a reset
  }
  parked.head.erase(0, leading_empty_lines(parked.head));  // RFC 9112 §2.2
  const HeadState wait = ended ? HeadState::closed : HeadState::more;
  // Parsed even when nothing new arrived: the bytes held may be a pipelined request that came
  // in behind a miss the poller served (poller_misses.cpp), not yet looked at.
  if (parked.head.empty()) return wait;
  // Incomplete: if the read above stopped short of EAGAIN, a re-armed level-triggered fd
  // fires again at once for the rest; that is one extra wakeup, not a spin. Past `most` a worker
  // answers whatever the parser says (414 or 431).
  return classify_head(parked, parked.head.size() > most ? HeadState::ready : wait);
}

// The one parse of a request on the poller: classify (admission.h) judges the head once, and
// parked.front carries the verdict to answer_hit, admit, start_miss and dispatch.
TunedServer::HeadState TunedServer::classify_head(Parked& parked, HeadState wait) {
  if (parked.front) return HeadState::ready;  // judged already
  ClassifiedRequest front = classify(parked.head, options_);
  if (front.status == ParseStatus::incomplete) return wait;
  parked.front = std::move(front);
  return HeadState::ready;
}

// A hit answered here, on the poller (serve_hit_now): a cache's most common request costs no
// hand-off to a worker and back, which is most of what a hit costs (stage4-tuned/README.md).
// `ready` when a worker must take the request, `more` when the connection stays parked.
TunedServer::HeadState TunedServer::answer_hit(Parked& parked) {
  const auto began = Clock::now();
  const HitOutcome outcome = serve_hit_now(parked.client.connection, parked.head, parked.front,
                                           server_.cache(), options_, server_.stats());
  if (outcome == HitOutcome::not_served) return HeadState::ready;
  latency_.observe(Clock::now() - began);
  if (outcome == HitOutcome::failed) {
    parked.head.clear();
    parked.front.reset();
    return HeadState::closed;
  }
  parked.since = began;  // the idle timeout runs from the last response
  // A pipelined request already read goes to a worker, judged here first (for its origin's
  // limit); a partly sent hit waits in epoll.
  if (outcome == HitOutcome::served && !parked.head.empty()) {
    return classify_head(parked, HeadState::ready);
  }
  return HeadState::more;
}

// The rest of a hit the client's socket did not take at once (answer_hit); then, as readable()
// would, the next request: one already read (pipelined), or whatever has arrived.
TunedServer::HeadState TunedServer::send_unsent(Parked& parked) {
  const std::size_t before = parked.client.connection.unsent_bytes();
  switch (parked.client.connection.send_unsent()) {
    case IoStatus::ok:
      parked.since = Clock::now();
      return parked.head.empty() ? read_head(parked) : classify_head(parked, HeadState::ready);
    case IoStatus::timeout:
      // The client is reading: the write timeout runs from its last progress.
      if (parked.client.connection.unsent_bytes() != before) parked.since = Clock::now();
      return HeadState::more;
    default:
      return HeadState::closed;
  }
}

}  // namespace proxy
