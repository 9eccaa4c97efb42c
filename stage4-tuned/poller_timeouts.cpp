// The poller's deadlines (tuned_server.h): once a tick (housekeeping), the timeout sweep looks
// at every connection the poller holds and calls the handler of its state (ParkedState). A
// connection between requests is closed after --idle-timeout-ms; a request head that trickles
// past --client-timeout-ms is answered 408 here, so that slow clients cannot hold the pool; a
// response the client does not read is given up after the write timeout; and a miss the poller
// sent goes to a worker once its origin is silent past --origin-timeout-ms (504), or once its
// body is still arriving a tick after its head. A request waiting for its origin's limit has
// no deadline here: its origin's queue sheds it (origin_admission.cpp).
#include <sys/epoll.h>

#include <string>
#include <string_view>

#include "server/log.h"
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

void TunedServer::sweep_timeouts(Clock::time_point now) {
  // A linear scan every tick; parked connections are few compared with what a scan of a
  // vector costs.
  for (std::unique_ptr<Parked>& parked : parked_) {
    if (!parked) continue;
    bool expired = false;
    switch (parked->state) {
      case ParkedState::idle:
        expired = time_out_idle(*parked, now);
        break;
      case ParkedState::reading_head:
        expired = time_out_head(*parked, now);
        break;
      case ParkedState::sending_response:
        expired = time_out_send(*parked, now);
        break;
      case ParkedState::awaiting_permit:
        break;  // admit_waiting sheds it, or not, by its origin's queue's own clock
      case ParkedState::awaiting_origin:
        expired = time_out_origin(*parked, now);
        break;
      case ParkedState::receiving_body:
        expired = time_out_body(*parked, now);
        break;
    }
    if (!expired) continue;
    parked.reset();
    parked_count_.fetch_sub(1, std::memory_order_relaxed);
  }
}

bool TunedServer::time_out_idle(Parked& parked, Clock::time_point now) {
  if (now - parked.since < config_.idle_timeout) return false;
  idle_closed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// A request head that trickled past --client-timeout-ms: 408, from the poller, never a worker
// (slow-loris clients cannot hold the pool). The bytes fit an empty send buffer; what the
// client sent has been read, so the close is an orderly FIN, not a reset that could destroy the
// 408. Logged at most once a second: two thousand slow clients must not flood stderr.
bool TunedServer::time_out_head(Parked& parked, Clock::time_point now) {
  if (now - parked.head.first_byte() < options_.client_timeout) return false;
  const Socket& socket = parked.client.connection.socket();
  server_.stats().errors.fetch_add(1, std::memory_order_relaxed);
  head_timeouts_.fetch_add(1, std::memory_order_relaxed);
  socket.write_now(k408);
  socket.shutdown_write();
  if (now >= next_408_log_) {
    std::string line =
        "client " + parked.client.connection.peer() + ": 408 request head not received in time";
    if (unlogged_408_ > 0) line += " (and " + std::to_string(unlogged_408_) + " more not logged)";
    log_line(line);
    unlogged_408_ = 0;
    next_408_log_ = now + Millis{1000};
  } else {
    ++unlogged_408_;
  }
  return true;
}

// A response going out, not an idle connection: given up on only when the client took nothing
// for the write timeout, as a worker's write_all would be (a pipelined request behind it waits
// its turn, and is no slow head).
bool TunedServer::time_out_send(Parked& parked, Clock::time_point now) {
  return now - parked.since >= options_.write_timeout;
}

// No byte from its origin for the origin timeout: a worker answers 504 (or cuts a stalled
// body), as its own read would have.
bool TunedServer::time_out_origin(Parked& parked, Clock::time_point now) {
  if (now - parked.client.miss.last_byte < options_.origin_timeout) return false;
  stop_watching_origin(parked);
  dispatch(parked);
  return true;
}

// A head here a tick ago with its body not whole yet is still arriving — a slow body, or a
// stream such as server-sent events that may never reach 128 KiB: a worker relays it as it
// comes, where the poller would hold all of it back until its end. A head still arriving stays
// here (awaiting_origin), where the origin timeout runs from its last byte.
bool TunedServer::time_out_body(Parked& parked, Clock::time_point now) {
  if (now - parked.client.miss.head_whole < Millis{kTickMs}) return time_out_origin(parked, now);
  stop_watching_origin(parked);
  dispatch(parked);
  return true;
}

// Every loop: the shedder sees the queueing delay now. Once a tick: timeouts and sizing.
void TunedServer::housekeeping(std::chrono::steady_clock::time_point now) {
  const double wait = observe_queue(now);  // load_shedding.cpp
  if (now - last_tick_ < Millis{kTickMs}) return;
  last_tick_ = now;
  busy_sum_ += static_cast<double>(pool_.busy());
  ++busy_ticks_;
  sweep_timeouts(now);
  if (origin_pool_) origin_pool_->close_idle();
  if (config_.origin_limit) {
    time_out_orphans(now);
    gates_.tick(now);
    admit_waiting(now);  // a limit that grew lets waiters in; a standing queue sheds
  }
  // Requests waiting past the shedding target while the pool may still grow: do not wait for
  // the interval, a tick is enough evidence.
  resize_pool(now, wait >= std::chrono::duration<double>(config_.shed_delay).count() / 2);
  if (listening_paused_ && now >= resume_listening_) {
    listening_paused_ = false;
    epoll_control(epoll_fd_, EPOLL_CTL_MOD, server_.listener().fd(), EPOLLIN);
  }
}

}  // namespace proxy
