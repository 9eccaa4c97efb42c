// The scripted origin, driven over real sockets: each test starts its own OriginServer on
// port 0 and talks raw HTTP to it, so framing mistakes show up byte for byte.
#include "origin_server.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "http/body_reader.h"
#include "http/http_message.h"
#include "net/socket.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = 10s;  // generous: a hang fails the test instead of blocking it

proxy::Socket connect_to(const harness::OriginServer& origin) {
  auto connected = proxy::connect_tcp("127.0.0.1", origin.port(), kTimeout);
  EXPECT_EQ(connected.error, proxy::ConnectError::none) << connected.message;
  return std::move(connected.socket);
}

void send_all(const proxy::Socket& socket, std::string_view bytes) {
  ASSERT_EQ(socket.write_all(bytes, kTimeout).status, proxy::IoStatus::ok);
}

std::string get(std::string_view target, std::string_view extra_fields = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: origin\r\n" +
         std::string(extra_fields) + "\r\n";
}

// One response as a client reads it. Bytes after it stay in the caller's `pending` buffer.
struct Reply {
  proxy::ResponseHead head;
  std::string body;
  bool complete = false;                            // the framing was satisfied
  proxy::IoStatus last_read = proxy::IoStatus::ok;  // how the final read ended
  std::string raw;                                  // the bytes of this response as received
};

Reply read_reply(const proxy::Socket& socket, std::string& pending,
                 std::string_view method = "GET") {
  Reply reply;
  std::string buffer(std::size_t{64} * 1024, '\0');
  auto fill = [&] {
    auto got = socket.read_some(buffer, kTimeout);
    reply.last_read = got.status;
    if (got.status != proxy::IoStatus::ok) return false;
    pending.append(buffer.data(), got.bytes);
    return true;
  };
  for (;;) {
    auto parsed = proxy::parse_response_head(pending, reply.head);
    if (parsed.status == proxy::ParseStatus::complete) {
      reply.raw = pending.substr(0, parsed.consumed);
      pending.erase(0, parsed.consumed);
      break;
    }
    if (parsed.status == proxy::ParseStatus::invalid) {
      ADD_FAILURE() << "bad response head: " << parsed.error_reason;
      return reply;
    }
    if (!fill()) return reply;
  }
  auto framing = proxy::response_body_framing(reply.head, method);
  if (!framing) {
    ADD_FAILURE() << "bad response framing";
    return reply;
  }
  proxy::BodyReader reader(*framing);
  for (;;) {
    auto fed = reader.feed(pending, reply.body);
    reply.raw.append(pending, 0, fed.consumed);
    pending.erase(0, fed.consumed);
    if (fed.done) {
      reply.complete = true;
      return reply;
    }
    if (fed.error) return reply;
    if (!fill()) {
      reply.complete = reader.complete_at_eof() && reply.last_read == proxy::IoStatus::eof;
      return reply;
    }
  }
}

Reply fetch(const harness::OriginServer& origin, std::string_view target) {
  proxy::Socket socket = connect_to(origin);
  send_all(socket, get(target));
  std::string pending;
  return read_reply(socket, pending);
}

std::string field(const Reply& reply, std::string_view name) {
  return std::string(proxy::find_field(reply.head.fields, name).value_or(""));
}

TEST(OriginServer, DeterministicBytesCoverEveryByteValue) {
  std::string bytes = harness::deterministic_bytes(256);
  EXPECT_EQ(bytes.substr(0, 3), std::string("\x07\x26\x45", 3));
  std::set<unsigned char> values(bytes.begin(), bytes.end());
  EXPECT_EQ(values.size(), 256u);
}

TEST(OriginServer, BytesBodyIsExactAndLengthFramed) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "/bytes/300000");
  EXPECT_EQ(reply.head.status, 200);
  EXPECT_EQ(field(reply, "Content-Length"), "300000");
  EXPECT_EQ(field(reply, "Content-Type"), "application/octet-stream");
  EXPECT_EQ(field(reply, "Server"), "harness-origin");
  EXPECT_TRUE(reply.complete);
  EXPECT_EQ(reply.body, harness::deterministic_bytes(300000));
}

