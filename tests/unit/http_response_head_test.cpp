// parse_response_head (common/http/http_message.h): one line per case, what a complete head yields,
// the head size limit. Every input sits in an exactly-sized heap buffer, so a read past its end
// fails under AddressSanitizer.
#include "http/http_message.h"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <string_view>

#include "exact_buffer.h"

namespace proxy {
namespace {

using namespace std::string_view_literals;
using test::ExactBuffer;
using test::printable;

// ---- parse_response_head -----------------------------------------------------------------------

// "complete", "incomplete" or "invalid" (an invalid head must say why, for the log).
std::string response_verdict(std::string_view input,
                             std::size_t max_head_bytes = std::size_t{64} * 1024) {
  ExactBuffer buffer(input);
  ResponseHead head;
  ResponseParseResult result = parse_response_head(buffer.view(), head, max_head_bytes);
  switch (result.status) {
    case ParseStatus::complete:
      return "complete";
    case ParseStatus::incomplete:
      return "incomplete";
    case ParseStatus::invalid:
      return result.error_reason.empty() ? "invalid, no reason" : "invalid";
  }
  return "?";
}

struct ResponseCase {
  const char* name;
  std::string_view input;
  const char* expected;  // "complete", "incomplete" or "invalid"
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const ResponseCase& c, std::ostream* os) {
  *os << c.name << ": " << printable(c.input);
}

// clang-format off
constexpr ResponseCase kResponseCases[] = {
    {"OkWithReason", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "complete"},
    {"Http10NotFound", "HTTP/1.0 404 Not Found\r\n\r\n", "complete"},
    {"EmptyReasonAfterSpace", "HTTP/1.1 204 \r\n\r\n", "complete"},
    {"NoReasonNoSpace", "HTTP/1.1 204\r\n\r\n", "complete"},
    {"Http20IsInvalid", "HTTP/2.0 200 OK\r\n\r\n", "invalid"},
    {"LowerCaseVersionIsInvalid", "http/1.1 200 OK\r\n\r\n", "invalid"},
    {"FourDigitStatusIsInvalid", "HTTP/1.1 2000 OK\r\n\r\n", "invalid"},
    {"TwoDigitStatusIsInvalid", "HTTP/1.1 20 OK\r\n\r\n", "invalid"},
    {"LetterInStatusIsInvalid", "HTTP/1.1 2x0 OK\r\n\r\n", "invalid"},
    {"DoubleSpaceIsInvalid", "HTTP/1.1  200 OK\r\n\r\n", "invalid"},
    {"ControlCharInReasonIsInvalid", "HTTP/1.1 200 O\001K\r\n\r\n", "invalid"},
    {"BareLfIsInvalid", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", "invalid"},
    {"ObsoleteFoldingIsInvalid", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", "invalid"},
    {"SpaceBeforeColonIsInvalid", "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", "invalid"},
    {"NulInFieldValueIsInvalid", "HTTP/1.1 200 OK\r\nX: a\000b\r\n\r\n"sv, "invalid"},
    {"StatusLineWithoutCrlfIsIncomplete", "HTTP/1.1 200 OK", "incomplete"},
    {"HeadWithoutBlankLineIsIncomplete", "HTTP/1.1 200 OK\r\nServer: x\r\n", "incomplete"},
};
// clang-format on

class ParseResponseTable : public ::testing::TestWithParam<ResponseCase> {};

TEST_P(ParseResponseTable, GivesTheExpectedVerdict) {
  EXPECT_EQ(response_verdict(GetParam().input), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(Cases, ParseResponseTable, ::testing::ValuesIn(kResponseCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParseResponseHead, FillsVersionStatusReasonAndFields) {
  constexpr std::string_view kHead =
      "HTTP/1.0 404 Not Found\r\nContent-Type: text/html\r\nContent-Length:  3 \r\n\r\n";
  ExactBuffer buffer(std::string(kHead) + "abc");
  ResponseHead head;
  ResponseParseResult result = parse_response_head(buffer.view(), head);
  ASSERT_EQ(result.status, ParseStatus::complete);
  EXPECT_EQ(result.consumed, kHead.size());
  EXPECT_EQ(head.version_minor, 0);
  EXPECT_EQ(head.status, 404);
  EXPECT_EQ(head.reason, "Not Found");
  ASSERT_EQ(head.fields.size(), 2u);
  EXPECT_EQ(head.fields[0].name, "Content-Type");
  EXPECT_EQ(head.fields[1].value, "3");
}

TEST(ParseResponseHead, EmptyReasonGivesEmptyString) {
  ExactBuffer buffer("HTTP/1.1 304\r\n\r\n");
  ResponseHead head;
  head.reason = "stale";
  ASSERT_EQ(parse_response_head(buffer.view(), head).status, ParseStatus::complete);
  EXPECT_EQ(head.status, 304);
  EXPECT_EQ(head.reason, "");
}

TEST(ParseResponseHead, ValidHeadIsIncompleteAtEveryPrefix) {
  constexpr std::string_view kHead =
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Control: max-age=60\r\n\r\n";
  for (std::size_t n = 0; n < kHead.size(); ++n) {
    EXPECT_EQ(response_verdict(kHead.substr(0, n)), "incomplete") << "prefix of " << n << " bytes";
  }
  EXPECT_EQ(response_verdict(kHead), "complete");
}

TEST(ParseResponseHead, HeadOverMaxHeadBytesIsInvalidCompleteOrNot) {
  constexpr std::string_view kHead = "HTTP/1.1 200 OK\r\nServer: origin\r\n\r\n";
  EXPECT_EQ(response_verdict(kHead, kHead.size()), "complete");
  EXPECT_EQ(response_verdict(kHead, kHead.size() - 1), "invalid");
  EXPECT_EQ(response_verdict(kHead.substr(0, 30), 20), "invalid");
  EXPECT_EQ(response_verdict("HTTP/1.1 200 OK, and on and on without an end", 20), "invalid");
}

}  // namespace
}  // namespace proxy
