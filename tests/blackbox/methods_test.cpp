// Methods and responses (docs/using-the-proxy.md), against every stage: each test is named for its rule and cites
// the RFC section. HEAD, bodies on POST/PUT/PATCH/DELETE/OPTIONS, invalidation, CONNECT tunnels,
// interim responses, bodiless statuses, chunked to HTTP/1.0, Via.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hardening_support.h"
#include "net/socket.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class Methods : public StageTest {};

// Every byte until the peer closes (or `timeout`): for responses the test client would stop
// reading early (interim 1xx heads) or misjudge (HEAD's Content-Length).
// `closed`, when given, tells whether the peer closed (true) or the deadline passed (false).
std::string read_until_close(const proxy::Socket& socket, std::chrono::milliseconds timeout = 20s,
                             bool* closed = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string raw;
  std::array<char, 65536> chunk;
  if (closed != nullptr) *closed = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto got = socket.read_some(chunk, left);
    if (got.status != proxy::IoStatus::ok) {
      if (closed != nullptr) *closed = got.status != proxy::IoStatus::timeout;
      break;
    }
    raw.append(chunk.data(), got.bytes);
  }
  return raw;
}

// Reads until `needle` has arrived; false at the deadline.
bool read_until(const proxy::Socket& socket, const std::string& needle, std::string& raw,
                std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::array<char, 65536> chunk;
  while (raw.find(needle) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    auto got = socket.read_some(chunk, left);
    if (got.status != proxy::IoStatus::ok) return false;
    raw.append(chunk.data(), got.bytes);
  }
  return true;
}

std::string binary_body(std::size_t n) {
  std::string body;
  for (std::size_t i = 0; i < n; ++i) body.push_back(static_cast<char>((i * 131 + 17) & 0xFF));
  return body;
}

std::string chunked(const std::string& body, std::size_t piece = 7000) {
  std::string out;
  for (std::size_t at = 0; at < body.size(); at += piece) {
    const std::string part = body.substr(at, piece);
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", part.size());
    out += size_line + part + "\r\n";
  }
  return out + "0\r\n\r\n";
}

// A TCP service for CONNECT tests: echoes what it reads, and answers an EOF with its own once
// everything is echoed (a half-close, as TLS close_notify + FIN would be). Counts connections.
class EchoServer {
 public:
  EchoServer() : listener_(proxy::listen_tcp("127.0.0.1", 0)) {
    thread_ = std::jthread([this](std::stop_token) {
      while (auto client = proxy::accept_client(listener_, stop_.fd())) {
        {
          std::lock_guard lock(mutex_);
          ++connections_;
        }
        std::lock_guard lock(mutex_);
        echoes_.emplace_back([socket = std::move(*client)](std::stop_token token) {
          std::array<char, 16384> buf;
          while (!token.stop_requested()) {
            auto got = socket.read_some(buf, 100ms);
            if (got.status == proxy::IoStatus::timeout) continue;
            if (got.status != proxy::IoStatus::ok) break;
            if (socket.write_all(std::string_view(buf.data(), got.bytes), 5s).status !=
                proxy::IoStatus::ok) {
              break;
            }
          }
          socket.shutdown_write();
        });
      }
    });
  }
  ~EchoServer() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(stop_.fd(), &one, sizeof one);
    thread_ = {};
    std::lock_guard lock(mutex_);
    echoes_.clear();  // each stops and joins
  }
  [[nodiscard]] std::uint16_t port() const { return proxy::local_port(listener_); }
  [[nodiscard]] int connections() const {
    std::lock_guard lock(mutex_);
    return connections_;
  }

 private:
  proxy::Socket listener_;
  proxy::Socket stop_{::eventfd(0, EFD_CLOEXEC)};
  mutable std::mutex mutex_;  // guards connections_, echoes_
  int connections_ = 0;
  std::vector<std::jthread> echoes_;
  std::jthread thread_;
};