TEST(OriginServer, HeadGetsTheSameLengthAndNoBody) {
  harness::OriginServer origin;
  proxy::Socket socket = connect_to(origin);
  send_all(socket, "HEAD /bytes/1234 HTTP/1.1\r\nHost: origin\r\n\r\n" + get("/bytes/3"));
  std::string pending;
  Reply head = read_reply(socket, pending, "HEAD");
  EXPECT_EQ(field(head, "Content-Length"), "1234");
  EXPECT_TRUE(head.body.empty());
  // Had a body followed the HEAD answer, it would show up here instead of the next response.
  Reply next = read_reply(socket, pending);
  EXPECT_EQ(next.body, harness::deterministic_bytes(3));
}

TEST(OriginServer, StreamBytesIsChunkedWithAnExtensionAndATrailer) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "/stream-bytes/10000");
  EXPECT_EQ(field(reply, "Transfer-Encoding"), "chunked");
  EXPECT_TRUE(field(reply, "Content-Length").empty());
  EXPECT_TRUE(reply.complete);
  EXPECT_EQ(reply.body, harness::deterministic_bytes(10000));
  EXPECT_NE(reply.raw.find(";origin-ext="), std::string::npos);
  EXPECT_NE(reply.raw.find("\r\n0\r\nX-Origin-Trailer: done\r\n\r\n"), std::string::npos);
}

TEST(OriginServer, CloseDelimitedBodyEndsWithTheConnection) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "/close/5000");
  EXPECT_TRUE(field(reply, "Content-Length").empty());
  EXPECT_EQ(field(reply, "Connection"), "close");
  EXPECT_TRUE(reply.complete);
  EXPECT_EQ(reply.body, harness::deterministic_bytes(5000));
}

TEST(OriginServer, TruncateClosesAfterHalfThePromisedBody) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "/truncate/1000");
  EXPECT_EQ(field(reply, "Content-Length"), "1000");
  EXPECT_FALSE(reply.complete);
  EXPECT_EQ(reply.last_read, proxy::IoStatus::eof);
  EXPECT_EQ(reply.body, harness::deterministic_bytes(500));
}

TEST(OriginServer, ResetEndsTheBodyEarly) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "/reset/100000");
  EXPECT_EQ(field(reply, "Content-Length"), "100000");
  EXPECT_FALSE(reply.complete);
  EXPECT_LE(reply.body.size(), 50000u);
  EXPECT_TRUE(reply.last_read == proxy::IoStatus::error || reply.last_read == proxy::IoStatus::eof);
}

TEST(OriginServer, StallNeverAnswersButOthersAreServed) {
  harness::OriginServer origin;
  proxy::Socket stalled = connect_to(origin);
  send_all(stalled, get("/stall"));
  // The stalled request must not hold up anyone else on the same loop thread.
  EXPECT_EQ(fetch(origin, "/bytes/10").body, harness::deterministic_bytes(10));
  char byte = 0;
  EXPECT_EQ(stalled.read_some({&byte, 1}, 300ms).status, proxy::IoStatus::timeout);
  stalled.close();
  EXPECT_EQ(origin.request_count("/stall"), 1u);
}

TEST(OriginServer, PipelinedRequestsAreAnsweredInOrderAndCounted) {
  harness::OriginServer origin;
  proxy::Socket socket = connect_to(origin);
  send_all(socket, get("/bytes/7") + get("/delay/20/bytes/9") + get("/bytes/7?x=1") +
                       get("/status/418", "Connection: close\r\n"));
  std::string pending;
  EXPECT_EQ(read_reply(socket, pending).body, harness::deterministic_bytes(7));
  EXPECT_EQ(read_reply(socket, pending).body, harness::deterministic_bytes(9));
  EXPECT_EQ(read_reply(socket, pending).body, harness::deterministic_bytes(7));
  Reply last = read_reply(socket, pending);
  EXPECT_EQ(last.head.status, 418);
  EXPECT_EQ(field(last, "Connection"), "close");

  EXPECT_EQ(origin.request_count("/bytes/7"), 2u);
  EXPECT_EQ(origin.request_count("/delay/"), 1u);
  EXPECT_EQ(origin.request_count(""), 4u);
  Reply stats = fetch(origin, "/__stats");
  EXPECT_EQ(field(stats, "Content-Type"), "application/json");
  auto counts = nlohmann::json::parse(stats.body);
  EXPECT_EQ(counts["/bytes/7"], 2);
  EXPECT_EQ(counts["/delay/20/bytes/9"], 1);
  EXPECT_EQ(counts["/status/418"], 1);
  EXPECT_FALSE(counts.contains("/__stats"));
}

