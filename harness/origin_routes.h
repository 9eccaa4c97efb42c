// The scripted origin's routes: what each path asks of it (a Plan), decided before any waiting
// starts. No sockets here: origin_server.cpp's connection loop carries a Plan out. The routes
// are a table (origin_routes.cpp, kRoutes), in the order the README lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/http_message.h"

namespace harness {

/// How a response's body is delimited on the wire.
enum class Framing { content_length, chunked, close_delimited, none };
/// What happens to the connection once the response is written.
enum class Ending { keep_alive, close, reset };

/// A response to write: a literal body, or `generated` deterministic bytes made as the socket
/// drains (never both).
struct Reply {
  int status = 200;
  std::string content_type = "text/plain";
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  std::uint64_t generated = 0;
  Framing framing = Framing::content_length;
  // Content-Length to promise when it differs from what is sent (/truncate, /reset).
  std::optional<std::uint64_t> promised_length;
  Ending ending = Ending::keep_alive;
  // Raw interim responses (1xx) written before the final head (/interim/CODE).
  std::string interim;
};

/// What a request asks the origin to do, decided before any waiting starts.
struct Plan {
  std::uint64_t delay_ms = 0;
  bool stall = false;
  bool drop_next = false;  // /drop-next: the connection's next request is dropped unanswered
  bool stats = false;  // /__stats: body filled in when the reply is made, never delayed
  Reply reply;
};

/// The parts of a request the routes look at.
struct RequestView {
  const proxy::Request& head;
  std::string_view raw_fields;  // the header lines exactly as received
  const std::string& body;
};

/// A reply with status `status` and a literal text/plain body.
Reply text_reply(int status, std::string body);

/// The plan for a path (no query) of the origin's own routes, then of the static site under
/// `site_dir` (/site/..., when not empty); nullopt when no route matches (404).
std::optional<Plan> plan_for(std::string_view path, const RequestView& request,
                             const std::string& site_dir);

/// The value of ?delay_ms=MS in `query`, 0 when absent; nullopt when malformed.
std::optional<std::uint64_t> query_delay(std::string_view query);

}  // namespace harness
