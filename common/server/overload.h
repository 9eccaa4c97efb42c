// The answer to a connection the proxy will not serve: 503 Service Unavailable. Stage 2 sends
// it when it cannot start a thread, stage 3 to connections still queued at shutdown, stage 4
// when it sheds load.
#pragma once

#include <string_view>

#include "net/socket.h"
#include "transaction/proxy.h"

namespace proxy {

/// Answers `client` with `503 Service Unavailable` (Retry-After: 1, Content-Length,
/// Connection: close, X-Cache: MISS, a one-line text body) and closes it, without reading its
/// request: the point is to spend as little as possible on a connection we cannot afford.
/// Request bytes that already arrived are drained before the close, so the client sees an
/// orderly end of stream rather than a reset that could discard the 503; nothing waits for
/// bytes still on their way. Counts one error in `stats` and logs one line naming the peer,
/// `reason` and `detail` (e.g. "cannot start a thread", e.what()) — at most one line per second
/// process-wide, carrying the count of refusals not logged since, so an overload cannot flood
/// stderr; the client's body stays generic.
/// Thread-safety: safe from any thread. Never throws, and the reply itself needs no allocation,
/// so it still works when the reason for refusing is running out of memory. Waits at most 1 s
/// for the client to take the bytes.
void reply_overloaded(Socket client, ProxyStats& stats, std::string_view reason,
                      std::string_view detail = {}) noexcept;

}  // namespace proxy
