// Admission to an origin's concurrency limit (origin_gates.h), on the poller. A request that
// is not a hit needs a permit of its origin before it goes anywhere — to the poller's own miss
// path or to a worker. Past the limit it waits here, parked in the poller's memory and holding
// no thread, in its origin's queue; a permit given back lets the oldest in. A queue that stands
// past --origin-queue-ms for --shed-interval-ms sheds its own newcomers with 503 (CoDel, as
// the worker queue does), so a collapsing origin's backlog never costs another origin anything.
#include <string>

#include "http_message.h"
#include "log.h"
#include "tuned_server.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

TunedServer::Admission TunedServer::admit(Parked& parked, int fd) {
  parked.client.permit = OriginPermit();  // a permit is for one request, never held while waiting
  // A hit the poller could not send itself (a connection that closes, a large body) never
  // waits for its origin: it needs none.
  if (parked.client.connection.found_stored()) return Admission::go;
  // The origin the request goes to, from classify's verdict on its head (parked.head.front());
  // none for CONNECT, the proxy's own /metrics, or a head not yet whole (a worker reads the rest).
  const std::optional<ClassifiedRequest>& front = parked.head.front();
  const std::string key = front ? front->origin() : std::string();
  if (key.empty()) return Admission::go;
  std::shared_ptr<OriginGate> gate = gates_.gate(key);
  auto queue = origin_queues_.find(gate.get());
  const bool others_waiting = queue != origin_queues_.end() && !queue->second.waiting.empty();
  if (!others_waiting) {
    if (std::optional<OriginPermit> permit = gates_.try_acquire(gate)) {
      parked.client.permit = std::move(*permit);
      return Admission::go;
    }
  }
  if (queue == origin_queues_.end()) {
    const QueueDelayOptions codel{seconds(config_.origin_queue_delay),
                                  seconds(config_.shed_interval)};
    queue =
        origin_queues_.emplace(gate.get(), OriginQueue{gate, {}, QueueDelayShedder(codel)}).first;
  }
  if (queue->second.shedder.dropping()) {
    shed(parked.client.connection.release(),
         "its origin's queue has stood past --origin-queue-ms (CoDel)");
    return Admission::shed;
  }
  queue->second.waiting.push_back(fd);
  gates_.add_waiting(*gate, 1);
  parked.waiting_since = Clock::now();
  parked.state = ParkedState::awaiting_permit;
  return Admission::wait;
}

void TunedServer::admit_waiting(Clock::time_point now) {
  const double now_s = seconds(now - started_);
  for (auto it = origin_queues_.begin(); it != origin_queues_.end();) {
    OriginQueue& queue = it->second;
    while (!queue.waiting.empty()) {
      const int fd = queue.waiting.front();
      Parked& parked = *parked_[static_cast<std::size_t>(fd)];
      // A client that hung up while it waited is not sent on: its permit would go to an
      // answer nobody reads (Socket::peer_hung_up: a poll with no wait).
      if (parked.client.connection.socket().peer_hung_up()) {
        queue.waiting.pop_front();
        gates_.add_waiting(*queue.gate, -1);
        free_slot(fd);
        continue;
      }
      std::optional<OriginPermit> permit = gates_.try_acquire(queue.gate);
      if (!permit) break;
      queue.waiting.pop_front();
      gates_.add_waiting(*queue.gate, -1);
      // CoDel drops at the head, when a request's turn comes: one that waited past the target
      // while the queue stood is refused now rather than sent late to an origin already
      // behind, and its permit goes to the next.
      const bool late =
          queue.shedder.dropping() && now - parked.waiting_since > config_.origin_queue_delay;
      if (late) {
        shed(parked.client.connection.release(),
             "waited past --origin-queue-ms while its origin's queue stood (CoDel)");
        free_slot(fd);
        continue;
      }
      parked.client.permit = std::move(*permit);
      go_on(parked, fd, HeadState::ready);
    }
    const double oldest =
        queue.waiting.empty()
            ? 0
            : seconds(now -
                      parked_[static_cast<std::size_t>(queue.waiting.front())]->waiting_since);
    queue.shedder.observe(oldest, now_s);
    gates_.set_queue_delay(*queue.gate, oldest);
    // An empty queue that no longer sheds is forgotten; its gate lives on in gates_.
    if (queue.waiting.empty() && !queue.shedder.dropping()) {
      it = origin_queues_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace proxy
