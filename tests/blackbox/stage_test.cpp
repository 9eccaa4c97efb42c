// Black-box tests run against every stage binary, the transaction itself: CS:APP Proxy Lab's
// byte-exact fetches (every body framing), rewriting for the origin, and every error reply.
// Caching and large bodies: stage_cache_test.cpp; concurrency, start-up and shutdown:
// stage_lifecycle_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "hardening_support.h"
#include "net/socket.h"
#include "run_command.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

TEST_P(StageTest, PrintsListeningLineOnLoopbackByDefault) {
  start_stage();
  EXPECT_EQ(stage_->host(), "127.0.0.1");
  EXPECT_NE(stage_->port(), 0);
}

// RFC 9112 §2.2: a server SHOULD ignore empty lines before the request line (some clients send
// a CRLF after a request body).
TEST_P(StageTest, IgnoresEmptyLinesBeforeTheRequestLine) {
  start_stage();
  HttpResponse r = exchange(proxy_port(), "\r\n\r\n" + proxy_get(origin_url("/bytes/10")));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, harness::deterministic_bytes(10));
}

TEST_P(StageTest, RelaysBinaryBodyByteExact) {
  start_stage();
  HttpResponse r = fetch(proxy_port(), origin_url("/bytes/70000"));
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.field("X-Cache"), "MISS");
  EXPECT_EQ(r.body, harness::deterministic_bytes(70000));
}

TEST_P(StageTest, RelaysTextBodyExactlyAsTheOriginSentIt) {
  start_stage();
  HttpResponse direct =
      exchange(origin_->port(), proxy_get(origin_url("/anything/text?x=1"), {"Connection: close"}));
  HttpResponse proxied = fetch(proxy_port(), origin_url("/anything/text?x=1"));
  ASSERT_EQ(direct.status, 200);
  EXPECT_EQ(proxied.status, 200);
  EXPECT_EQ(proxied.field("Content-Type"), direct.field("Content-Type"));
  // The echo names the proxy's own Host and Connection, so compare the parts that must match.
  EXPECT_THAT(proxied.body, HasSubstr("\"target\":\"/anything/text?x=1\""));
  EXPECT_THAT(proxied.body, HasSubstr("\"method\":\"GET\""));
}

TEST_P(StageTest, DecodesChunkedBodyAndReframesItForHttp11Clients) {
  start_stage();
  HttpResponse r = fetch(proxy_port(), origin_url("/stream-bytes/100000"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.field("Transfer-Encoding"), "chunked");
  EXPECT_TRUE(r.complete) << "the last chunk must arrive";
  EXPECT_EQ(r.body, harness::deterministic_bytes(100000));
}

TEST_P(StageTest, DeliversChunkedBodyToHttp10ClientsClosedDelimited) {
  start_stage();
  HttpResponse r = exchange(proxy_port(), proxy_get(origin_url("/stream-bytes/5000"), {}, 0));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.field("Transfer-Encoding"), "");
  EXPECT_EQ(r.body, harness::deterministic_bytes(5000));
}