TEST(OriginServer, HeadersAndAnythingEchoTheRequest) {
  harness::OriginServer origin;
  proxy::Socket socket = connect_to(origin);
  send_all(socket, get("/headers", "X-Test:  spaced\r\n") +
                       "POST /anything/x?y=1 HTTP/1.1\r\nHost: origin\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  std::string pending;
  EXPECT_EQ(read_reply(socket, pending).body, "Host: origin\r\nX-Test:  spaced\r\n");
  Reply echo = read_reply(socket, pending);
  auto json = nlohmann::json::parse(echo.body);
  EXPECT_EQ(json["method"], "POST");
  EXPECT_EQ(json["target"], "/anything/x?y=1");
  EXPECT_EQ(json["body"], "abcde");
  EXPECT_EQ(json["headers"][0][0], "Host");
}

TEST(OriginServer, AbsoluteFormTargetsAreServedByPath) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "http://example.test:8080/bytes/5?q");
  EXPECT_EQ(reply.body, harness::deterministic_bytes(5));
  EXPECT_EQ(origin.request_count("/bytes/5"), 1u);
}

TEST(OriginServer, CachePathCarriesValidators) {
  harness::OriginServer origin;
  Reply reply = fetch(origin, "/cache/60");
  EXPECT_EQ(field(reply, "Cache-Control"), "max-age=60");
  EXPECT_FALSE(field(reply, "ETag").empty());
  EXPECT_FALSE(field(reply, "Last-Modified").empty());
  EXPECT_EQ(field(fetch(origin, "/no-store/4"), "Cache-Control"), "no-store");
  EXPECT_EQ(fetch(origin, "/no/such/path").head.status, 404);
}

TEST(OriginServer, MalformedRequestGets400AndClose) {
  harness::OriginServer origin;
  proxy::Socket socket = connect_to(origin);
  send_all(socket, "GET /bytes/1 HTTP/1.1\nHost: bare-lf\n\n");
  std::string pending;
  Reply reply = read_reply(socket, pending);
  EXPECT_EQ(reply.head.status, 400);
  char byte = 0;
  EXPECT_EQ(socket.read_some({&byte, 1}, kTimeout).status, proxy::IoStatus::eof);
}

TEST(OriginServer, CapacityOneSerializesDelayedRequests) {
  harness::OriginServer origin({.capacity = 1});
  const auto start = Clock::now();
  proxy::Socket first = connect_to(origin);
  proxy::Socket second = connect_to(origin);
  send_all(first, get("/delay/200"));
  send_all(second, get("/delay/200"));
  std::string pending_first;
  std::string pending_second;
  EXPECT_EQ(read_reply(first, pending_first).head.status, 200);
  EXPECT_EQ(read_reply(second, pending_second).head.status, 200);
  // One slot: the second delay can only start when the first response is out.
  EXPECT_GE(Clock::now() - start, 400ms);
}

TEST(OriginServer, DelayAppliesThroughTheQueryToo) {
  harness::OriginServer origin({.threads = 2});
  const auto start = Clock::now();
  Reply reply = fetch(origin, "/bytes/4?delay_ms=150");
  EXPECT_GE(Clock::now() - start, 150ms);
  EXPECT_EQ(reply.body, harness::deterministic_bytes(4));
}

TEST(OriginServer, StopClosesConnectionsAndRefusesNewOnes) {
  harness::OriginServer origin;
  proxy::Socket stalled = connect_to(origin);
  send_all(stalled, get("/stall"));
  const std::uint16_t port = origin.port();
  ASSERT_NE(port, 0);
  origin.stop();
  origin.stop();  // idempotent
  char byte = 0;
  auto got = stalled.read_some({&byte, 1}, kTimeout);
  EXPECT_TRUE(got.status == proxy::IoStatus::eof || got.status == proxy::IoStatus::error);
  EXPECT_EQ(proxy::connect_tcp("127.0.0.1", port, kTimeout).error, proxy::ConnectError::refused);
}

}  // namespace
