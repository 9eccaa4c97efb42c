// The properties the fuzz targets check, one function per parser, shared by the libFuzzer
// targets (fuzz_*.cpp, built with clang by `make fuzz`) and by the regression test in
// `make test` (tests/unit/fuzz_corpus_test.cpp), which replays every input kept in
// fuzz/corpus/ — seeds and every crash the fuzzer ever found — through the same checks.
// A violated property throws FuzzFailure: under libFuzzer the uncaught exception aborts and
// the input is saved; under GoogleTest it fails the test naming the file.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "http/body_reader.h"
#include "http/http_message.h"
#include "http/rewrite.h"
#include "http/uri.h"

namespace proxy_fuzz {

/// A parser broke one of its promises on some input. Thrown by the check_* functions.
struct FuzzFailure : std::logic_error {
  using std::logic_error::logic_error;
};

#define FUZZ_CHECK(condition) \
  do {                        \
    if (!(condition)) throw ::proxy_fuzz::FuzzFailure("fuzz check failed: " #condition); \
  } while (false)

inline bool has_control_or_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

/// parse_request, request_body_framing and build_origin_request. A complete head consumed no
/// more than it was given; an invalid one names 400, 414, 431 or 505; the head rebuilt for the
/// origin parses back whole, so no CR or LF from client input ever splits a forwarded field
/// (docs/hardening.md). The first byte's low bit picks tiny limits, so 414 and 431 are reached too.
inline void check_request_input(std::string_view input) {
  proxy::RequestLimits limits;
  if (!input.empty() && (static_cast<unsigned char>(input[0]) & 1)) limits = {64, 256, 4};
  proxy::Request request;
  proxy::RequestParseResult parsed = proxy::parse_request(input, request, limits);
  if (parsed.status == proxy::ParseStatus::invalid) {
    const int s = parsed.error_status;
    FUZZ_CHECK(s == 400 || s == 414 || s == 431 || s == 505);
    return;
  }
  if (parsed.status == proxy::ParseStatus::incomplete) return;
  FUZZ_CHECK(parsed.consumed <= input.size());
  FUZZ_CHECK(parsed.consumed <= limits.max_header_bytes);
  FUZZ_CHECK(request.fields.size() <= limits.max_header_fields);

  (void)proxy::request_body_framing(request);
  auto uri = proxy::parse_absolute_uri(request.target);
  if (!uri) return;
  const std::string origin_head = proxy::build_origin_request(request, *uri, "Content-Length: 0");
  proxy::Request reparsed;
  proxy::RequestParseResult again =
      proxy::parse_request(origin_head, reparsed, {1u << 20, 1u << 20, 1u << 20});
  FUZZ_CHECK(again.status == proxy::ParseStatus::complete);
  FUZZ_CHECK(again.consumed == origin_head.size());
  // Host, the framing field and Connection are ours; every other field came from the client.
  FUZZ_CHECK(reparsed.fields.size() <= request.fields.size() + 3);
}

/// parse_absolute_uri. A parsed URI is normalized for good: its cache key parses again to the
/// same key (two spellings of one URI never make two entries), and neither the Host value nor
/// the origin-form target it yields holds whitespace or control characters.
inline void check_uri_input(std::string_view input) {
  auto uri = proxy::parse_absolute_uri(input);
  if (!uri) return;
  FUZZ_CHECK(!uri->host.empty() && uri->port != 0);
  FUZZ_CHECK(!uri->path_and_query.empty() && uri->path_and_query.front() == '/');
  FUZZ_CHECK(!has_control_or_space(uri->authority()));
  FUZZ_CHECK(!has_control_or_space(uri->path_and_query));
  const std::string key = uri->cache_key();
  auto again = proxy::parse_absolute_uri(key);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->cache_key() == key);
}

namespace detail {

struct ChunkedOutcome {
  std::string body;
  std::size_t consumed = 0;
  bool done = false;
  bool error = false;
};

// Feeds `input` to one decoder in pieces of 1..17 bytes chosen by `piece_sizes` (whole when
// empty), as a socket might split it.
inline ChunkedOutcome decode_in_pieces(std::string_view input, std::string_view piece_sizes) {
  proxy::ChunkedDecoder decoder;
  ChunkedOutcome outcome;
  std::size_t next = 0;
  while (!input.empty()) {
    std::size_t take =
        piece_sizes.empty()
            ? input.size()
            : 1 + static_cast<unsigned char>(piece_sizes[next++ % piece_sizes.size()]) % 17;
    take = std::min(take, input.size());
    auto r = decoder.decode(input.substr(0, take), outcome.body);
    FUZZ_CHECK(r.consumed <= take);
    outcome.consumed += r.consumed;
    if (r.error || r.done) {
      outcome.error = r.error;
      outcome.done = r.done;
      return outcome;
    }
    FUZZ_CHECK(r.consumed == take);  // neither done nor failed: it must take everything
    input.remove_prefix(take);
  }
  return outcome;
}

}  // namespace detail

/// ChunkedDecoder and BodyReader. The first byte (mod 8) says how many of the next bytes are
/// piece sizes; the rest is decoded whole and in those pieces, which must reach the same
/// verdict, body and consumed count: a socket may split a body anywhere.
inline void check_chunked_input(std::string_view input) {
  if (input.empty()) return;
  const std::size_t header = std::min<std::size_t>(
      static_cast<unsigned char>(input[0]) % 8, input.size() - 1);
  std::string_view piece_sizes = input.substr(1, header);
  const std::string_view body = input.substr(1 + header);
  if (piece_sizes.empty()) piece_sizes = std::string_view("\0", 1);  // one byte at a time

  auto whole = detail::decode_in_pieces(body, {});
  auto pieces = detail::decode_in_pieces(body, piece_sizes);
  FUZZ_CHECK(whole.error == pieces.error && whole.done == pieces.done);
  if (whole.done) {
    FUZZ_CHECK(whole.body == pieces.body);
    FUZZ_CHECK(whole.consumed == pieces.consumed);
  }
  FUZZ_CHECK(whole.body.size() <= body.size());

  proxy::BodyReader reader({proxy::BodyKind::chunked, 0});
  std::string out;
  auto r = reader.feed(body, out);
  FUZZ_CHECK(r.error == whole.error && r.done == whole.done);
  if (r.done) FUZZ_CHECK(out == whole.body);
}

/// parse_response_head and response_body_framing. An origin is as untrusted as a client: the
/// parser stays inside its buffer and its limit, the status has three digits, and no name,
/// value or reason it accepts holds CR, LF or NUL (the proxy rebuilds its head from them).
/// The first byte's low bit picks a tiny head limit.
inline void check_response_head_input(std::string_view input) {
  const std::size_t limit =
      !input.empty() && (static_cast<unsigned char>(input[0]) & 1) ? 128 : 64 * 1024;
  proxy::ResponseHead head;
  proxy::ResponseParseResult parsed = proxy::parse_response_head(input, head, limit);
  if (parsed.status != proxy::ParseStatus::complete) return;
  FUZZ_CHECK(parsed.consumed <= input.size() && parsed.consumed <= limit);
  FUZZ_CHECK(head.status >= 0 && head.status <= 999);
  auto clean = [](std::string_view s) {
    return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
  };
  FUZZ_CHECK(clean(head.reason));
  for (const auto& field : head.fields) {
    FUZZ_CHECK(!field.name.empty() && clean(field.name) && clean(field.value));
  }
  auto head_framing = proxy::response_body_framing(head, "HEAD");
  FUZZ_CHECK(head_framing && head_framing->kind == proxy::BodyKind::none);
  (void)proxy::response_body_framing(head, "GET");
}

}  // namespace proxy_fuzz
