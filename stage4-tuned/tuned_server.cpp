// Stage 4's poller and workers (tuned_server.h explains the design), in the order a request
// meets them: the poller reads its head (HeadReader, admission.h), answers a hit itself, asks
// its origin's limit for a permit (origin_admission.cpp), sends a plain miss itself and relays
// the answer, or hands the request to a worker (load_shedding.cpp), which serves it. The
// poller's deadlines are in poller_timeouts.cpp; what it measures (the pool's sizing, /metrics)
// in measurements.cpp; what the machine allows (workers, descriptors) in machine_limits.cpp;
// how it starts and stops in startup.cpp.
#include "tuned_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>

#include "http/http_message.h"
#include "server/log.h"
#include "server/overload.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

// Level-triggered and one-shot: the poller reads a readable connection until EAGAIN, so a
// re-armed one fires again only when new bytes (or its end) arrive; a worker's connection is
// disarmed until it comes back.
constexpr std::uint32_t kParkedEvents = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
// A parked connection whose hit the socket did not take whole waits to be writable instead.
// No EPOLLRDHUP: a client that half-closed may still read, and a hang-up stays level-triggered,
// so every re-arm would report it again at once (a spin) until the socket took the rest.
constexpr std::uint32_t kUnsentEvents = EPOLLOUT | EPOLLONESHOT;

// For one client's registration: a failure (ENOMEM, ENOSPC past max_user_watches) costs that
// client its connection, never the server.
bool epoll_client(int epoll_fd, int op, int fd, std::uint32_t events) noexcept {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  if (::epoll_ctl(epoll_fd, op, fd, &event) == 0) return true;
  log_line(std::string("epoll_ctl for a client: ") + std::strerror(errno) + "; closing it");
  return false;
}

// The origin connection of the request this worker thread just dropped because its client hung
// up (ProxyOptions::keep_abandoned), until serve() hands it to the poller with the permit.
thread_local std::optional<Socket> t_abandoned_origin;

}  // namespace

void epoll_control(int epoll_fd, int op, int fd, std::uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  if (::epoll_ctl(epoll_fd, op, fd, &event) != 0) {
    throw std::system_error(errno, std::generic_category(), "epoll_ctl");
  }
}

void TunedServer::hold_abandoned_origin(Socket origin) {
  t_abandoned_origin = std::move(origin);
}

void TunedServer::run() {
  const int listener = server_.listener().fd();
  const int stop_fd = server_.shutdown().stop_fd();
  epoll_control(epoll_fd_, EPOLL_CTL_ADD, listener, EPOLLIN);
  epoll_control(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, EPOLLIN);
  epoll_control(epoll_fd_, EPOLL_CTL_ADD, stop_fd, EPOLLIN);
  std::array<epoll_event, 256> events;
  bool stop = false;
  while (!stop) {
    int ready = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), kTickMs);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "epoll_wait");
    }
    for (int i = 0; i < ready; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == stop_fd) {
        stop = true;
      } else if (fd == listener) {
        accept_ready();
      } else if (fd == wake_fd_) {
        take_returned();
      } else if (orphans_.contains(fd)) {
        orphan_readable(fd);
      } else if (static_cast<std::size_t>(fd) < origin_owner_.size() &&
                 origin_owner_[static_cast<std::size_t>(fd)] >= 0) {
        origin_readable(fd);
      } else {
        readable(fd);
      }
    }
    housekeeping(Clock::now());
  }

  // Stop: no new clients, parked connections closed, queued ones (for a worker or for their
  // origin's limit) told 503, in-flight ones — a worker's or a poller miss — finish (or are cut
  // by Shutdown after the grace period) while the workers are joined.
  stopping_.store(true);
  epoll_control(epoll_fd_, EPOLL_CTL_DEL, listener, 0);
  std::vector<Client> in_flight;  // misses the poller sent: they finish, as a worker's do
  for (std::unique_ptr<Parked>& parked : parked_) {
    if (!parked) continue;
    switch (parked->state) {
      case ParkedState::awaiting_permit:
        reply_overloaded(parked->client.connection.release(), server_.stats(), "shutting down",
                         "still waiting for its origin's limit");
        break;
      case ParkedState::awaiting_origin:
      case ParkedState::receiving_body:
        stop_watching_origin(*parked);
        in_flight.push_back(std::move(parked->client));
        break;
      case ParkedState::idle:
      case ParkedState::reading_head:
      case ParkedState::sending_response:
        break;  // closed below, as parked_ is cleared
    }
  }
  parked_.clear();
  parked_count_.store(0);
  origin_queues_.clear();
  orphans_.clear();  // their clients are gone: nothing to finish
  handed_orphans_.clear();
  for (Job& job : pool_.close()) {
    reply_overloaded(job.client.connection.release(), server_.stats(), "shutting down",
                     "still queued for a worker");
  }
  for (Client& client : in_flight) {
    // Blocking here, one after another: Shutdown cuts every wait at the end of its grace period.
    finish_miss(client.connection, std::move(client.miss.in_flight), server_.cache(), options_,
                server_.stats(), client.miss.wait_left(Clock::now(), options_.origin_timeout));
    t_abandoned_origin.reset();  // a client that hung up meanwhile: nobody waits on its origin now
  }
  pool_.shutdown();
  returned_.clear();
}

