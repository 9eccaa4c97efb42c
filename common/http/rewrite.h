// Turning a client's proxy request into the request the origin server receives.
#pragma once

#include <string>
#include <string_view>

#include "http/body_reader.h"
#include "http/http_message.h"
#include "http/uri.h"

namespace proxy {

/// True for the hop-by-hop fields a proxy must not forward (RFC 9110 §7.6.1): Connection,
/// Keep-Alive, Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, TE, Trailer,
/// Transfer-Encoding, Upgrade. Fields that Connection names are hop-by-hop too; see
/// is_hop_by_hop_in.
bool is_hop_by_hop(std::string_view name) noexcept;

/// True when `name` is hop-by-hop in the message whose fields are `fields`: a fixed one, or one
/// its Connection field lists.
bool is_hop_by_hop_in(std::string_view name, const HeaderFields& fields);

/// The request head sent to the origin (RFC 9112 §3.2.1, RFC 9110 §7.6): origin-form target,
/// HTTP/1.1, Host from the URI (replacing the client's), every end-to-end field forwarded
/// unchanged and in order, hop-by-hop fields removed, and `Connection: close` (one request per
/// origin connection). `body_framing_field`, when not empty, is appended as-is (for example
/// "Content-Length: 12"; serve_request passes this hop's Via too, as
/// "Via: 1.1 stage1-sequential\r\nContent-Length: 12"). Ends with the blank line.
std::string build_origin_request(const Request& request, const AbsoluteUri& uri,
                                 std::string_view body_framing_field = {});

/// For a kept origin connection (ProxyOptions::origin_pool): takes away the `Connection: close`
/// line that build_origin_request ends `origin_request`'s head with, so the connection stays open
/// after the response (persistence is HTTP/1.1's default, RFC 9112 §9.3). Returns false, and
/// changes nothing, when the head does not end with that line: the connection must then not be
/// kept.
bool keep_origin_connection_open(std::string& origin_request);

/// The body framing field, without its CRLF, for the request the origin receives (RFC 9112 §6):
/// "Transfer-Encoding: chunked" when the proxy streams `body` in chunks it makes itself,
/// "Content-Length: `length`" for a body it sends whole (a chunked one decoded), and for a request
/// without a body "Content-Length: 0" when the client sent one, else nothing. RFC 9110 §8.6: a
/// user agent sends Content-Length with a POST or PUT even when it is 0, and an origin may answer
/// 411 without it. `body` is request_body_framing's verdict on `request`.
std::string origin_framing_field(const Request& request, const BodyFraming& body,
                                 std::uint64_t length, bool stream_chunked);

}  // namespace proxy
