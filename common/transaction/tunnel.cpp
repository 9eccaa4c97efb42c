#include "transaction/tunnel.h"

#include <poll.h>

#include <array>
#include <cerrno>
#include <chrono>

namespace proxy {

TunnelResult run_tunnel(const Socket& client, const Socket& origin, Millis idle_timeout,
                        Millis write_timeout) {
  TunnelResult result;
  struct Direction {
    const Socket& from;
    const Socket& to;
    std::uint64_t& count;
    bool open = true;  // `from` has not sent its EOF yet
  };
  std::array<Direction, 2> directions{Direction{client, origin, result.to_origin},
                                      Direction{origin, client, result.to_client}};
  std::array<char, 64 * 1024> buffer;
  const int cancel_fd = io_cancel_fd();
  auto deadline = std::chrono::steady_clock::now() + idle_timeout;
  while (directions[0].open || directions[1].open) {
    // Only the directions still open are watched: a side that sent EOF may keep reading what
    // the other sends, and poll would report its EOF again and again.
    std::array<pollfd, 3> fds{};
    std::array<Direction*, 3> owner{};
    nfds_t count = 0;
    for (Direction& d : directions) {
      if (!d.open) continue;
      fds[count] = pollfd{d.from.fd(), POLLIN, 0};
      owner[count++] = &d;
    }
    const nfds_t sockets = count;
    if (cancel_fd >= 0) fds[count++] = pollfd{cancel_fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.end = TunnelEnd::idle;
      return result;
    }
    const int ready = ::poll(fds.data(), count, static_cast<int>(left));
    if (ready < 0) {
      if (errno == EINTR) continue;
      result.end = TunnelEnd::error;
      return result;
    }
    if (cancel_fd >= 0 && (fds[sockets].revents & POLLIN)) {
      result.end = TunnelEnd::cancelled;
      return result;
    }
    for (nfds_t i = 0; i < sockets; ++i) {
      if (fds[i].revents == 0) continue;
      Direction& d = *owner[i];
      IoResult got = d.from.read_some(buffer, Millis{0});
      if (got.status == IoStatus::ok) {
        if (d.to.write_all(std::string_view(buffer.data(), got.bytes), write_timeout).status !=
            IoStatus::ok) {
          result.end = TunnelEnd::error;
          return result;
        }
        d.count += got.bytes;
        deadline = std::chrono::steady_clock::now() + idle_timeout;
      } else if (got.status == IoStatus::eof) {
        d.open = false;
        d.to.shutdown_write();  // pass the EOF on; the other direction may still carry bytes
      } else if (got.status == IoStatus::cancelled) {
        result.end = TunnelEnd::cancelled;
        return result;
      } else if (got.status != IoStatus::timeout) {
        result.end = TunnelEnd::error;
        return result;
      }
    }
  }
  result.end = TunnelEnd::closed;
  return result;
}

}  // namespace proxy
