// The field helpers (common/http/http_message.h): find_field, field_has_token, split_list and
// count_fields, over field lines as a parsed head holds them.
#include "http/http_message.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "exact_buffer.h"

namespace proxy {
namespace {

using test::ExactBuffer;
using test::printable;

// Field lines as a parsed head holds them; Connection and Accept each appear twice.
const HeaderFields& sample_fields() {
  static const HeaderFields fields = {
      {"Host", "example.com"},  //
      {"Connection", "keep-alive, X-Trace"},
      {"connection", "Upgrade"},
      {"Accept", "text/html"},
      {"X-Empty", ""},
      {"accept", "image/png"},
  };
  return fields;
}

TEST(FindField, MatchesNameCaseInsensitively) {
  EXPECT_EQ(find_field(sample_fields(), "HOST"), "example.com");
  EXPECT_EQ(find_field(sample_fields(), "host"), "example.com");
}

TEST(FindField, ReturnsTheFirstOfRepeatedFields) {
  EXPECT_EQ(find_field(sample_fields(), "Accept"), "text/html");
}

TEST(FindField, MissingFieldIsNulloptButEmptyValueIsFound) {
  EXPECT_EQ(find_field(sample_fields(), "Cookie"), std::nullopt);
  EXPECT_EQ(find_field(sample_fields(), "Hos"), std::nullopt);
  EXPECT_EQ(find_field(sample_fields(), "X-Empty"), "");
  EXPECT_EQ(find_field({}, "Host"), std::nullopt);
}

TEST(FieldHasToken, FindsTokenInAnyListElementCaseInsensitively) {
  EXPECT_TRUE(field_has_token(sample_fields(), "Connection", "keep-alive"));
  EXPECT_TRUE(field_has_token(sample_fields(), "CONNECTION", "x-trace"));
}

TEST(FieldHasToken, LooksInEveryOccurrenceOfTheField) {
  EXPECT_TRUE(field_has_token(sample_fields(), "Connection", "upgrade"));
}

TEST(FieldHasToken, NeedsAWholeElementOfTheNamedField) {
  EXPECT_FALSE(field_has_token(sample_fields(), "Connection", "keep"));
  EXPECT_FALSE(field_has_token(sample_fields(), "Connection", "close"));
  EXPECT_FALSE(field_has_token(sample_fields(), "Connection", "keep-alive, X-Trace"));
  EXPECT_FALSE(field_has_token(sample_fields(), "Accept", "keep-alive"));
  EXPECT_FALSE(field_has_token(sample_fields(), "Keep-Alive", "keep-alive"));
}

struct SplitCase {
  std::string_view value;
  std::vector<std::string_view> items;
};

TEST(SplitList, TrimsAndDropsEmptyElements) {
  const SplitCase cases[] = {
      {"", {}},
      {"  ", {}},
      {",", {}},
      {"chunked", {"chunked"}},
      {"gzip, chunked", {"gzip", "chunked"}},
      {" gzip ,chunked ", {"gzip", "chunked"}},
      {"a,,b", {"a", "b"}},
      {", a ,", {"a"}},
      {"a\t,\tb", {"a", "b"}},
      {"max-age=60, no cache", {"max-age=60", "no cache"}},
  };
  for (const SplitCase& c : cases) {
    ExactBuffer buffer(c.value);
    EXPECT_EQ(split_list(buffer.view()), c.items) << "value: \"" << printable(c.value) << '"';
  }
}

TEST(CountFields, CountsEveryLineOfANameWhateverItsCaseOrValue_Rfc9112_3_2) {
  const HeaderFields fields = {{"Host", "a"}, {"Accept", "*/*"}, {"host", "a"}, {"HOST", "b"}};
  EXPECT_EQ(count_fields(fields, "Host"), 3u);
  EXPECT_EQ(count_fields(fields, "Accept"), 1u);
  EXPECT_EQ(count_fields(fields, "Via"), 0u);
}

TEST(CountFields, TheParserKeepsEveryHostLineOfAnAbsoluteFormRequest_Rfc9112_3_2) {
  // The proxy answers 400 to more than one Host line, so the parser must not fold them into one.
  for (const char* second : {"Host: b.example\r\n", "Host: a.example\r\n"}) {
    const std::string text = std::string("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n") +
                             second + "\r\n";
    ExactBuffer buffer(text);
    Request request;
    ASSERT_EQ(parse_request(buffer.view(), request).status, ParseStatus::complete) << second;
    EXPECT_EQ(count_fields(request.fields, "Host"), 2u) << second;
  }
}

}  // namespace
}  // namespace proxy