TEST_P(StageTest, RelaysCloseDelimitedBody) {
  start_stage();
  HttpResponse r = fetch(proxy_port(), origin_url("/close/30000"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, harness::deterministic_bytes(30000));
}

TEST_P(StageTest, RewritesHeadersForTheOrigin) {
  start_stage();
  HttpResponse r = exchange(
      proxy_port(),
      proxy_get(origin_url("/headers"),
                {"User-Agent: blackbox/1", "Proxy-Connection: keep-alive", "Keep-Alive: 300",
                 "Connection: keep-alive, X-Hop", "X-Hop: secret", "Proxy-Authorization: Basic x",
                 "X-End-To-End: kept", "Accept: */*"}));
  ASSERT_EQ(r.status, 200);
  const std::string& sent = r.body;
  EXPECT_THAT(sent, HasSubstr("Host: 127.0.0.1:" + std::to_string(origin_->port()) + "\r\n"));
  if (GetParam() == "stage4-tuned") {
    // Stage 4 keeps its origin connections (RFC 9112 §9.3: HTTP/1.1 persists unless a side
    // says close); stages 1-3 use each one once.
    EXPECT_THAT(sent, Not(HasSubstr("Connection:")));
  } else {
    EXPECT_THAT(sent, HasSubstr("Connection: close\r\n"));
  }
  EXPECT_THAT(sent, HasSubstr("User-Agent: blackbox/1\r\nX-End-To-End: kept\r\nAccept: */*\r\n"))
      << "end-to-end fields forwarded unchanged and in order";
  for (const char* hop : {"Proxy-Connection", "Keep-Alive", "X-Hop", "Proxy-Authorization",
                          "keep-alive"}) {
    EXPECT_THAT(sent, Not(HasSubstr(hop))) << hop << " is hop-by-hop";
  }
}

TEST_P(StageTest, SendsOriginFormTargetToTheOrigin) {
  start_stage();
  HttpResponse r = fetch(proxy_port(), origin_url("/anything/path?q=1&r=2"));
  EXPECT_THAT(r.body, HasSubstr("\"target\":\"/anything/path?q=1&r=2\""));
}

TEST_P(StageTest, AnswersGarbageWith400AndKeepsServing) {
  start_stage();
  HttpResponse bad = exchange(proxy_port(), "garbage\r\n\r\n");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.field("X-Cache"), "MISS");
  HttpResponse good = fetch(proxy_port(), origin_url("/bytes/100"));
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(good.body, harness::deterministic_bytes(100));
}