std::string connect_request(std::uint16_t port, const std::string& host = "127.0.0.1") {
  const std::string authority = host + ":" + std::to_string(port);
  return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
}

// Opens a tunnel; on success `socket` is connected through it and the 200's head consumed.
::testing::AssertionResult open_tunnel(std::uint16_t proxy_port, std::uint16_t target,
                                       proxy::Socket& socket, std::string& head) {
  socket = send_request(proxy_port, connect_request(target));
  if (!read_until(socket, "\r\n\r\n", head)) {
    return ::testing::AssertionFailure() << "no answer to CONNECT: " << head;
  }
  if (!head.starts_with("HTTP/1.1 200")) return ::testing::AssertionFailure() << head;
  return ::testing::AssertionSuccess();
}

// ---- HEAD (RFC 9110 §9.3.2) ----

TEST_P(Methods, HeadIsRelayedWithoutABodyWhateverItsContentLength_Rfc9110_9_3_2) {
  start_stage();
  proxy::Socket socket =
      send_request(proxy_port(), closing_request(origin_url("/bytes/1000"), {}, 1, "HEAD"));
  const std::string raw = read_until_close(socket);
  ASSERT_THAT(raw, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(raw, HasSubstr("Content-Length: 1000\r\n"));
  EXPECT_THAT(raw, HasSubstr("X-Cache: MISS\r\n"));
  EXPECT_TRUE(raw.ends_with("\r\n\r\n")) << "bytes after the head of a HEAD response:\n" << raw;
  EXPECT_EQ(origin_->request_count("/bytes/1000"), 1u);

  if (GetParam() == "stage4-tuned") {
    // On a persistent connection the next response must start right after the head.
    proxy::Socket kept = send_request(
        proxy_port(), proxy_get(origin_url("/bytes/1000"), {}, 1, "HEAD") +
                          proxy_get(origin_url("/bytes/20"), {"Connection: close"}));
    const std::string both = read_until_close(kept);
    const auto second = both.find("\r\n\r\n") + 4;
    EXPECT_THAT(both.substr(second), StartsWith("HTTP/1.1 200")) << both;
    EXPECT_TRUE(both.ends_with(harness::deterministic_bytes(20)));
  }
}

TEST_P(Methods, HeadIsNeverStoredNorAnsweredFromTheGetEntry_Rfc9110_9_3_2) {
  start_stage();
  // A HEAD first leaves nothing a GET could be served from...
  HttpResponse get_after_head = closing_fetch(proxy_port(), origin_url("/bytes/300"));
  proxy::Socket head = send_request(proxy_port(),
                                    closing_request(origin_url("/bytes/301"), {}, 1, "HEAD"));
  EXPECT_THAT(read_until_close(head), StartsWith("HTTP/1.1 200"));
  HttpResponse first_get = closing_fetch(proxy_port(), origin_url("/bytes/301"));
  EXPECT_EQ(first_get.field("X-Cache"), "MISS");
  EXPECT_EQ(first_get.body, harness::deterministic_bytes(301));
  // ...and a stored GET answers no HEAD, nor is it replaced by one.
  proxy::Socket head_again = send_request(
      proxy_port(), closing_request(origin_url("/bytes/301"), {}, 1, "HEAD"));
  const std::string raw = read_until_close(head_again);
  EXPECT_THAT(raw, HasSubstr("X-Cache: MISS\r\n"));
  EXPECT_TRUE(raw.ends_with("\r\n\r\n"));
  HttpResponse hit = closing_fetch(proxy_port(), origin_url("/bytes/301"));
  EXPECT_EQ(hit.field("X-Cache"), "HIT");
  EXPECT_EQ(hit.body, harness::deterministic_bytes(301));
  EXPECT_EQ(origin_->request_count("/bytes/301"), 3u) << "HEAD, GET, HEAD reach the origin";
  EXPECT_EQ(get_after_head.status, 200);
}

// ---- Bodies on other methods (RFC 9110 §9.3.3-§9.3.7, RFC 5789; RFC 9112 §6) ----

TEST_P(Methods, UnsafeMethodsAndOptionsAreForwardedWithTheirBodiesByteExact_Rfc9112_6) {
  start_stage();
  const std::string body = binary_body(70'000);
  for (const char* method : {"POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    HttpResponse by_length = exchange(
        proxy_port(),
        closing_request(origin_url("/echo"), {"Content-Length: " + std::to_string(body.size())}, 1,
                        method) + body);
    EXPECT_EQ(by_length.status, 200) << method;
    EXPECT_EQ(by_length.field("X-Echo-Method"), method);
    EXPECT_TRUE(by_length.body == body) << method << ": body changed on the way (Content-Length)";
    HttpResponse by_chunks = exchange(
        proxy_port(),
        closing_request(origin_url("/echo"), {"Transfer-Encoding: chunked"}, 1, method) +
            chunked(body));
    EXPECT_EQ(by_chunks.status, 200) << method;
    EXPECT_TRUE(by_chunks.body == body) << method << ": body changed on the way (chunked)";
    EXPECT_EQ(by_chunks.field("X-Cache"), "MISS") << "never stored, so never a hit";
  }
  HttpResponse no_body = exchange(proxy_port(), closing_request(origin_url("/echo"), {}, 1, "OPTIONS"));
  EXPECT_EQ(no_body.status, 200);
  EXPECT_EQ(no_body.body, "");
  EXPECT_EQ(origin_->request_count("/echo"), 11u) << "every request reached the origin";
}

TEST_P(Methods, UploadsLongerThanTheCheckedMebibyteAreStreamedByteExact_Rfc9112_6) {
  start_stage();
  const std::string body = binary_body(5'000'000);
  HttpResponse by_length = exchange(
      proxy_port(),
      closing_request(origin_url("/echo"), {"Content-Length: " + std::to_string(body.size())}, 1,
                      "POST") + body,
      60s);
  EXPECT_EQ(by_length.status, 200);
  EXPECT_TRUE(by_length.body == body) << "5 MB Content-Length upload changed on the way";
  HttpResponse by_chunks = exchange(
      proxy_port(),
      closing_request(origin_url("/echo"), {"Transfer-Encoding: chunked"}, 1, "PUT") +
          chunked(body, 65'536),
      60s);
  EXPECT_EQ(by_chunks.status, 200);
  EXPECT_TRUE(by_chunks.body == by_length.body) << "5 MB chunked upload changed on the way";
}

TEST_P(Methods, AStreamedBodyOverTheLimitIsRefusedAndTheOriginNeverGetsAWholeRequest_Rfc9110_15_5_14) {
  start_stage({"--max-request-body-bytes", "2000000"});
  const std::string body = binary_body(3'000'000);
  HttpResponse r = exchange(
      proxy_port(),
      closing_request(origin_url("/echo"), {"Transfer-Encoding: chunked"}, 1, "POST") +
          chunked(body, 65'536),
      60s);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(origin_->request_count("/echo"), 0u) << "the origin took an incomplete body as whole";
}

TEST_P(Methods, ExpectContinueIsAnsweredSoTheClientSendsItsBody_Rfc9110_10_1_1) {
  start_stage();
  proxy::Socket socket = send_request(
      proxy_port(), closing_request(origin_url("/echo"),
                                    {"Content-Length: 5", "Expect: 100-continue"}, 1, "POST"));
  std::string raw;
  ASSERT_TRUE(read_until(socket, "\r\n\r\n", raw)) << raw;
  EXPECT_THAT(raw, StartsWith("HTTP/1.1 100 Continue\r\n"));
  ASSERT_EQ(socket.write_all("hello", 5s).status, proxy::IoStatus::ok);
  raw += read_until_close(socket);
  EXPECT_THAT(raw, HasSubstr("HTTP/1.1 200"));
  EXPECT_TRUE(raw.ends_with("\r\n\r\nhello")) << raw;
}

// ---- Invalidation (RFC 9111 §4.4) ----

TEST_P(Methods, ASuccessfulUnsafeRequestInvalidatesTheStoredEntry_Rfc9111_4_4) {
  start_stage();
  for (const char* method : {"POST", "PUT", "PATCH", "DELETE"}) {
    const std::string url = origin_url("/bytes/400");
    EXPECT_EQ(closing_fetch(proxy_port(), url).status, 200);
    EXPECT_EQ(closing_fetch(proxy_port(), url).field("X-Cache"), "HIT") << method;
    HttpResponse unsafe =
        exchange(proxy_port(), closing_request(url, {"Content-Length: 1"}, 1, method) + "x");
    EXPECT_EQ(unsafe.status, 200) << method;
    HttpResponse after = closing_fetch(proxy_port(), url);
    EXPECT_EQ(after.field("X-Cache"), "MISS") << method << " did not invalidate";
  }
  // OPTIONS is safe (RFC 9110 §9.2.1): the entry stays.
  EXPECT_EQ(closing_fetch(proxy_port(), origin_url("/bytes/400")).field("X-Cache"), "HIT");
  exchange(proxy_port(), closing_request(origin_url("/bytes/400"), {}, 1, "OPTIONS"));
  EXPECT_EQ(closing_fetch(proxy_port(), origin_url("/bytes/400")).field("X-Cache"), "HIT");
}

TEST_P(Methods, AnUnsafeRequestInvalidatesASameOriginLocation_Rfc9111_4_4) {
  start_stage();
  RawOrigin created("HTTP/1.1 200 OK\r\nLocation: /item\r\nContent-Location: http://elsewhere/x\r\n"
                    "Content-Length: 2\r\n\r\nok");
  EXPECT_EQ(closing_fetch(proxy_port(), created.url("/item")).status, 200);
  EXPECT_EQ(closing_fetch(proxy_port(), created.url("/item")).field("X-Cache"), "HIT");
  exchange(proxy_port(), closing_request(created.url("/collection"), {"Content-Length: 1"}, 1,
                                         "POST") + "x");
  EXPECT_EQ(closing_fetch(proxy_port(), created.url("/item")).field("X-Cache"), "MISS");
}

// ---- CONNECT (RFC 9110 §9.3.6) ----

TEST_P(Methods, ConnectOpensATunnelThatCarriesBytesBothWaysUntilBothSidesClose_Rfc9110_9_3_6) {
  EchoServer echo;
  start_stage({"--connect-ports", "443," + std::to_string(echo.port())});
  proxy::Socket tunnel;
  std::string head;
  ASSERT_TRUE(open_tunnel(proxy_port(), echo.port(), tunnel, head));
  EXPECT_THAT(head, Not(HasSubstr("Content-Length")));
  EXPECT_THAT(head, Not(HasSubstr("Transfer-Encoding")));
  const std::string payload = binary_body(300'000);
  std::jthread writer([&] {
    tunnel.write_all(payload, 10s);
    tunnel.shutdown_write();  // half-close: the echo must still come back
  });
  std::string back = head.substr(head.find("\r\n\r\n") + 4) + read_until_close(tunnel);
  writer.join();
  EXPECT_EQ(back.size(), payload.size());
  EXPECT_TRUE(back == payload) << "tunnel bytes changed on the way";
  EXPECT_EQ(echo.connections(), 1);
}

TEST_P(Methods, ConnectToAPortNotAllowedIs403AndNeverConnects_Rfc9110_9_3_6) {
  EchoServer echo;
  start_stage();  // default: 443 only
  HttpResponse r = exchange(proxy_port(), connect_request(echo.port()));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.field("X-Cache"), "MISS");
  EXPECT_THAT(r.body, HasSubstr("--connect-ports"));
  HttpResponse bad = exchange(proxy_port(), "CONNECT 127.0.0.1 HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(bad.status, 400) << "authority-form needs a port";
  EXPECT_EQ(echo.connections(), 0);
}

TEST_P(Methods, ConnectToAClosedPortIs502) {
  std::uint16_t closed_port = 0;
  {
    proxy::Socket probe = proxy::listen_tcp("127.0.0.1", 0);
    closed_port = proxy::local_port(probe);
  }
  start_stage({"--connect-ports", std::to_string(closed_port)});
  HttpResponse r = exchange(proxy_port(), connect_request(closed_port));
  EXPECT_EQ(r.status, 502);
}

TEST_P(Methods, AnIdleTunnelIsClosedAfterTheTunnelIdleTimeout) {
  EchoServer echo;
  start_stage({"--connect-ports", std::to_string(echo.port()), "--tunnel-idle-timeout-ms", "300"});
  proxy::Socket tunnel;
  std::string head;
  ASSERT_TRUE(open_tunnel(proxy_port(), echo.port(), tunnel, head));
  // Nothing sent: the proxy must end it (well within the 20 s read deadline).
  const auto start = std::chrono::steady_clock::now();
  read_until_close(tunnel);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s) << "the idle tunnel was never closed";
  EXPECT_THAT(stage_log(), HasSubstr("tunnel idle"));
}

TEST_P(Methods, OtherClientsAreServedWhileATunnelIsOpen) {
  if (sequential()) GTEST_SKIP() << "stage 1 serves one connection at a time: a tunnel holds it";
  EchoServer echo;
  start_stage({"--connect-ports", std::to_string(echo.port())});
  proxy::Socket tunnel;
  std::string head;
  ASSERT_TRUE(open_tunnel(proxy_port(), echo.port(), tunnel, head));
  HttpResponse other = closing_fetch(proxy_port(), origin_url("/bytes/50"));
  EXPECT_EQ(other.status, 200);
  EXPECT_EQ(other.body, harness::deterministic_bytes(50));
}

TEST_P(Methods, Stage4CapsOpenTunnelsWith503SoTheyCannotPinEveryWorker) {
  if (GetParam() != "stage4-tuned") GTEST_SKIP() << "--max-tunnels is stage 4's";
  EchoServer echo;
  start_stage({"--connect-ports", std::to_string(echo.port()), "--max-tunnels", "1"});
  proxy::Socket first;
  std::string head;
  ASSERT_TRUE(open_tunnel(proxy_port(), echo.port(), first, head));
  HttpResponse second = exchange(proxy_port(), connect_request(echo.port()));
  EXPECT_EQ(second.status, 503);
  EXPECT_EQ(second.field("Retry-After"), "1");
  // Requests still get workers.
  EXPECT_EQ(closing_fetch(proxy_port(), origin_url("/bytes/10")).status, 200);
  first.shutdown_write();
  read_until_close(first);
  // The place comes back once the proxy has finished the first tunnel: wait for it.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  int status = 0;
  while (status != 200 && std::chrono::steady_clock::now() < deadline) {
    proxy::Socket again = send_request(proxy_port(), connect_request(echo.port()));
    std::string raw;
    read_until(again, "\r\n\r\n", raw);
    status = raw.starts_with("HTTP/1.1 200") ? 200 : 503;
    if (status != 200) std::this_thread::sleep_for(20ms);  // polling a condition, bounded
  }
  EXPECT_EQ(status, 200);
}

// ---- Response framing (RFC 9110 §15.2, §15.3.5, §15.4.5) ----

TEST_P(Methods, InterimResponsesGoToHttp11ClientsBeforeTheFinalOne_Rfc9110_15_2) {
  start_stage();
  proxy::Socket v11 = send_request(proxy_port(), closing_request(origin_url("/interim/103/bytes/30")));
  const std::string raw = read_until_close(v11);
  ASSERT_THAT(raw, StartsWith("HTTP/1.1 103 "));
  EXPECT_THAT(raw, HasSubstr("Link: </style.css>; rel=preload; as=style\r\n"));
  const auto final_at = raw.find("\r\n\r\n") + 4;
  EXPECT_THAT(raw.substr(final_at), StartsWith("HTTP/1.1 200"));
  EXPECT_TRUE(raw.ends_with(harness::deterministic_bytes(30)));

  proxy::Socket v10 =
      send_request(proxy_port(), closing_request(origin_url("/interim/103/bytes/31"), {}, 0));
  const std::string raw10 = read_until_close(v10);
  EXPECT_THAT(raw10, StartsWith("HTTP/1.1 200")) << "a 1xx went to an HTTP/1.0 client";
  EXPECT_TRUE(raw10.ends_with(harness::deterministic_bytes(31)));
}

TEST_P(Methods, NoContentAndNotModifiedHaveNoBodyWhateverTheirContentLength_Rfc9110_15_3_5) {
  // The origin keeps its connection open: a proxy that waited for the 100 bytes promised would
  // hold the client past the test's deadline (the origin timeout is longer).
  start_stage({"--origin-timeout-ms", "60000"});
  for (const char* status : {"204 No Content", "304 Not Modified"}) {
    RawOrigin origin(std::string("HTTP/1.1 ") + status + "\r\nContent-Length: 100\r\nETag: \"e\"\r\n\r\n",
                     RawEnding::hold);
    proxy::Socket socket = send_request(proxy_port(), closing_request(origin.url("/x")));
    bool closed = false;
    const std::string raw = read_until_close(socket, 20s, &closed);
    ASSERT_THAT(raw, StartsWith(std::string("HTTP/1.1 ") + status)) << raw;
    EXPECT_TRUE(closed) << "the proxy waited for a body that a " << status << " never has";
    EXPECT_TRUE(raw.ends_with("\r\n\r\n")) << raw;
    if (std::string(status).starts_with("204")) {
      EXPECT_THAT(raw, Not(HasSubstr("Content-Length"))) << "RFC 9110 §8.6";
    }
  }
}

TEST_P(Methods, AChunkedResponseReachesAnHttp10ClientDecodedAndCloseDelimited_Rfc9112_7_1) {
  start_stage();
  proxy::Socket v10 =
      send_request(proxy_port(), closing_request(origin_url("/stream-bytes/20000"), {}, 0));
  const std::string raw = read_until_close(v10);
  const auto body_at = raw.find("\r\n\r\n") + 4;
  const std::string head = raw.substr(0, body_at);
  EXPECT_THAT(head, Not(HasSubstr("Transfer-Encoding")));
  EXPECT_THAT(head, Not(HasSubstr("Content-Length")));
  EXPECT_THAT(raw, Not(HasSubstr("X-Trailer"))) << "trailers are dropped";
  EXPECT_TRUE(raw.substr(body_at) == harness::deterministic_bytes(20000));
  // The cache holds the decoded body: a later HTTP/1.1 hit gets it with a Content-Length.
  HttpResponse hit = closing_fetch(proxy_port(), origin_url("/stream-bytes/20000"));
  EXPECT_EQ(hit.field("X-Cache"), "HIT");
  EXPECT_EQ(hit.field("Content-Length"), "20000");
  EXPECT_TRUE(hit.body == harness::deterministic_bytes(20000));
}

// ---- Via (RFC 9110 §7.6.3) ----

TEST_P(Methods, ViaIsAppendedToForwardedRequestsAndResponses_Rfc9110_7_6_3) {
  start_stage();
  const std::string me = GetParam();
  HttpResponse headers = exchange(
      proxy_port(), closing_request(origin_url("/headers"), {"Via: 1.1 first-hop"}));
  EXPECT_THAT(headers.body, HasSubstr("Via: 1.1 first-hop\r\nVia: 1.1 " + me + "\r\n"))
      << headers.body;
  HttpResponse v10 = exchange(proxy_port(), closing_request(origin_url("/headers?v=10"), {}, 0));
  EXPECT_THAT(v10.body, HasSubstr("Via: 1.0 " + me + "\r\n"));

  RawOrigin far("HTTP/1.0 200 OK\r\nVia: 1.1 far-cache\r\nContent-Length: 2\r\n\r\nok");
  HttpResponse miss = closing_fetch(proxy_port(), far.url("/v"));
  // Ours comes after the origin's (a Date the cache adds may sit between them).
  const std::size_t theirs = miss.raw.find("Via: 1.1 far-cache\r\n");
  const std::size_t ours = miss.raw.find("Via: 1.0 " + me + "\r\n");
  EXPECT_NE(theirs, std::string::npos) << miss.raw;
  EXPECT_NE(ours, std::string::npos) << miss.raw;
  EXPECT_LT(theirs, ours) << miss.raw;
  HttpResponse hit = closing_fetch(proxy_port(), far.url("/v"));
  EXPECT_EQ(hit.field("X-Cache"), "HIT");
  EXPECT_THAT(hit.raw, HasSubstr("Via: 1.1 " + me + "\r\n"));
}

// ---- Request framing (RFC 9110 §8.6, RFC 9112 §3.2) ----

TEST_P(Methods, AnEmptyBodysContentLengthZeroReachesTheOrigin_Rfc9110_8_6) {
  start_stage();
  // /anything echoes the fields it received as JSON: ["Name","value"] pairs.
  for (const char* method : {"POST", "PUT", "PATCH"}) {
    HttpResponse empty = exchange(
        proxy_port(), closing_request(origin_url("/anything/empty"), {"Content-Length: 0"}, 1,
                                      method));
    EXPECT_EQ(empty.status, 200) << method;
    EXPECT_THAT(empty.body, HasSubstr("\"method\":\"" + std::string(method) + "\""));
    EXPECT_THAT(empty.body, HasSubstr("[\"Content-Length\",\"0\"]")) << method << ": " << empty.body;
    EXPECT_THAT(empty.body, HasSubstr("\"body_length\":0"));
  }
  // A request that sent no framing gets none added.
  HttpResponse bare = exchange(
      proxy_port(), closing_request(origin_url("/anything/bare"), {}, 1, "POST"));
  EXPECT_EQ(bare.status, 200);
  EXPECT_THAT(bare.body, Not(HasSubstr("Content-Length"))) << bare.body;
  EXPECT_THAT(bare.body, Not(HasSubstr("Transfer-Encoding"))) << bare.body;
}

TEST_P(Methods, MoreThanOneHostFieldIsAnswered400AndNeverForwarded_Rfc9112_3_2) {
  start_stage();
  const std::string url = origin_url("/anything/hosts");
  const std::string authority = url.substr(7, url.find('/', 7) - 7);
  // "more than one Host header field line": two equal lines are refused like two different ones.
  for (const std::string& second : {std::string("Host: elsewhere.example"), "Host: " + authority}) {
    HttpResponse refused =
        exchange(proxy_port(), closing_request(url, {second}, 1, "GET"));
    EXPECT_EQ(refused.status, 400) << second << "\n" << refused.raw;
    EXPECT_EQ(refused.field("X-Cache"), "MISS");
  }
  // A POST with a body, and the pair split by another field, too.
  HttpResponse post = exchange(
      proxy_port(),
      closing_request(url, {"Accept: */*", "host: elsewhere.example", "Content-Length: 2"}, 1,
                      "POST") + "hi");
  EXPECT_EQ(post.status, 400) << post.raw;
  EXPECT_EQ(origin_->request_count("/anything/hosts"), 0u) << "a refused request reached the origin";
  // One Host, even one naming another authority, is still served: the URI wins (RFC 9112 §3.2.2).
  HttpResponse one = exchange(
      proxy_port(), "GET " + url + " HTTP/1.1\r\nHost: elsewhere.example\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(one.status, 200) << one.raw;
  EXPECT_EQ(origin_->request_count("/anything/hosts"), 1u);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Methods);
INSTANTIATE_TEST_SUITE_P(Stages, Methods, ::testing::ValuesIn(built_stages()), stage_name);

}  // namespace
}  // namespace testing_support
