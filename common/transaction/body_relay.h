// Relaying one message body from a socket to a sink (RFC 9112 §6): decoded as it arrives,
// re-framed for the next hop, optionally captured for the cache. Used for response bodies
// (origin to client) and long request bodies (client to origin).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "http/body_reader.h"
#include "net/socket.h"

namespace proxy {

/// Where relay_body writes what it decodes.
struct BodySink {
  const Socket* socket = nullptr;  ///< null: decode only (discard)
  /// When set, written pieces are appended here instead of to `socket` (Context::out).
  std::string* out = nullptr;
  bool encode_chunked = false;     ///< re-frame each piece as a chunk (RFC 9112 §7.1)
  std::string* capture = nullptr;  ///< also keep the decoded body here, while it may be stored;
                                   ///< reset to null once the body outgrows capture_limit
  std::size_t capture_limit = 0;   ///< give up capturing past this many bytes
  /// While capturing, keep the body's last decoded piece in `held` instead of writing it, so the
  /// caller can store the body before the client has all of it (write_held sends it): a client
  /// on a persistent connection may ask again the moment it has the last byte.
  bool hold_last = false;
  std::string held;
  std::uint64_t limit = UINT64_MAX;  ///< a streamed request body may not grow past this
  std::uint64_t delivered = 0;       ///< decoded bytes seen so far, against `limit`
  /// Bytes the source sent past the body's end, dropped. Not 0 means the connection is out of
  /// step (RFC 9112 §6.3: they are no part of this message), so it must not carry another.
  std::size_t surplus = 0;
};

/// How relay_body ended.
enum class BodyOutcome {
  complete, source_failed, source_timeout, sink_failed, malformed, cancelled, too_large
};

/// Streams one body from `source` to `sink`, starting with `buffered` bytes already read. Holds at
/// most one buffer of it in memory, plus what the sink captures. Each read waits at most
/// `read_timeout`, each write `write_timeout`. Never throws for I/O errors.
BodyOutcome relay_body(const Socket& source, std::string_view buffered, BodyReader& reader,
                       BodySink& sink, Millis read_timeout, Millis write_timeout);

/// Writes what relay_body held back (sink.held), framed like the rest; true when it got out.
bool write_held(BodySink& sink, Millis write_timeout);

}  // namespace proxy
