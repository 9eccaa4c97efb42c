// build_origin_request and the hop-by-hop rules (common/http/rewrite.h): what the origin receives.
#include "http/rewrite.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "exact_buffer.h"
#include "http/body_reader.h"
#include "http/http_message.h"
#include "http/uri.h"

namespace proxy {
namespace {

Request request_for(std::string method, std::string target, HeaderFields fields,
                    int version_minor = 1) {
  Request request;
  request.method = std::move(method);
  request.target = std::move(target);
  request.version_minor = version_minor;
  request.fields = std::move(fields);
  return request;
}

AbsoluteUri uri_of(std::string_view target) {
  std::optional<AbsoluteUri> uri = parse_absolute_uri(target);
  if (!uri) ADD_FAILURE() << "test target does not parse: " << target;
  return uri.value_or(AbsoluteUri{});
}

std::string rewrite(const Request& request, std::string_view body_framing_field = {}) {
  return build_origin_request(request, uri_of(request.target), body_framing_field);
}

// ---- build_origin_request ---------------------------------------------------------------------

TEST(BuildOriginRequest, SendsOriginFormHostFromUriFieldsInOrderAndConnectionClose) {
  Request request = request_for("GET", "http://Example.com:8080/a/b?c=d#frag",
                                {{"Host", "wrong.example"},
                                 {"User-Agent", "curl/8.0"},
                                 {"Accept", "*/*"},
                                 {"Cookie", "a=1"}});
  EXPECT_EQ(rewrite(request),
            "GET /a/b?c=d HTTP/1.1\r\n"
            "Host: example.com:8080\r\n"
            "User-Agent: curl/8.0\r\n"
            "Accept: */*\r\n"
            "Cookie: a=1\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(BuildOriginRequest, AddsHostWhenTheClientSentNoneAndOmitsDefaultPort) {
  Request request = request_for("GET", "http://example.com:80/", {});
  EXPECT_EQ(rewrite(request), "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, ReplacesEveryHostTheClientSent) {
  Request request = request_for("GET", "http://origin.test/", {{"host", "a"}, {"HOST", "b"}});
  EXPECT_EQ(rewrite(request), "GET / HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, BracketsIpv6HostLiteral) {
  Request request = request_for("GET", "http://[::1]:8080/x", {});
  EXPECT_EQ(rewrite(request), "GET /x HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, SpeaksHttp11ToTheOriginForAnHttp10Client) {
  Request request = request_for("GET", "http://example.com/", {{"Accept", "*/*"}}, 0);
  EXPECT_EQ(rewrite(request),
            "GET / HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, KeepsMethodAndFieldNameCaseAndValuesByteForByte) {
  Request request = request_for("POST", "http://example.com/form",
                                {{"x-Custom-HEADER", "Mixed Case, \"quoted\"; a=b"},
                                 {"Content-Type", "application/x-www-form-urlencoded"}});
  EXPECT_EQ(rewrite(request),
            "POST /form HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "x-Custom-HEADER: Mixed Case, \"quoted\"; a=b\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(BuildOriginRequest, KeepsRepeatedFieldsSeparateAndInOrder) {
  Request request = request_for("GET", "http://example.com/",
                                {{"Cookie", "a=1"}, {"Accept", "*/*"}, {"Cookie", "b=2"}});
  EXPECT_EQ(rewrite(request),
            "GET / HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "Cookie: a=1\r\n"
            "Accept: */*\r\n"
            "Cookie: b=2\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(BuildOriginRequest, RemovesEveryFixedHopByHopField) {
  Request request = request_for("GET", "http://example.com/",
                                {{"Connection", "keep-alive"},
                                 {"Keep-Alive", "timeout=5"},
                                 {"Accept", "*/*"},
                                 {"Proxy-Connection", "keep-alive"},
                                 {"Proxy-Authorization", "Basic dXNlcjpwYXNz"},
                                 {"TE", "trailers"},
                                 {"Trailer", "Expires"},
                                 {"Upgrade", "websocket"},
                                 {"Transfer-Encoding", "chunked"},
                                 {"User-Agent", "test"}});
  EXPECT_EQ(rewrite(request),
            "GET / HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "Accept: */*\r\n"
            "User-Agent: test\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(BuildOriginRequest, RemovesHopByHopFieldsWhateverTheirCase) {
  Request request = request_for("GET", "http://example.com/",
                                {{"connection", "close"},
                                 {"PROXY-CONNECTION", "close"},
                                 {"te", "trailers"},
                                 {"Accept", "*/*"}});
  EXPECT_EQ(rewrite(request),
            "GET / HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, RemovesFieldsThatConnectionNames) {
  Request request = request_for("GET", "http://example.com/",
                                {{"X-Trace", "abc"},
                                 {"Connection", "keep-alive, x-trace"},
                                 {"X-Debug", "1"},
                                 {"Connection", "X-Debug"},
                                 {"X-Kept", "yes"}});
  EXPECT_EQ(rewrite(request),
            "GET / HTTP/1.1\r\nHost: example.com\r\nX-Kept: yes\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, SendsExactlyOneConnectionClose) {
  Request request = request_for("GET", "http://example.com/", {{"Connection", "close"}});
  const std::string out = rewrite(request);
  EXPECT_EQ(out.find("Connection: close\r\n"), out.rfind("Connection: close\r\n"));
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
}

TEST(BuildOriginRequest, ReplacesClientContentLengthWithTheFramingArgument) {
  Request request = request_for("POST", "http://example.com/up",
                                {{"Content-Length", "999"}, {"Content-Type", "text/plain"}});
  EXPECT_EQ(rewrite(request, "Content-Length: 5"),
            "POST /up HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "Content-Type: text/plain\r\n"
            "Content-Length: 5\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(BuildOriginRequest, ChunkedFramingArgumentReplacesClientFraming) {
  Request request = request_for("POST", "http://example.com/up",
                                {{"Transfer-Encoding", "chunked"}, {"Content-Type", "text/plain"}});
  EXPECT_EQ(rewrite(request, "Transfer-Encoding: chunked"),
            "POST /up HTTP/1.1\r\n"
            "Host: example.com\r\n"
            "Content-Type: text/plain\r\n"
            "Transfer-Encoding: chunked\r\n"
            "Connection: close\r\n"
            "\r\n");
}

TEST(BuildOriginRequest, DropsClientContentLengthWhenNoFramingIsGiven) {
  Request request = request_for("GET", "http://example.com/", {{"content-length", "0"}});
  EXPECT_EQ(rewrite(request), "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
}

TEST(BuildOriginRequest, OutputParsesBackAsOneCompleteOriginFormRequest) {
  Request request =
      request_for("GET", "http://example.com/path?q=1",
                  {{"Host", "example.com"}, {"Accept", "*/*"}, {"Connection", "keep-alive"}});
  const std::string out = rewrite(request);
  test::ExactBuffer buffer(out);
  Request parsed;
  RequestParseResult result = parse_request(buffer.view(), parsed);
  ASSERT_EQ(result.status, ParseStatus::complete);
  EXPECT_EQ(result.consumed, out.size());
  EXPECT_EQ(parsed.target, "/path?q=1");
  EXPECT_EQ(parsed.version_minor, 1);
  EXPECT_EQ(find_field(parsed.fields, "Host"), "example.com");
  EXPECT_EQ(find_field(parsed.fields, "Connection"), "close");
}

// ---- is_hop_by_hop, is_hop_by_hop_in ----------------------------------------------------------

TEST(IsHopByHop, TrueForEachFixedHopByHopFieldInAnyCase) {
  for (std::string_view name :
       {"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "connection", "KEEP-ALIVE", "te",
        "transfer-encoding"}) {
    EXPECT_TRUE(is_hop_by_hop(name)) << name;
  }
}

TEST(IsHopByHop, FalseForEndToEndFieldsAndNearMisses) {
  for (std::string_view name :
       {"Host", "Content-Length", "Content-Type", "Cookie", "Accept", "Cache-Control", "Trailers",
        "Connections", "T", "TE2", "Keep-Alive-X", "Upgrade-Insecure-Requests", ""}) {
    EXPECT_FALSE(is_hop_by_hop(name)) << name;
  }
}

TEST(IsHopByHopIn, FieldsThatConnectionListsAreHopByHop) {
  const HeaderFields fields = {{"Connection", "close, X-Foo"}, {"connection", "x-bar"}};
  EXPECT_TRUE(is_hop_by_hop_in("X-Foo", fields));
  EXPECT_TRUE(is_hop_by_hop_in("x-foo", fields));
  EXPECT_TRUE(is_hop_by_hop_in("X-Bar", fields));
  EXPECT_TRUE(is_hop_by_hop_in("Keep-Alive", fields));
  EXPECT_FALSE(is_hop_by_hop_in("X-Baz", fields));
  EXPECT_FALSE(is_hop_by_hop_in("X", fields));
}

TEST(IsHopByHopIn, WithoutConnectionOnlyTheFixedSetIsHopByHop) {
  const HeaderFields fields = {{"X-Foo", "Connection"}, {"Cache-Control", "X-Foo"}};
  EXPECT_FALSE(is_hop_by_hop_in("X-Foo", fields));
  EXPECT_TRUE(is_hop_by_hop_in("Upgrade", fields));
}

// ---- origin_framing_field (RFC 9112 §6, RFC 9110 §8.6) ----------------------------------------

// The framing the origin gets for `request`, as the transaction computes it: the verdict of
// request_body_framing, then the field built around the rest of the head.
std::string origin_head(const Request& request, std::uint64_t length = 0,
                        bool stream_chunked = false) {
  std::optional<BodyFraming> body = request_body_framing(request);
  if (!body) {
    ADD_FAILURE() << "test request has invalid framing";
    return {};
  }
  return rewrite(request, origin_framing_field(request, *body, length, stream_chunked));
}

TEST(OriginFramingField, AnEmptyPostKeepsItsContentLengthZero_Rfc9110_8_6) {
  Request request = request_for("POST", "http://o/p", {{"Content-Length", "0"}});
  EXPECT_EQ(origin_head(request),
            "POST /p HTTP/1.1\r\nHost: o\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  // The list form of the same length, which request_body_framing accepts, is sent as one 0.
  Request listed = request_for("PUT", "http://o/p", {{"Content-Length", "0, 0"}});
  EXPECT_EQ(origin_head(listed),
            "PUT /p HTTP/1.1\r\nHost: o\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

TEST(OriginFramingField, ARequestWithoutFramingGetsNone) {
  for (const char* method : {"GET", "POST", "DELETE"}) {
    Request request = request_for(method, "http://o/p", {{"Accept", "*/*"}});
    EXPECT_EQ(origin_head(request), std::string(method) +
                                        " /p HTTP/1.1\r\nHost: o\r\nAccept: */*\r\n"
                                        "Connection: close\r\n\r\n");
  }
}

TEST(OriginFramingField, ABodyGetsItsLengthOrTheProxysOwnChunking) {
  Request sized = request_for("POST", "http://o/p", {{"Content-Length", "12"}});
  EXPECT_EQ(origin_framing_field(sized, BodyFraming{BodyKind::content_length, 12}, 12, false),
            "Content-Length: 12");
  // A chunked body read whole was decoded, so it is sent with the decoded length...
  Request chunked = request_for("POST", "http://o/p", {{"Transfer-Encoding", "chunked"}});
  EXPECT_EQ(origin_framing_field(chunked, BodyFraming{BodyKind::chunked, 0}, 7, false),
            "Content-Length: 7");
  // ...and one too long to hold is streamed in chunks the proxy makes.
  EXPECT_EQ(origin_framing_field(chunked, BodyFraming{BodyKind::chunked, 0}, 0, true),
            "Transfer-Encoding: chunked");
}


// ---- keep_origin_connection_open ---------------------------------------------------------------

TEST(KeepOriginConnectionOpen, TakesAwayTheClosingLineAndLeavesTheRestByteForByte) {
  Request request = request_for("GET", "http://example.com/a", {{"Accept", "*/*"}});
  std::string out = rewrite(request, "Via: 1.1 proxy");
  ASSERT_TRUE(keep_origin_connection_open(out));
  EXPECT_EQ(out, "GET /a HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nVia: 1.1 proxy\r\n\r\n");
  EXPECT_FALSE(keep_origin_connection_open(out)) << "a second call must find nothing to take";
}

TEST(KeepOriginConnectionOpen, RefusesAHeadThatDoesNotEndWithConnectionClose) {
  std::string out = "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-After: 1\r\n\r\n";
  const std::string before = out;
  EXPECT_FALSE(keep_origin_connection_open(out));
  EXPECT_EQ(out, before);
}

}  // namespace
}  // namespace proxy
