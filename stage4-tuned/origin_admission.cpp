// Admission to an origin's concurrency limit (origin_gates.h), on the poller. A request that
// is not a hit needs a permit of its origin before it goes anywhere — to the poller's own miss
// path or to a worker. Past the limit it waits here, parked in the poller's memory and holding
// no thread, in its origin's queue; a permit given back lets the oldest in. A queue that stands
// past --origin-queue-ms for --shed-interval-ms sheds its own newcomers with 503 (CoDel, as
// the worker queue does), so a collapsing origin's backlog never costs another origin anything.
// A request whose client hangs up keeps its permit until its origin has answered it (Orphan).
#include <sys/epoll.h>

#include <string>

#include "http/http_message.h"
#include "server/log.h"
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

// A client that hangs up while its origin still serves its request: the request is dropped,
// but it counts against its origin's limit until the origin is done with it (tuned_server.h,
// Orphan) — a poller miss's, and a worker's handed over by ProxyOptions::keep_abandoned.
void TunedServer::abandon_miss(Parked& parked, int fd) {
  Client& client = parked.client;
  if (!client.permit) {  // no limit to honour: the origin request is dropped at once
    stop_watching_origin(parked);
    drop_miss(client.connection, std::move(client.miss.in_flight), options_, server_.stats());
    free_slot(fd);
    return;
  }
  // The origin still counts it in service. Its connection stays in epoll (same registration);
  // only its owner changes, from the client to orphans_.
  const int origin = origin_fd(*client.miss.in_flight);
  origin_owner_[static_cast<std::size_t>(origin)] = -1;
  misses_waiting_.fetch_sub(1, std::memory_order_relaxed);
  log_line("client " + client.connection.peer() + " hung up before the origin answered; its " +
           "answer will be read and dropped, nothing stored, and its origin's permit held until " +
           "then");
  orphans_.emplace(origin, Orphan{std::move(client.miss), Socket(), std::move(client.permit)});
  free_slot(fd);
}

void TunedServer::orphan_readable(int origin) {
  auto it = orphans_.find(origin);
  if (!it->second.miss) {  // a worker's: any byte, or the close, says the origin is done
    orphans_.erase(it);
    return;
  }
  const MissRead read = it->second.miss.read();
  if (read == MissRead::waiting || read == MissRead::arriving) return;
  // Answered (whole, or far enough that the origin is done with it): the permit goes back
  // without a sample, as for any dropped request, and the connection closes, leaving epoll.
  orphans_.erase(it);
}

void TunedServer::keep_permit_until_answered(Socket origin, OriginPermit permit) {
  if (!origin.valid()) return;  // the permit goes back now, with no sample
  PollerMiss none;  // the worker's request is not a poller miss: only its origin timeout runs
  none.sent = none.last_byte = Clock::now();
  handed_orphans_.post(Orphan{std::move(none), std::move(origin), std::move(permit)});
  wake_poller();
}

void TunedServer::adopt_orphans() {
  for (Orphan& orphan : handed_orphans_.take()) {
    const int fd = orphan.socket.fd();
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = fd;
    // Unwatched, its permit could only wait for the timeout: it goes back now instead.
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) continue;
    orphans_.emplace(fd, std::move(orphan));
  }
}

void TunedServer::time_out_orphans(Clock::time_point now) {
  std::erase_if(orphans_, [&](const auto& entry) {
    return now - entry.second.miss.last_byte >= options_.origin_timeout;
  });
}

}  // namespace proxy
