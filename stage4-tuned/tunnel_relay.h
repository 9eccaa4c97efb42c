// TunnelRelay: CONNECT tunnels off the workers. Once serve_connect has answered 200, the
// tunnel is handed here (ProxyOptions::adopt_tunnel) and one thread relays every open tunnel's
// bytes with epoll on both ends, non-blocking, so a tunnel costs two descriptors and its
// in-flight bytes, never a worker. The relay is common/transaction/tunnel.cpp's, made event-driven:
// an EOF one way is passed on as a half-close and the other way goes on (RFC 9293 §3.6); a side
// that will not take bytes stops reading from the other (backpressure); a tunnel silent both ways
// for the idle timeout is closed; a reset or failed write resets both sides.
#pragma once

#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mailbox.h"
#include "transaction/proxy.h"

namespace proxy {

/// The name the relay's thread takes (top -H, ps -L; 15 bytes at most).
inline constexpr const char* kTunnelThreadName = "s4-tunnels";

/// Relays adopted tunnels on one thread until destroyed. Thread-safety: adopt() and open()
/// from any thread; construct and destroy on one.
class TunnelRelay {
 public:
  /// Starts the relay thread. `stats.tunnels_open` is given back as each tunnel ends.
  /// Throws std::system_error when epoll or an eventfd cannot be created.
  TunnelRelay(ProxyStats& stats, Millis idle_timeout);
  /// Stops the thread and resets every tunnel still open.
  ~TunnelRelay();
  TunnelRelay(const TunnelRelay&) = delete;
  TunnelRelay& operator=(const TunnelRelay&) = delete;

  /// Takes over an established tunnel; its relay starts at once. Never blocks.
  void adopt(EstablishedTunnel tunnel);
  /// Tunnels being relayed now.
  [[nodiscard]] std::size_t open() const noexcept { return open_.load(std::memory_order_relaxed); }

 private:
  struct Tunnel;
  void run(std::stop_token stop);
  void take_adopted();
  void pump(Tunnel& tunnel);
  void watch(Tunnel& tunnel);
  void end(Tunnel& tunnel, bool cut);

  ProxyStats& stats_;
  Millis idle_timeout_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<std::size_t> open_{0};

  Mailbox<EstablishedTunnel> adopted_;  // from the workers; each post is followed by a wake

  // Relay-thread state: tunnels by the fds of their two sides.
  std::vector<std::shared_ptr<Tunnel>> by_fd_;
  std::jthread thread_;  // last: stops and joins before the fields above go away
};

}  // namespace proxy
