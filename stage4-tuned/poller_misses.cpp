// A miss served without a worker (tuned_server.h): the poller sends a plain GET miss on a kept
// origin connection, waits for the answer in epoll beside every other connection, and relays it
// once it has arrived whole. A miss on a worker costs that worker the origin's whole delay and a
// wake-up when the answer comes, and the poller another when the connection comes back: most of
// what a miss costs the proxy (docs/stage4-runs.md, "Which wake-ups cost"). Anything the
// poller cannot finish without blocking goes to a worker, which goes on from where it is.
// tuned_server.cpp calls in at five places: readable() starts a miss or abandons one whose
// client hung up, run() routes its origin's events here, sweep_timeouts() and housekeeping()
// time them out; serve() goes on with one on a worker.
#include <sys/epoll.h>

#include "log.h"
#include "tuned_server.h"

namespace proxy {

using Clock = std::chrono::steady_clock;

// False when no miss was started (a worker serves the request), or when epoll could not watch
// it (a worker goes on with it: dispatch() takes client.miss along).
bool TunedServer::start_miss(Parked& parked, int fd) {
  Client& client = parked.client;
  PendingMiss miss =
      start_miss_now(client.connection, parked.head.bytes(), parked.head.front(), options_,
                     server_.stats());
  if (!miss) return false;
  const int origin = origin_fd(*miss);
  client.miss.in_flight = std::move(miss);
  // The origin's answer, level-triggered: each wake-up reads until EAGAIN. The client only by
  // hanging up (no EPOLLIN: a pipelined request waits its turn in the socket).
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.fd = origin;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, origin, &event) != 0) {
    log_line("epoll_ctl for an origin connection failed; a worker waits for its answer");
    return false;
  }
  event.events = EPOLLRDHUP | EPOLLONESHOT;
  event.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, client.in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &event) != 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, origin, nullptr);
    log_line("epoll_ctl for a client failed; a worker waits for its origin's answer");
    return false;
  }
  client.in_epoll = true;
  const auto index = static_cast<std::size_t>(origin);
  if (index >= origin_owner_.size()) origin_owner_.resize(index + 1, -1);
  origin_owner_[index] = fd;
  client.miss.sent = client.miss.last_byte = Clock::now();
  parked.state = ParkedState::awaiting_origin;
  misses_waiting_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void TunedServer::origin_readable(int origin) {
  const int fd = origin_owner_[static_cast<std::size_t>(origin)];
  Parked& parked = *parked_[static_cast<std::size_t>(fd)];
  PollerMiss& miss = parked.client.miss;
  const MissRead read = miss.read();
  const auto now = Clock::now();
  if (read == MissRead::arriving && parked.state == ParkedState::awaiting_origin) {
    parked.state = ParkedState::receiving_body;  // sweep_timeouts hands a slow body on
    miss.head_whole = now;
  }
  if (read == MissRead::waiting || read == MissRead::arriving) return;
  // Out of epoll before the connection can go back to the origin pool, and another thread.
  stop_watching_origin(parked);
  if (read == MissRead::needs_worker) {
    dispatch(parked);
    free_slot(fd);
    return;
  }
  // The origin's own latency, before the miss is consumed: what the limit judges the origin by.
  const std::optional<std::chrono::nanoseconds> origin_took = origin_latency(*miss.in_flight);
  const HitOutcome outcome = complete_miss_now(parked.client.connection, std::move(miss.in_flight),
                                               server_.cache(), options_, server_.stats());
  latency_.observe(Clock::now() - miss.sent);
  // The origin has answered: its next request may go.
  parked.client.permit.finish(!origin_failed(parked.client.connection.last_status()), origin_took);
  if (outcome == HitOutcome::failed) {  // the client went away: nothing was relayed
    free_slot(fd);
    return;
  }
  poller_misses_.fetch_add(1, std::memory_order_relaxed);
  parked.since = now;  // the idle timeout runs from the last response
  if (!parked.head.empty()) parked.head.restart_clock(now);  // a pipelined head: its own timeout
  parked.state = client_wait(parked);
  // Then as for any parked connection: the rest of this response, or the next request — one
  // already read (pipelined), one arrived meanwhile, or a wait in epoll for it.
  readable(fd);
}

void TunedServer::stop_watching_origin(Parked& parked) {
  const int origin = origin_fd(*parked.client.miss.in_flight);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, origin, nullptr);
  origin_owner_[static_cast<std::size_t>(origin)] = -1;
  misses_waiting_.fetch_sub(1, std::memory_order_relaxed);
}

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

void TunedServer::free_slot(int fd) {
  parked_[static_cast<std::size_t>(fd)].reset();  // destroying a Client closes it, leaving epoll
  parked_count_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace proxy
