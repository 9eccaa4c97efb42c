#include "http_client.h"

#include <array>
#include <stdexcept>

#include "http/body_reader.h"

namespace testing_support {

std::string HttpResponse::field(const std::string& name) const {
  auto value = proxy::find_field(fields, name);
  return value ? std::string(*value) : std::string();
}

namespace {

HttpResponse parse(std::string raw, bool closed) {
  HttpResponse response;
  response.raw = raw;
  proxy::ResponseHead head;
  auto parsed = proxy::parse_response_head(raw, head);
  if (parsed.status != proxy::ParseStatus::complete) {
    throw std::runtime_error("no complete response head in " + std::to_string(raw.size()) +
                             " bytes: " + raw.substr(0, 200));
  }
  response.status = head.status;
  response.fields = head.fields;
  auto framing = proxy::response_body_framing(head, "GET");
  if (!framing) throw std::runtime_error("response with invalid framing: " + raw.substr(0, 200));
  proxy::BodyReader reader(*framing);
  auto result = reader.feed(std::string_view(raw).substr(parsed.consumed), response.body);
  response.complete = !result.error && (reader.done() || (closed && reader.complete_at_eof()));
  return response;
}

// True when `raw` holds one whole response whose end its framing shows (Content-Length or
// chunked); a close-delimited one ends only at close.
bool framed_end_reached(const std::string& raw) {
  proxy::ResponseHead head;
  auto parsed = proxy::parse_response_head(raw, head);
  if (parsed.status != proxy::ParseStatus::complete) return false;
  auto framing = proxy::response_body_framing(head, "GET");
  if (!framing || framing->kind == proxy::BodyKind::close_delimited) return false;
  // Cheap checks first: this runs after every read of a body that may be megabytes long.
  if (framing->kind == proxy::BodyKind::content_length) {
    return raw.size() >= parsed.consumed + framing->length;
  }
  if (framing->kind == proxy::BodyKind::chunked && !raw.ends_with("\r\n\r\n")) return false;
  proxy::BodyReader reader(*framing);
  std::string body;
  auto result = reader.feed(std::string_view(raw).substr(parsed.consumed), body);
  return !result.error && reader.done();
}

}  // namespace

std::string proxy_get(const std::string& url, const std::vector<std::string>& extra, int minor,
                      const std::string& method) {
  std::string host = url;
  if (auto scheme = host.find("://"); scheme != std::string::npos) host = host.substr(scheme + 3);
  host = host.substr(0, host.find('/'));
  std::string request = method + " " + url + " HTTP/1." + std::to_string(minor) + "\r\nHost: " +
                        host + "\r\n";
  for (const auto& line : extra) request += line + "\r\n";
  return request + "\r\n";
}

proxy::Socket send_request(std::uint16_t port, const std::string& request) {
  auto connected = proxy::connect_tcp("127.0.0.1", port, std::chrono::seconds(5));
  if (connected.error != proxy::ConnectError::none) {
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port) + ": " +
                             connected.message);
  }
  if (connected.socket.write_all(request, std::chrono::seconds(5)).status != proxy::IoStatus::ok) {
    throw std::runtime_error("cannot send request to port " + std::to_string(port));
  }
  return std::move(connected.socket);
}

std::optional<HttpResponse> read_response(const proxy::Socket& socket,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string raw;
  std::array<char, 65536> chunk;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto got = socket.read_some(chunk, left);
    if (got.status == proxy::IoStatus::ok) {
      raw.append(chunk.data(), got.bytes);
      // A persistent connection (stage 4) stays open after a response: stop at its framed end.
      if (framed_end_reached(raw)) return parse(std::move(raw), false);
    } else if (got.status == proxy::IoStatus::eof || got.status == proxy::IoStatus::error) {
      return parse(std::move(raw), true);
    } else {
      return std::nullopt;
    }
  }
}

HttpResponse exchange(std::uint16_t port, const std::string& request,
                      std::chrono::milliseconds timeout) {
  proxy::Socket socket = send_request(port, request);
  auto response = read_response(socket, timeout);
  if (!response) {
    throw std::runtime_error("no response within " + std::to_string(timeout.count()) + " ms");
  }
  return *response;
}

HttpResponse fetch(std::uint16_t proxy_port, const std::string& url,
                   std::chrono::milliseconds timeout) {
  return exchange(proxy_port, proxy_get(url), timeout);
}

}  // namespace testing_support