// A new connection, or one a worker is done with: its next request head is read here. A new
// client usually sends its request at once, and on loopback it is often here by now; a
// returning one often has its next request waiting. Reading at once saves a trip through epoll.
void TunedServer::park(Client client) {
  const int fd = client.connection.socket().fd();
  const auto index = static_cast<std::size_t>(fd);
  if (index >= parked_.size()) parked_.resize(index + 1);
  const auto now = Clock::now();
  // A worker that served one request of a pipelined batch hands the rest back: the poller
  // admits each request to its origin's limit (origin_admission.cpp).
  std::string head = client.connection.take_buffered();
  auto parked =
      std::make_unique<Parked>(Parked{std::move(client), now, HeadReader(std::move(head), now)});
  parked->state = client_wait(*parked);
  parked_[index] = std::move(parked);
  parked_count_.fetch_add(1, std::memory_order_relaxed);
  readable(fd);
}

void TunedServer::readable(int fd) {
  const auto index = static_cast<std::size_t>(fd);
  if (index >= parked_.size() || !parked_[index]) return;
  Parked& parked = *parked_[index];
  HeadState next = HeadState::more;
  switch (parked.state) {
    case ParkedState::idle:
    case ParkedState::reading_head:
      next = parked.head.read(parked.client.connection.socket(), options_);
      break;
    case ParkedState::sending_response:
      next = send_unsent(parked);
      break;
    case ParkedState::awaiting_permit:
      // Disarmed, and a late event of a previous owner of the descriptor must not read its
      // next request into the queue with it.
      return;
    case ParkedState::awaiting_origin:
    case ParkedState::receiving_body:
      // Its miss is watched for the client's hang-up only (start_miss): the origin request is
      // dropped, as a worker drops it (ProxyOptions::drop_abandoned). But an event epoll_wait
      // returned may belong to this descriptor number's previous owner, closed earlier in the
      // same batch — a client, or a dropped miss's origin connection — since accept(2) hands out
      // the lowest free number at once. Only a hang-up this socket shows now counts; its own
      // registration has not fired, so it is still armed.
      if (parked.client.connection.socket().peer_hung_up()) abandon_miss(parked, fd);
      return;
  }
  if (next == HeadState::ready) next = answer_hit(parked);
  if (next == HeadState::ready && config_.origin_limit) {
    const Admission admission = admit(parked, fd);
    if (admission == Admission::wait) return;  // stays parked, disarmed, in origin_queues_
    if (admission == Admission::shed) {
      free_slot(fd);
      return;
    }
  }
  go_on(parked, fd, next);
}

TunedServer::ParkedState TunedServer::client_wait(const Parked& parked) noexcept {
  if (parked.client.connection.has_unsent()) return ParkedState::sending_response;
  return parked.head.empty() ? ParkedState::idle : ParkedState::reading_head;
}

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
  // A pipelined request already read goes on as readable() would take it: judged here (for
  // its origin's limit) once whole, read further while it is not — a worker handed part of a
  // head would wait for the rest, pinned by a client that trickles it (step 1 of the README).
  // A partly sent hit waits in epoll.
  if (outcome == HitOutcome::served && !parked.head.empty()) {
    parked.head.restart_clock(began);  // a pipelined head: its own client timeout
    return parked.head.read(parked.client.connection.socket(), options_);
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
      // A pipelined head read while the client was reading: its client timeout starts now.
      if (!parked.head.empty()) parked.head.restart_clock(parked.since);
      return parked.head.read(parked.client.connection.socket(), options_);
    case IoStatus::timeout:
      // The client is reading: the write timeout runs from its last progress.
      if (parked.client.connection.unsent_bytes() != before) parked.since = Clock::now();
      return HeadState::more;
    default:
      return HeadState::closed;
  }
}

