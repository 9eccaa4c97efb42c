#include "tunnel_relay.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <system_error>

#include "server/log.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kChunk = 64 * 1024;  // one read; a side holds at most this many unsent

}  // namespace

struct TunnelRelay::Tunnel {
  struct Side {
    Socket socket;
    std::string unsent;      // read from the other side, not yet taken by this one
    bool reading = true;     // this side has not sent its EOF
    std::uint32_t armed = 0;  // the events epoll watches for it now; 0: not in the set
  };
  std::array<Side, 2> sides;  // 0: client, 1: origin
  std::string peer;
  std::string target;
  Clock::time_point last_byte = Clock::now();
  bool ended = false;
};

TunnelRelay::TunnelRelay(ProxyStats& stats, Millis idle_timeout)
    : stats_(stats), idle_timeout_(idle_timeout) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    const int error = errno;
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw std::system_error(error, std::generic_category(), "tunnel relay epoll/eventfd");
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  const int cancel = io_cancel_fd();
  if (cancel >= 0) {
    event.data.fd = cancel;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cancel, &event);
  }
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

TunnelRelay::~TunnelRelay() {
  thread_.request_stop();
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
  for (const std::shared_ptr<Tunnel>& slot : by_fd_) {
    std::shared_ptr<Tunnel> tunnel = slot;  // end() empties the slot
    if (tunnel && !tunnel->ended) end(*tunnel, true);
  }
  by_fd_.clear();
  for (EstablishedTunnel& t : adopted_.take()) {
    t.client.reset();
    t.origin.reset();
    stats_.tunnels_open.fetch_sub(1, std::memory_order_relaxed);
  }
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void TunnelRelay::adopt(EstablishedTunnel tunnel) {
  open_.fetch_add(1, std::memory_order_relaxed);
  adopted_.post(std::move(tunnel));
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void TunnelRelay::run(std::stop_token stop) {
  ::pthread_setname_np(::pthread_self(), kTunnelThreadName);  // for top -H, ps -L, perf
  std::array<epoll_event, 128> events;
  const int cancel = io_cancel_fd();
  while (!stop.stop_requested()) {
    const int tick = static_cast<int>(std::min<long>(idle_timeout_.count(), 250));
    const int ready = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), tick);
    if (ready < 0 && errno != EINTR) {
      log_line(std::string("tunnel relay: epoll_wait failed; tunnels cut"));
      return;
    }
    for (int i = 0; i < ready; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == wake_fd_) {
        take_adopted();
      } else if (fd == cancel) {
        // Shutdown's grace period ran out: cut every tunnel, as run_tunnel would.
        for (const std::shared_ptr<Tunnel>& slot : by_fd_) {
          std::shared_ptr<Tunnel> tunnel = slot;  // end() empties the slot
          if (tunnel && !tunnel->ended) end(*tunnel, true);
        }
      } else if (static_cast<std::size_t>(fd) < by_fd_.size() && by_fd_[static_cast<std::size_t>(fd)]) {
        std::shared_ptr<Tunnel> tunnel = by_fd_[static_cast<std::size_t>(fd)];  // end() drops it
        if (!tunnel->ended) pump(*tunnel);
      }
    }
    const auto now = Clock::now();
    for (std::shared_ptr<Tunnel>& slot : by_fd_) {
      if (slot && !slot->ended && now - slot->last_byte >= idle_timeout_) {
        std::shared_ptr<Tunnel> tunnel = slot;
        log_line("client " + tunnel->peer + " CONNECT " + tunnel->target + ": tunnel idle for " +
                 std::to_string(idle_timeout_.count()) + " ms; closed");
        end(*tunnel, false);
      }
    }
  }
}

