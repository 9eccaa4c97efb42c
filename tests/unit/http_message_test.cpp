// parse_request (common/http/http_message.h): one line per case, what a complete head yields, the
// size limits, the empty lines before a request line. Every input sits in an exactly-sized heap
// buffer, so a read past its end fails under AddressSanitizer. parse_response_head:
// http_response_head_test.cpp; the field helpers: http_fields_test.cpp.
#include "http/http_message.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "exact_buffer.h"

namespace proxy {
namespace {

using namespace std::string_view_literals;
using test::ExactBuffer;
using test::printable;

std::string verdict(ParseStatus status, int error_status) {
  switch (status) {
    case ParseStatus::complete:
      return "complete";
    case ParseStatus::incomplete:
      return "incomplete";
    case ParseStatus::invalid:
      return "invalid " + std::to_string(error_status);
  }
  return "?";
}

RequestParseResult parse_exact(std::string_view input, Request& out,
                               const RequestLimits& limits = {}) {
  ExactBuffer buffer(input);
  return parse_request(buffer.view(), out, limits);
}

std::string request_verdict(std::string_view input, const RequestLimits& limits = {}) {
  Request request;
  RequestParseResult result = parse_exact(input, request, limits);
  return verdict(result.status, result.error_status);
}

// Every proper prefix of a valid head must ask for more bytes, never fail: reads split anywhere.
void expect_incomplete_at_every_prefix(std::string_view head, const RequestLimits& limits = {}) {
  for (std::size_t n = 0; n < head.size(); ++n) {
    EXPECT_EQ(request_verdict(head.substr(0, n), limits), "incomplete")
        << "prefix of " << n << " bytes: " << printable(head.substr(0, n));
  }
}

// ---- parse_request: one line per case ---------------------------------------------------------

struct RequestCase {
  const char* name;
  std::string_view input;
  ParseStatus status;
  int error_status;
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const RequestCase& c, std::ostream* os) {
  *os << c.name << ": " << printable(c.input);
}

constexpr auto kComplete = ParseStatus::complete;
constexpr auto kIncomplete = ParseStatus::incomplete;
constexpr auto kInvalid = ParseStatus::invalid;

// clang-format off
constexpr RequestCase kRequestCases[] = {
    // Request-target forms (RFC 9112 §3.2) and versions.
    {"AbsoluteForm", "GET http://example.com/index.html HTTP/1.1\r\nHost: example.com\r\n\r\n", kComplete, 0},
    {"OriginForm", "GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n", kComplete, 0},
    {"AuthorityForm", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", kComplete, 0},
    {"AsteriskForm", "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n", kComplete, 0},
    {"Http10WithoutFields", "GET http://example.com/ HTTP/1.0\r\n\r\n", kComplete, 0},
    {"ExtensionMethod", "PURGE http://example.com/ HTTP/1.1\r\n\r\n", kComplete, 0},
    {"EmptyFieldValue", "GET / HTTP/1.1\r\nX-Empty:\r\n\r\n", kComplete, 0},
    {"TabInsideFieldValue", "GET / HTTP/1.1\r\nX-Tab: a\tb\r\n\r\n", kComplete, 0},
    {"ObsTextInFieldValue", "GET / HTTP/1.1\r\nX-Latin1: caf\351\r\n\r\n", kComplete, 0},
    {"Http20Is505", "GET http://example.com/ HTTP/2.0\r\n\r\n", kInvalid, 505},
    {"Http12Is505", "GET http://example.com/ HTTP/1.2\r\n\r\n", kInvalid, 505},
    {"Http09Is505", "GET http://example.com/ HTTP/0.9\r\n\r\n", kInvalid, 505},
    // Garbage and malformed request lines.
    {"GarbageLineIs400", "hello world\r\n\r\n", kInvalid, 400},
    {"BinaryGarbageIs400", "\026\003\001\000\245 x y\r\n\r\n"sv, kInvalid, 400},
    {"LowerCaseVersionIs400", "GET / http/1.1\r\n\r\n", kInvalid, 400},
    {"VersionWithoutMinorIs400", "GET / HTTP/1\r\n\r\n", kInvalid, 400},
    {"MissingVersionIs400", "GET /\r\n\r\n", kInvalid, 400},
    {"DoubleSpaceIs400", "GET  / HTTP/1.1\r\n\r\n", kInvalid, 400},
    {"TrailingSpaceIs400", "GET / HTTP/1.1 \r\n\r\n", kInvalid, 400},
    {"SpaceInsideTargetIs400", "GET /a b HTTP/1.1\r\n\r\n", kInvalid, 400},
    {"ControlCharInTargetIs400", "GET /a\001b HTTP/1.1\r\n\r\n", kInvalid, 400},
    {"NonTokenMethodIs400", "G(T / HTTP/1.1\r\n\r\n", kInvalid, 400},
    // Line endings other than CRLF: what request smuggling hides behind.
    {"BareLfEndsRequestLineIs400", "GET / HTTP/1.1\nHost: h\n\n", kInvalid, 400},
    {"BareCrInRequestLineIs400", "GET /\r HTTP/1.1\r\n\r\n", kInvalid, 400},
    {"BareLfEndsFieldLineIs400", "GET / HTTP/1.1\r\nHost: h\n\r\n", kInvalid, 400},
    {"BareLfEndsHeadIs400", "GET / HTTP/1.1\r\nHost: h\r\n\n", kInvalid, 400},
    {"BareCrInFieldValueIs400", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", kInvalid, 400},
    {"ObsoleteFoldingWithSpaceIs400", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", kInvalid, 400},
    {"ObsoleteFoldingWithTabIs400", "GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", kInvalid, 400},
    {"WhitespaceBeforeFirstFieldIs400", "GET / HTTP/1.1\r\n Host: h\r\n\r\n", kInvalid, 400},
    // Field lines.
    {"NulInFieldValueIs400", "GET / HTTP/1.1\r\nX: a\000b\r\n\r\n"sv, kInvalid, 400},
    {"EscapeInFieldValueIs400", "GET / HTTP/1.1\r\nX: a\033b\r\n\r\n", kInvalid, 400},
    {"DelInFieldValueIs400", "GET / HTTP/1.1\r\nX: a\177b\r\n\r\n", kInvalid, 400},
    {"SpaceBeforeColonIs400", "GET / HTTP/1.1\r\nHost : h\r\n\r\n", kInvalid, 400},
    {"TabBeforeColonIs400", "GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", kInvalid, 400},
    {"SpaceInsideFieldNameIs400", "GET / HTTP/1.1\r\nX Y: z\r\n\r\n", kInvalid, 400},
    {"FieldLineWithoutColonIs400", "GET / HTTP/1.1\r\nHost h\r\n\r\n", kInvalid, 400},
    {"EmptyFieldNameIs400", "GET / HTTP/1.1\r\n: h\r\n\r\n", kInvalid, 400},
    // Not there yet.
    {"EmptyBufferIsIncomplete", "", kIncomplete, 0},
    {"RequestLineWithoutCrlfIsIncomplete", "GET http://example.com/ HTTP/1.1", kIncomplete, 0},
    {"HeadWithoutBlankLineIsIncomplete", "GET / HTTP/1.1\r\nHost: h\r\n", kIncomplete, 0},
    {"HeadEndingInCrIsIncomplete", "GET / HTTP/1.1\r\nHost: h\r\n\r", kIncomplete, 0},
};
// clang-format on

class ParseRequestTable : public ::testing::TestWithParam<RequestCase> {};

TEST_P(ParseRequestTable, GivesTheExpectedVerdict) {
  const RequestCase& c = GetParam();
  EXPECT_EQ(request_verdict(c.input), verdict(c.status, c.error_status));
}

INSTANTIATE_TEST_SUITE_P(Cases, ParseRequestTable, ::testing::ValuesIn(kRequestCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- parse_request: what a complete head yields ----------------------------------------------

TEST(ParseRequest, FillsMethodTargetVersionAndFieldsInOrder) {
  constexpr std::string_view kHead =
      "POST http://Example.com/form?q=1 HTTP/1.1\r\n"
      "Host: example.com\r\n"
      "X-Mixed-CASE:   padded value \t\r\n"
      "Cookie: a=1\r\n"
      "Cookie: b=2\r\n"
      "\r\n";
  Request request;
  RequestParseResult result = parse_exact(kHead, request);
  ASSERT_EQ(verdict(result.status, result.error_status), "complete");
  EXPECT_EQ(result.consumed, kHead.size());
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.target, "http://Example.com/form?q=1");
  EXPECT_EQ(request.version_minor, 1);
  ASSERT_EQ(request.fields.size(), 4u);
  EXPECT_EQ(request.fields[0].name, "Host");
  EXPECT_EQ(request.fields[0].value, "example.com");
  EXPECT_EQ(request.fields[1].name, "X-Mixed-CASE");
  EXPECT_EQ(request.fields[1].value, "padded value");
  EXPECT_EQ(request.fields[2].value, "a=1");
  EXPECT_EQ(request.fields[3].value, "b=2");
}

TEST(ParseRequest, Http10SetsVersionMinorZero) {
  Request request;
  RequestParseResult result = parse_exact("GET http://example.com/ HTTP/1.0\r\n\r\n", request);
  ASSERT_EQ(result.status, ParseStatus::complete);
  EXPECT_EQ(request.version_minor, 0);
  EXPECT_TRUE(request.fields.empty());
}

TEST(ParseRequest, ConsumesOnlyTheHeadAndLeavesBodyBytesAlone) {
  constexpr std::string_view kHead = "POST /upload HTTP/1.1\r\nContent-Length: 7\r\n\r\n";
  // The body holds a bare LF and a blank line: none of it is the parser's business.
  const std::string input = std::string(kHead) + "a\nb\r\n\r\n";
  Request request;
  RequestParseResult result = parse_exact(input, request);
  ASSERT_EQ(result.status, ParseStatus::complete);
  EXPECT_EQ(result.consumed, kHead.size());
  ASSERT_EQ(request.fields.size(), 1u);
  EXPECT_EQ(request.fields[0].value, "7");
}

TEST(ParseRequest, ErrorsCarryAReasonForTheLog) {
  Request request;
  RequestParseResult result = parse_exact("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", request);
  ASSERT_EQ(result.status, ParseStatus::invalid);
  EXPECT_FALSE(result.error_reason.empty());
}

TEST(ParseRequest, ValidRequestsAreIncompleteAtEveryPrefix) {
  for (std::string_view head : {
           "GET http://example.com/index.html HTTP/1.1\r\nHost: example.com\r\n"
           "User-Agent: test\r\nAccept: */*\r\n\r\n"sv,
           "GET / HTTP/1.0\r\n\r\n"sv,
           "CONNECT example.com:443 HTTP/1.1\r\nX-Empty:\r\n\r\n"sv,
       }) {
    SCOPED_TRACE(printable(head));
    expect_incomplete_at_every_prefix(head);
    EXPECT_EQ(request_verdict(head), "complete");
  }
}

// ---- parse_request: size limits (RFC 9112 §3, RFC 6585 §5) -----------------------------------

constexpr RequestLimits kSmall{/*max_request_line=*/32, /*max_header_bytes=*/128,
                               /*max_header_fields=*/3};

// "GET /aaa…a HTTP/1.1" of exactly `bytes` bytes, CRLF excluded.
std::string request_line_of(std::size_t bytes) {
  constexpr std::size_t kFixed = std::string_view("GET / HTTP/1.1").size();
  return "GET /" + std::string(bytes - kFixed, 'a') + " HTTP/1.1";
}

// A request head of exactly `bytes` bytes, blank line included, padded in one field value.
std::string head_of(std::size_t bytes) {
  constexpr std::string_view kLine = "GET / HTTP/1.1\r\n";
  constexpr std::size_t kFixed = kLine.size() + std::string_view("X: \r\n\r\n").size();
  return std::string(kLine) + "X: " + std::string(bytes - kFixed, 'v') + "\r\n\r\n";
}

// A request head with `count` fields.
std::string head_with_fields(std::size_t count) {
  std::string head = "GET / HTTP/1.1\r\n";
  for (std::size_t i = 0; i < count; ++i) head += "X-" + std::to_string(i) + ": v\r\n";
  return head + "\r\n";
}

TEST(ParseRequestLimits, RequestLineOfExactlyTheLimitParses) {
  EXPECT_EQ(request_verdict(request_line_of(32) + "\r\n\r\n", kSmall), "complete");
}

TEST(ParseRequestLimits, RequestLineOfExactlyTheLimitIsIncompleteAtEveryPrefix) {
  // Includes the prefix that ends in the line's CR: the CR is not part of the line.
  expect_incomplete_at_every_prefix(request_line_of(32) + "\r\n\r\n", kSmall);
}

TEST(ParseRequestLimits, CompleteRequestLineOneByteOverIs414) {
  EXPECT_EQ(request_verdict(request_line_of(33) + "\r\n\r\n", kSmall), "invalid 414");
}

TEST(ParseRequestLimits, UnfinishedRequestLineOverTheLimitIs414WithoutWaitingForCrlf) {
  EXPECT_EQ(request_verdict(request_line_of(33), kSmall), "invalid 414");
  EXPECT_EQ(request_verdict(request_line_of(33) + "\r", kSmall), "invalid 414");
}

TEST(ParseRequestLimits, DefaultLimitAllows8KiBRequestLineAndRefusesOneMore) {
  EXPECT_EQ(request_verdict(request_line_of(std::size_t{8} * 1024) + "\r\n\r\n"), "complete");
  EXPECT_EQ(request_verdict(request_line_of(std::size_t{8} * 1024 + 1) + "\r\n\r\n"),
            "invalid 414");
  EXPECT_EQ(request_verdict(request_line_of(std::size_t{100} * 1024)), "invalid 414");
}

TEST(ParseRequestLimits, HeadOfExactlyTheLimitParsesAndIsIncompleteBefore) {
  const std::string head = head_of(128);
  ASSERT_EQ(head.size(), 128u);
  EXPECT_EQ(request_verdict(head, kSmall), "complete");
  expect_incomplete_at_every_prefix(head, kSmall);
}

TEST(ParseRequestLimits, CompleteHeadOneByteOverIs431) {
  EXPECT_EQ(request_verdict(head_of(129), kSmall), "invalid 431");
}

TEST(ParseRequestLimits, UnfinishedHeadOverTheLimitIs431WithoutWaitingForTheBlankLine) {
  const std::string head = head_of(400);
  EXPECT_EQ(request_verdict(std::string_view(head).substr(0, 129), kSmall), "invalid 431");
  EXPECT_EQ(request_verdict(std::string_view(head).substr(0, 300), kSmall), "invalid 431");
}

TEST(ParseRequestLimits, DefaultLimitRefusesHeadOver32KiB) {
  EXPECT_EQ(request_verdict(head_of(std::size_t{32} * 1024)), "complete");
  EXPECT_EQ(request_verdict(head_of(std::size_t{32} * 1024 + 1)), "invalid 431");
}

TEST(ParseRequestLimits, FieldCountAtTheLimitParsesAndOneMoreIs431) {
  EXPECT_EQ(request_verdict(head_with_fields(3), kSmall), "complete");
  EXPECT_EQ(request_verdict(head_with_fields(4), kSmall), "invalid 431");
}

TEST(ParseRequestLimits, TooManyFieldsIs431BeforeTheHeadEnds) {
  std::string head = head_with_fields(4);
  head.resize(head.size() - 2);  // drop the blank line
  EXPECT_EQ(request_verdict(head, kSmall), "invalid 431");
}

TEST(ParseRequestLimits, DefaultLimitAllows100Fields) {
  EXPECT_EQ(request_verdict(head_with_fields(100)), "complete");
  EXPECT_EQ(request_verdict(head_with_fields(101)), "invalid 431");
}

// RFC 9112 §2.2: empty lines before a request line are skipped, whole CRLF pairs only.
TEST(LeadingEmptyLines, CountsWholeCrlfPairsBeforeTheRequestLine) {
  EXPECT_EQ(leading_empty_lines("GET / HTTP/1.1\r\n"), 0u);
  EXPECT_EQ(leading_empty_lines("\r\nGET / HTTP/1.1\r\n"), 2u);
  EXPECT_EQ(leading_empty_lines("\r\n\r\n\r"), 4u) << "a lone CR may start the next pair";
  EXPECT_EQ(leading_empty_lines("\n\nGET"), 0u) << "bare LFs are not skipped: the parser rejects them";
  EXPECT_EQ(leading_empty_lines(""), 0u);
}

}  // namespace
}  // namespace proxy
