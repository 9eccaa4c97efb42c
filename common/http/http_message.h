// HTTP/1.x message heads, parsed from a buffer in the style of picohttpparser: no sockets
// inside, so every case is a one-line unit test. Parsers return complete / incomplete / invalid
// and the number of bytes the head took.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace proxy {

/// One header field as received: name case preserved, value with surrounding whitespace removed.
struct HeaderField {
  std::string name;
  std::string value;
};

using HeaderFields = std::vector<HeaderField>;

/// A parsed request head (RFC 9112 §3). `target` is the request-target exactly as sent.
struct Request {
  std::string method;
  std::string target;
  int version_minor = 1;  ///< HTTP/1.<version_minor>; only 1.0 and 1.1 parse.
  HeaderFields fields;
};

/// A parsed response head (RFC 9112 §4).
struct ResponseHead {
  int version_minor = 1;
  int status = 0;
  std::string reason;
  HeaderFields fields;
};

enum class ParseStatus { complete, incomplete, invalid };

/// Size limits on a request head, in bytes. Exceeding them yields 414 or 431.
struct RequestLimits {
  std::size_t max_request_line = 8 * 1024;     ///< request line, CRLF excluded (414)
  std::size_t max_header_bytes = 32 * 1024;    ///< the whole head, request line included (431)
  std::size_t max_header_fields = 100;         ///< number of fields (431)
};

/// Result of parse_request. When invalid, `error_status` is the HTTP status to answer with
/// (400, 414, 431, 505) and `error_reason` a short human explanation.
struct RequestParseResult {
  ParseStatus status = ParseStatus::incomplete;
  std::size_t consumed = 0;  ///< bytes of the head, final CRLF included (when complete)
  int error_status = 0;
  std::string error_reason;
};

/// Bytes of empty lines (CRLF pairs) at the start of `buffer`, before a request line. RFC 9112
/// §2.2: a server SHOULD ignore at least one such line, which some clients send after a request
/// body; the caller drops them before parse_request. A lone CR at the end is not counted: it may
/// be the first half of the next pair. Thread-safe.
std::size_t leading_empty_lines(std::string_view buffer) noexcept;

/// Parses a request head from the start of `buffer` into `out`. Reads only inside `buffer`.
/// Strict on the framing that smuggling attacks exploit: lines end in CRLF (a bare CR or LF is
/// invalid), obsolete line folding is invalid (RFC 9112 §5.2), field names are tokens, values
/// carry no control characters but HTAB. Thread-safe (no shared state).
RequestParseResult parse_request(std::string_view buffer, Request& out,
                                 const RequestLimits& limits = {});

/// Result of parse_response_head.
struct ResponseParseResult {
  ParseStatus status = ParseStatus::incomplete;
  std::size_t consumed = 0;
  std::string error_reason;
};

/// Parses a response head (status line and fields) from the start of `buffer`. Origins are
/// held to the same rules as clients, except that a reason phrase may be empty. A head longer
/// than `max_head_bytes` is invalid. Thread-safe.
ResponseParseResult parse_response_head(std::string_view buffer, ResponseHead& out,
                                        std::size_t max_head_bytes = 64 * 1024);

/// The reason phrase of a status code (RFC 9110 §15), e.g. "Not Found" for 404; "Status" for a
/// code this table does not know. Shared by the proxy's own replies and the harness origin.
std::string_view reason_phrase(int status) noexcept;

/// ASCII case-insensitive equality, as field names and schemes compare (RFC 9110 §5.1).
bool iequals(std::string_view a, std::string_view b) noexcept;

/// The value of the first field named `name` (case-insensitive), or nullopt.
std::optional<std::string_view> find_field(const HeaderFields& fields, std::string_view name);

/// True when a comma-separated field (e.g. Connection, Transfer-Encoding) named `name` lists
/// `token`, case-insensitively, in any of its occurrences.
bool field_has_token(const HeaderFields& fields, std::string_view name, std::string_view token);

/// The number of field lines named `name` (case-insensitive), whatever their values. A server
/// answers 400 to a request with more than one Host line, even identical ones (RFC 9112 §3.2).
std::size_t count_fields(const HeaderFields& fields, std::string_view name) noexcept;

/// Splits a comma-separated list value into trimmed, non-empty elements (RFC 9110 §5.6.1).
std::vector<std::string_view> split_list(std::string_view value);

}  // namespace proxy