void TunnelRelay::take_adopted() {
  std::uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
  for (EstablishedTunnel& established : adopted_.take()) {
    auto tunnel = std::make_shared<Tunnel>();
    tunnel->sides[0].socket = std::move(established.client);
    tunnel->sides[1].socket = std::move(established.origin);
    tunnel->peer = std::move(established.peer);
    tunnel->target = std::move(established.target);
    for (Tunnel::Side& side : tunnel->sides) {
      const auto fd = static_cast<std::size_t>(side.socket.fd());
      if (fd >= by_fd_.size()) by_fd_.resize(fd + 1);
      by_fd_[fd] = tunnel;
    }
    watch(*tunnel);
    // Bytes may have arrived before the relay watched: level-triggered epoll reports them.
  }
}

// Moves what can move without blocking, both ways; then watches for what would unblock it.
// EPOLLERR (a reset) needs no case of its own: bytes that arrived before the reset are still
// read and passed on, and the next recv or send on that side fails and cuts the tunnel.
void TunnelRelay::pump(Tunnel& tunnel) {
  std::array<char, kChunk> chunk;
  for (int from = 0; from < 2; ++from) {
    Tunnel::Side& source = tunnel.sides[static_cast<std::size_t>(from)];
    Tunnel::Side& sink = tunnel.sides[static_cast<std::size_t>(1 - from)];
    for (;;) {
      if (!sink.unsent.empty()) {
        const IoResult put = sink.socket.write_now(sink.unsent);
        if (put.status == IoStatus::error) {
          end(tunnel, true);
          return;
        }
        sink.unsent.erase(0, put.bytes);
        if (put.bytes > 0) tunnel.last_byte = Clock::now();
        if (!sink.unsent.empty()) break;  // backpressure: the sink is full
        continue;
      }
      if (!source.reading) break;
      const IoResult got = source.socket.read_now(chunk);
      if (got.status == IoStatus::timeout) break;  // nothing more has arrived
      if (got.status == IoStatus::error) {
        end(tunnel, true);
        return;
      }
      if (got.status == IoStatus::eof) {
        source.reading = false;
        sink.socket.shutdown_write();  // pass the EOF on; the other way may still carry bytes
        break;
      }
      tunnel.last_byte = Clock::now();
      sink.unsent.assign(chunk.data(), got.bytes);
    }
  }
  const bool done = !tunnel.sides[0].reading && !tunnel.sides[1].reading &&
                    tunnel.sides[0].unsent.empty() && tunnel.sides[1].unsent.empty();
  if (done) {
    end(tunnel, false);
    return;
  }
  watch(tunnel);
}

// Each side: readable while it may send and the other side has taken everything; writable
// while it owes bytes. A side with nothing to wait for leaves the set (a half-closed socket
// would report EPOLLHUP over and over).
void TunnelRelay::watch(Tunnel& tunnel) {
  for (int i = 0; i < 2; ++i) {
    Tunnel::Side& side = tunnel.sides[static_cast<std::size_t>(i)];
    const Tunnel::Side& other = tunnel.sides[static_cast<std::size_t>(1 - i)];
    std::uint32_t wanted = 0;
    if (side.reading && other.unsent.empty()) wanted |= EPOLLIN;
    if (!side.unsent.empty()) wanted |= EPOLLOUT;
    if (wanted == side.armed) continue;
    epoll_event event{};
    event.events = wanted;
    event.data.fd = side.socket.fd();
    const int op = wanted == 0 ? EPOLL_CTL_DEL : side.armed == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (::epoll_ctl(epoll_fd_, op, side.socket.fd(), &event) != 0) {
      end(tunnel, true);
      return;
    }
    side.armed = wanted;
  }
}

void TunnelRelay::end(Tunnel& tunnel, bool cut) {
  if (tunnel.ended) return;
  tunnel.ended = true;
  for (Tunnel::Side& side : tunnel.sides) {
    const int fd = side.socket.fd();
    if (fd < 0) continue;
    if (side.armed != 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    // A cut tunnel is reset: neither side may take a cut stream for a finished one.
    if (cut) {
      side.socket.reset();
    } else {
      side.socket.close();
    }
    if (static_cast<std::size_t>(fd) < by_fd_.size()) by_fd_[static_cast<std::size_t>(fd)].reset();
  }
  open_.fetch_sub(1, std::memory_order_relaxed);
  stats_.tunnels_open.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace proxy
