// A deliberately small HTTP/1.x client for black-box tests: raw bytes in, raw bytes out, so a
// test sees exactly what the proxy put on the wire.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "http/http_message.h"
#include "net/socket.h"

namespace testing_support {

/// A response as a client saw it: the head parsed, the body de-chunked when it was chunked,
/// and whether the connection ended where the framing said it would.
struct HttpResponse {
  int status = 0;
  proxy::HeaderFields fields;
  std::string body;
  bool complete = false;  ///< the body's framing was satisfied (length reached, last chunk, FIN)
  std::string raw;        ///< every byte received
  [[nodiscard]] std::string field(const std::string& name) const;
};

/// Sends `request` bytes to 127.0.0.1:`port`, reads until the server closes (or `timeout`
/// passes), and parses what came back. Throws std::runtime_error when it cannot connect or
/// nothing parsable arrives in time.
HttpResponse exchange(std::uint16_t port, const std::string& request,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// A proxy request: "GET <url> HTTP/1.<minor>" with Host and any extra header lines.
std::string proxy_get(const std::string& url, const std::vector<std::string>& extra = {},
                      int minor = 1, const std::string& method = "GET");

/// exchange(port, proxy_get(url)).
HttpResponse fetch(std::uint16_t proxy_port, const std::string& url,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20));

/// Opens a connection and sends `request` without waiting for the answer; read it later with
/// read_response(). For tests that keep a request in flight.
proxy::Socket send_request(std::uint16_t port, const std::string& request);

/// Reads from an open connection until close, or until one response is complete by its
/// framing (Content-Length, last chunk) so that a persistent connection need not close, or
/// `timeout`; nullopt on timeout.
std::optional<HttpResponse> read_response(const proxy::Socket& socket,
                                          std::chrono::milliseconds timeout);

}  // namespace testing_support
