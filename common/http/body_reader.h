// Message body framing (RFC 9112 §6): how many bytes belong to a body, and decoding the chunked
// transfer coding. Incremental and socket-free: feed whatever bytes arrived, get body bytes out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "http/http_message.h"

namespace proxy {

/// How a message's body ends.
enum class BodyKind {
  none,             ///< no body (HEAD responses, 1xx, 204, 304; requests without framing)
  content_length,   ///< exactly `length` bytes
  chunked,          ///< the chunked transfer coding, ended by a zero-size chunk
  close_delimited,  ///< everything until the sender closes (responses only)
};

struct BodyFraming {
  BodyKind kind = BodyKind::none;
  std::uint64_t length = 0;  ///< for content_length
};

/// The framing of a response to a request with `request_method`, per RFC 9112 §6.3.
/// Returns nullopt when the framing is invalid: several differing Content-Length values, a
/// Content-Length that is not a number, or a Transfer-Encoding other than a lone `chunked` (this
/// proxy decodes chunked and no other coding, RFC 9112 §6.1). Transfer-Encoding wins over
/// Content-Length.
std::optional<BodyFraming> response_body_framing(const ResponseHead& head,
                                                 std::string_view request_method);

/// The framing of a request body, per RFC 9112 §6.3. Returns nullopt — answer 400 — for what
/// request smuggling relies on: Transfer-Encoding together with Content-Length, differing or
/// malformed Content-Length values, or a Transfer-Encoding whose last coding is not chunked.
std::optional<BodyFraming> request_body_framing(const Request& request);

/// Decodes the chunked transfer coding (RFC 9112 §7.1) incrementally. Chunk extensions are
/// ignored and trailer fields dropped. Not thread-safe; one decoder per body.
class ChunkedDecoder {
 public:
  /// Outcome of one decode() call.
  struct Result {
    std::size_t consumed = 0;  ///< bytes of `input` used; the rest belongs to the next message
    bool done = false;         ///< the last chunk and trailer section were read
    bool error = false;        ///< malformed coding (bad size, missing CRLF, size overflow)
  };

  /// Decodes as much of `input` as possible, appending body bytes to `out`. Call again with
  /// more input while neither done nor error.
  Result decode(std::string_view input, std::string& out);

 private:
  /// One byte of the coding outside chunk data (a size line, a CRLF, a trailer line), in the
  /// current state: moves to the next state and returns true, or returns false when the byte
  /// is malformed there. decode() consumes the byte on true.
  bool framing_byte(char c);

  enum class State { size, extension, size_lf, data, data_cr, data_lf, trailer, trailer_lf, done };
  State state_ = State::size;
  std::uint64_t remaining_ = 0;
  bool size_digits_ = false;
  bool trailer_line_empty_ = true;
  std::size_t line_bytes_ = 0;
};

/// Reads one body of a known framing from successive buffers. Not thread-safe.
class BodyReader {
 public:
  /// Outcome of one feed() call; see ChunkedDecoder::Result.
  struct Result {
    std::size_t consumed = 0;
    bool done = false;
    bool error = false;
  };

  explicit BodyReader(BodyFraming framing);

  /// Consumes body bytes from `input`, appending the decoded body to `out`.
  Result feed(std::string_view input, std::string& out);
  /// Called when the sender closed the connection: true when that completes the body
  /// (close-delimited, or already done), false when the body was cut short.
  [[nodiscard]] bool complete_at_eof() const noexcept;
  [[nodiscard]] bool done() const noexcept { return done_; }
  [[nodiscard]] const BodyFraming& framing() const noexcept { return framing_; }

 private:
  BodyFraming framing_;
  std::uint64_t remaining_;
  ChunkedDecoder chunked_;
  bool done_ = false;
};

}  // namespace proxy
