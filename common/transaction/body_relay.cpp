#include "transaction/body_relay.h"

#include <array>
#include <cstdio>
#include <optional>

namespace proxy {
namespace {

constexpr std::size_t kBufferBytes = 64 * 1024;

// Writes `decoded` to the sink's socket, as a chunk when the sink re-frames.
bool write_piece(const BodySink& sink, std::string& decoded, Millis write_timeout) {
  if (decoded.empty() || (sink.socket == nullptr && sink.out == nullptr)) return true;
  if (sink.encode_chunked) {
    char size_line[32];
    int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", decoded.size());
    decoded.insert(0, size_line, static_cast<std::size_t>(n));
    decoded.append("\r\n");
  }
  if (sink.out != nullptr) {
    sink.out->append(decoded);
    return true;
  }
  return sink.socket->write_all(decoded, write_timeout).status == IoStatus::ok;
}

// Captures `decoded` while the body may still be stored, then writes it (or holds the last piece).
bool deliver(BodySink& sink, std::string& decoded, bool last, Millis write_timeout) {
  if (sink.capture != nullptr && !decoded.empty()) {
    if (sink.capture->size() + decoded.size() > sink.capture_limit) {
      sink.capture->clear();
      sink.capture->shrink_to_fit();
      sink.capture = nullptr;  // too big to store: stop holding it
    } else {
      sink.capture->append(decoded);
    }
  }
  if (last && sink.hold_last && sink.capture != nullptr) {
    sink.held = std::move(decoded);
    decoded.clear();
    return true;
  }
  const bool ok = write_piece(sink, decoded, write_timeout);
  decoded.clear();
  return ok;
}

}  // namespace

BodyOutcome relay_body(const Socket& source, std::string_view buffered, BodyReader& reader,
                       BodySink& sink, Millis read_timeout, Millis write_timeout) {
  std::string decoded;
  auto consume = [&](std::string_view input) -> std::optional<BodyOutcome> {
    BodyReader::Result r = reader.feed(input, decoded);
    if (r.error) return BodyOutcome::malformed;
    sink.delivered += decoded.size();
    if (sink.delivered > sink.limit) return BodyOutcome::too_large;
    if (!deliver(sink, decoded, r.done, write_timeout)) return BodyOutcome::sink_failed;
    if (r.done) {
      sink.surplus = input.size() - r.consumed;
      return BodyOutcome::complete;
    }
    return std::nullopt;
  };

  if (reader.done()) return BodyOutcome::complete;
  if (!buffered.empty()) {
    if (auto outcome = consume(buffered)) return *outcome;
  }
  std::array<char, kBufferBytes> chunk;
  for (;;) {
    IoResult got = source.read_some(chunk, read_timeout);
    switch (got.status) {
      case IoStatus::ok:
        if (auto outcome = consume(std::string_view(chunk.data(), got.bytes))) return *outcome;
        break;
      case IoStatus::eof:
        return reader.complete_at_eof() ? BodyOutcome::complete : BodyOutcome::source_failed;
      case IoStatus::timeout:
        return BodyOutcome::source_timeout;
      case IoStatus::cancelled:
        return BodyOutcome::cancelled;
      case IoStatus::error:
        return BodyOutcome::source_failed;
    }
  }
}

bool write_held(BodySink& sink, Millis write_timeout) {
  const bool ok = write_piece(sink, sink.held, write_timeout);
  sink.held.clear();
  return ok;
}

}  // namespace proxy
