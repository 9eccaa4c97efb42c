// What stage 4's poller does with a request head, without a worker: reads it — whatever has
// arrived, never waiting — until it is whole (a head that trickles past --client-timeout-ms is
// answered 408 by the timeout sweep, poller_timeouts.cpp); and answers a cache hit itself, so
// that a hit costs no hand-off (tuned_server.h).
#include <array>

#include "http_message.h"
#include "tuned_server.h"

namespace proxy {

using Clock = std::chrono::steady_clock;

// A hit answered here, on the poller (serve_hit_now): a cache's most common request costs no
// hand-off to a worker and back, which is most of what a hit costs (stage4-tuned/README.md).
// `ready` when a worker must take the request, `more` when the connection stays parked.
TunedServer::HeadState TunedServer::answer_hit(Parked& parked) {
  const auto began = Clock::now();
  const HitOutcome outcome =
      serve_hit_now(parked.client.connection, parked.head.bytes(), parked.head.front(),
                    server_.cache(), options_, server_.stats());
  if (outcome == HitOutcome::not_served) return HeadState::ready;
  latency_.observe(Clock::now() - began);
  if (outcome == HitOutcome::failed) {
    parked.head.clear();
    return HeadState::closed;
  }
  parked.since = began;  // the idle timeout runs from the last response
  // A pipelined request already read goes to a worker, judged here first (for its origin's
  // limit); a partly sent hit waits in epoll.
  if (outcome == HitOutcome::served && !parked.head.empty()) {
    return parked.head.classify_front(options_, HeadState::ready);
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
      return parked.head.empty() ? parked.head.read(parked.client.connection.socket(), options_)
                                 : parked.head.classify_front(options_, HeadState::ready);
    case IoStatus::timeout:
      // The client is reading: the write timeout runs from its last progress.
      if (parked.client.connection.unsent_bytes() != before) parked.since = Clock::now();
      return HeadState::more;
    default:
      return HeadState::closed;
  }
}

}  // namespace proxy