void TunedServer::go_on(Parked& parked, int fd, HeadState next) {
  // A plain miss whose origin has a kept connection: sent from here (start_miss, below).
  if (next == HeadState::ready && config_.poller_misses && start_miss(parked, fd)) return;
  switch (next) {
    case HeadState::ready:
      dispatch(parked);
      break;
    case HeadState::closed:
      if (!parked.head.empty()) {
        log_line("client " + parked.client.connection.peer() +
                 ": closed before finishing its request head");
      }
      break;
    case HeadState::more: {
      // Once added, a connection stays in the set (EPOLLONESHOT disarms it while a worker has
      // it) until it closes, so coming back costs one MOD.
      Client& client = parked.client;
      parked.state = client_wait(parked);
      const std::uint32_t events =
          parked.state == ParkedState::sending_response ? kUnsentEvents : kParkedEvents;
      if (epoll_client(epoll_fd_, client.in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, events)) {
        client.in_epoll = true;
        return;
      }
      break;
    }
  }
  free_slot(fd);  // dispatched or closed
}

void TunedServer::dispatch(Parked& parked) {
  Client client = std::move(parked.client);
  // The head goes with its verdict: the worker does not parse it again.
  parked.head.hand_to(client.connection);
  submit(std::move(client));
}

// A miss served without a worker (step 12): the poller sends a plain GET miss on a kept origin
// connection, waits for the answer in epoll beside every other connection, and relays it once
// it has arrived whole. A miss on a worker costs that worker the origin's whole delay and a
// wake-up when the answer comes, and the poller another when the connection comes back: most of
// what a miss costs the proxy (docs/stage4-runs.md, "Which wake-ups cost"). Anything the poller
// cannot finish without blocking goes to a worker, which goes on from where it is (serve).

// False when no miss was started (a worker serves the request), or when epoll could not watch
// it (a worker goes on with it: dispatch() takes client.miss along).
bool TunedServer::start_miss(Parked& parked, int fd) {
  Client& client = parked.client;
  PendingMiss miss = start_miss_now(client.connection, parked.head.bytes(), parked.head.front(),
                                    options_, server_.stats());
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

void TunedServer::free_slot(int fd) {
  parked_[static_cast<std::size_t>(fd)].reset();  // destroying a Client closes it, leaving epoll
  parked_count_.fetch_sub(1, std::memory_order_relaxed);
}

// On a worker: serve the requests this connection has ready, then hand it back to the poller.
void TunedServer::serve(Job job) {
  if (!leave_queue(job)) return;  // shed: it waited too long (load_shedding.cpp)
  Client& client = job.client;
  ClientConnection& connection = client.connection;
  Cache& cache = server_.cache();
  ProxyStats& stats = server_.stats();
  for (;;) {
    const std::uint64_t before = connection.requests();
    const auto began = Clock::now();
    // A miss the poller sent goes on here from where it is (its request counted there).
    const bool resumed = static_cast<bool>(client.miss);
    // The origin's latency runs from here, not from the worker queue (origin_gates.h); a
    // resumed miss's ran from when the poller sent it.
    if (client.permit && !resumed) client.permit.restart();
    const bool open =
        resumed ? finish_miss(connection, std::move(client.miss.in_flight), cache, options_, stats,
                              client.miss.wait_left(began, options_.origin_timeout))
                : serve_request(connection, cache, options_, stats);
    if (resumed || connection.requests() != before) {
      const auto now = Clock::now();
      const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(now - began);
      // A miss the poller sent waited there for its origin first (up to the origin timeout, for
      // a 504): its request's duration runs from then, as a miss the poller finishes does.
      latency_.observe(resumed ? now - client.miss.sent : now - began);
      worker_requests_.fetch_add(1, std::memory_order_relaxed);
      worker_nanoseconds_.fetch_add(static_cast<std::uint64_t>(took.count()),
                                    std::memory_order_relaxed);
    }
    // Its client hung up while the origin still served it: the permit stays taken until the
    // origin is done with it, which the poller watches for (origin_admission.cpp).
    if (t_abandoned_origin) {
      if (client.permit) {
        keep_permit_until_answered(std::move(*t_abandoned_origin), std::move(client.permit));
      }
      t_abandoned_origin.reset();
    }
    // Its answer is out: the next request to that origin may go.
    client.permit.finish(!origin_failed(connection.last_status()));
    if (!open) return;                      // closed by serve_request
    if (!connection.has_buffered()) break;  // else: a pipelined request is already here
    // Under origin limits each request is admitted by the poller, a pipelined one too: park()
    // takes the bytes back.
    if (config_.origin_limit) break;
  }
  if (stopping_.load()) return;  // closes it: no more requests once stopping
  returned_.post(std::move(client));
  wake_poller();
}

void TunedServer::wake_poller() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void TunedServer::take_returned() {
  std::uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
  for (Client& client : returned_.take()) park(std::move(client));
  adopt_orphans();
  // A permit given back to an origin with requests waiting wakes the poller through here too.
  if (config_.origin_limit) admit_waiting(Clock::now());
}

}  // namespace proxy