TEST_P(StageTest, AnswersOriginFormRequestWith400) {
  start_stage();
  HttpResponse r = exchange(proxy_port(), "GET /bytes/10 HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("absolute-form"));
}

// Methods: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS and CONNECT are served (methods_test);
// TRACE and unknown methods are not (RFC 9110 §15.6.2).
TEST_P(StageTest, AnswersMethodsItDoesNotImplementWith501) {
  start_stage();
  for (const char* method : {"TRACE", "BREW", "get"}) {
    HttpResponse r = exchange(proxy_port(), proxy_get(origin_url("/anything"), {}, 1, method));
    EXPECT_EQ(r.status, 501) << method;
    EXPECT_EQ(r.field("X-Cache"), "MISS") << method;
  }
  EXPECT_EQ(origin_->request_count("/anything"), 0u);
}

TEST_P(StageTest, AnswersSchemesOtherThanHttpWith501) {
  start_stage();
  for (const char* url : {"https://127.0.0.1/", "https://127.0.0.1:8443/x", "ftp://127.0.0.1/"}) {
    HttpResponse r = fetch(proxy_port(), url);
    EXPECT_EQ(r.status, 501) << url;
    EXPECT_THAT(r.body, HasSubstr("only http://")) << url;
  }
}

TEST_P(StageTest, AnswersAnIncompleteRequestHeadWith408) {
  start_stage({"--client-timeout-ms", "300"});
  proxy::Socket slow = send_request(proxy_port(), "GET " + origin_url("/bytes/1") + " HTTP/1.1\r\n");
  auto r = read_response(slow, 20s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 408);
}

TEST_P(StageTest, AnswersUnreachableOriginWith502) {
  start_stage();
  std::uint16_t closed_port;
  {
    proxy::Socket probe = proxy::listen_tcp("127.0.0.1", 0);
    closed_port = proxy::local_port(probe);
  }  // closed: connecting is refused
  HttpResponse r = fetch(proxy_port(), "http://127.0.0.1:" + std::to_string(closed_port) + "/");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(r.field("X-Cache"), "MISS");
}

// RFC 9110 §9.3.2: the proxy's own answer to a HEAD — here a refusal, and an origin it cannot
// reach — is a head alone, its Content-Length what a GET's body would be and no byte after the
// blank line; the same request as a GET gets the body. Then the proxy goes on serving.
TEST_P(StageTest, AnswersAHeadItRefusesWithTheHeadAlone) {
  start_stage();
  std::uint16_t closed_port;
  {
    proxy::Socket probe = proxy::listen_tcp("127.0.0.1", 0);
    closed_port = proxy::local_port(probe);
  }  // closed: connecting is refused
  const std::string unreachable = "http://127.0.0.1:" + std::to_string(closed_port) + "/";
  const std::vector<std::pair<std::string, int>> cases = {
      {" " + origin_url("/bytes/1") + " HTTP/1.1\r\n\r\n", 400},  // no Host
      {" https://127.0.0.1/ HTTP/1.1\r\nHost: x\r\n\r\n", 501},
      {" " + unreachable + " HTTP/1.1\r\nHost: x\r\n\r\n", 502},
  };
  for (const auto& [rest, status] : cases) {
    SCOPED_TRACE(rest);
    HttpResponse head = exchange(proxy_port(), "HEAD" + rest);
    EXPECT_EQ(head.status, status);
    EXPECT_TRUE(head.raw.ends_with("\r\n\r\n")) << "a body after the head: " << head.raw;
    HttpResponse get = exchange(proxy_port(), "GET" + rest);
    EXPECT_EQ(get.status, status);
    EXPECT_FALSE(get.body.empty());
    EXPECT_EQ(head.field("Content-Length"), std::to_string(get.body.size()));
  }
  HttpResponse good = fetch(proxy_port(), origin_url("/bytes/100"));
  EXPECT_EQ(good.status, 200);
  EXPECT_EQ(good.body, harness::deterministic_bytes(100));
}

TEST_P(StageTest, AnswersMalformedOriginResponseWith502) {
  start_stage();
  RawOrigin garbage("this is not HTTP\r\n\r\n");
  HttpResponse r = fetch(proxy_port(), "http://127.0.0.1:" + std::to_string(garbage.port()) + "/");
  EXPECT_EQ(r.status, 502);
}

TEST_P(StageTest, AnswersOriginTimeoutWith504) {
  start_stage({"--origin-timeout-ms", "300"});
  HttpResponse r = fetch(proxy_port(), origin_url("/stall"));
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(r.field("X-Cache"), "MISS");
}

TEST_P(StageTest, AnswersOverlongRequestLineWith414) {
  start_stage();
  HttpResponse r = fetch(proxy_port(), origin_url("/bytes/1?" + std::string(10000, 'a')));
  EXPECT_EQ(r.status, 414);
}

TEST_P(StageTest, AnswersOversizedHeaderSectionWith431) {
  start_stage();
  std::vector<std::string> fields;
  for (int i = 0; i < 40; ++i) fields.push_back("X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'v'));
  HttpResponse r = exchange(proxy_port(), proxy_get(origin_url("/bytes/1"), fields));
  EXPECT_EQ(r.status, 431);
  EXPECT_EQ(origin_->request_count(""), 0u);
}

TEST_P(StageTest, ServesARequestTrickledInOneByteAtATime) {
  start_stage();
  const std::string request = proxy_get(origin_url("/bytes/100"), {"X-Padding: " + std::string(2000, 'p')});
  auto connected = proxy::connect_tcp("127.0.0.1", proxy_port(), 5s);
  ASSERT_EQ(connected.error, proxy::ConnectError::none);
  for (char c : request) {
    ASSERT_EQ(connected.socket.write_all(std::string_view(&c, 1), 5s).status, proxy::IoStatus::ok);
  }
  auto r = read_response(connected.socket, 20s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, harness::deterministic_bytes(100));
}

INSTANTIATE_TEST_SUITE_P(Stages, StageTest, ::testing::ValuesIn(built_stages()), stage_name);

TEST(StageHelp, EveryStageDocumentsItsFlags) {
  for (const std::string& stage : built_stages()) {
    const harness::CommandOutput help = help_output(stage);
    ASSERT_TRUE(help.started);
    EXPECT_EQ(help.status, 0) << stage;
    for (const char* flag : {"--port", "--bind", "--cache-bytes", "--max-object-bytes",
                             "--cache-policy"}) {
      EXPECT_THAT(help.text, HasSubstr(flag)) << stage;
    }
  }
}

}  // namespace
}  // namespace testing_support
