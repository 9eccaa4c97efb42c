// The byte tunnel behind CONNECT (RFC 9110 §9.3.6): after the proxy's 200, whatever either side
// sends is relayed to the other unchanged — TLS, usually, which the proxy cannot read.
#pragma once

#include <cstdint>

#include "net/socket.h"

namespace proxy {

/// How a tunnel ended.
enum class TunnelEnd {
  closed,     ///< both sides sent their EOF (an orderly end, half-closes relayed)
  idle,       ///< no byte either way for the idle timeout
  cancelled,  ///< shutdown cut in-flight I/O (set_io_cancel_fd)
  error,      ///< a reset or a write that could not finish; both sockets should be reset
};

/// What run_tunnel did: how it ended and the bytes relayed each way.
struct TunnelResult {
  TunnelEnd end = TunnelEnd::closed;
  std::uint64_t to_origin = 0;  ///< bytes from the client relayed to the origin
  std::uint64_t to_client = 0;  ///< bytes from the origin relayed to the client
};

/// Relays bytes between `client` and `origin` in both directions until both have sent EOF:
/// an EOF from one side is passed on as shutdown(SHUT_WR) to the other, and the other direction
/// goes on until it ends too (half-close, RFC 9293 §3.6). Ends early after `idle_timeout` with
/// no byte in either direction, on a reset or failed write, or when shutdown cuts I/O. Blocks
/// the calling thread for the tunnel's whole life (one buffer of 64 KiB per direction at most in
/// flight; a slow reader holds back the writer: backpressure, each write bounded by
/// `write_timeout`). Never throws for I/O errors. Thread-safety: one tunnel per thread; the
/// sockets are borrowed, not closed.
TunnelResult run_tunnel(const Socket& client, const Socket& origin, Millis idle_timeout,
                        Millis write_timeout);

}  // namespace proxy
