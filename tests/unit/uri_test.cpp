// parse_absolute_uri and the cache key derived from it (common/http/uri.h). Each target sits in an
// exactly-sized heap buffer, so a read past its end fails under AddressSanitizer.
#include "http/uri.h"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "exact_buffer.h"

namespace proxy {
namespace {

using namespace std::string_view_literals;
using test::ExactBuffer;
using test::printable;

std::optional<AbsoluteUri> parse_exact(std::string_view target) {
  ExactBuffer buffer(target);
  return parse_absolute_uri(buffer.view());
}

// ---- targets that parse: one line each ---------------------------------------------------------

struct ParsedCase {
  const char* name;
  std::string_view target;
  const char* scheme;
  const char* host;
  std::uint16_t port;
  const char* path_and_query;
  const char* authority;
  const char* cache_key;
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const ParsedCase& c, std::ostream* os) {
  *os << c.name << ": " << printable(c.target);
}

// clang-format off
constexpr ParsedCase kParsedCases[] = {
    {"PlainHttp", "http://example.com/index.html", "http", "example.com", 80, "/index.html", "example.com", "http://example.com/index.html"},
    {"SchemeAndHostLowerCasedPathKept", "HTTP://Example.COM/Path/To", "http", "example.com", 80, "/Path/To", "example.com", "http://example.com/Path/To"},
    {"DefaultPortDroppedFromKey", "http://example.com:80/x", "http", "example.com", 80, "/x", "example.com", "http://example.com/x"},
    {"EmptyPortMeansDefault", "http://example.com:/x", "http", "example.com", 80, "/x", "example.com", "http://example.com/x"},
    {"ExplicitPortKept", "http://example.com:8080/x", "http", "example.com", 8080, "/x", "example.com:8080", "http://example.com:8080/x"},
    {"LeadingZerosInPort", "http://example.com:0080/x", "http", "example.com", 80, "/x", "example.com", "http://example.com/x"},
    {"HighestPort", "http://example.com:65535/", "http", "example.com", 65535, "/", "example.com:65535", "http://example.com:65535/"},
    {"Ipv4Literal", "http://127.0.0.1:3128/a", "http", "127.0.0.1", 3128, "/a", "127.0.0.1:3128", "http://127.0.0.1:3128/a"},
    {"Ipv6LiteralWithPort", "http://[::1]:8080/x", "http", "::1", 8080, "/x", "[::1]:8080", "http://[::1]:8080/x"},
    {"Ipv6LiteralDefaultPort", "http://[::1]/", "http", "::1", 80, "/", "[::1]", "http://[::1]/"},
    {"Ipv6LiteralLowerCased", "http://[2001:DB8::A]:80/", "http", "2001:db8::a", 80, "/", "[2001:db8::a]", "http://[2001:db8::a]/"},
    {"EmptyPathBecomesSlash", "http://example.com", "http", "example.com", 80, "/", "example.com", "http://example.com/"},
    {"QueryWithoutPathGetsSlash", "http://h?x=1", "http", "h", 80, "/?x=1", "h", "http://h/?x=1"},
    {"QueryKept", "http://h/search?q=a&b=C", "http", "h", 80, "/search?q=a&b=C", "h", "http://h/search?q=a&b=C"},
    {"FragmentDropped", "http://h/page?q=1#section", "http", "h", 80, "/page?q=1", "h", "http://h/page?q=1"},
    {"FragmentOnlyDropped", "http://h#top", "http", "h", 80, "/", "h", "http://h/"},
    {"AtSignInPathIsNotUserinfo", "http://h/mail/a@b", "http", "h", 80, "/mail/a@b", "h", "http://h/mail/a@b"},
    {"HttpsWithExplicitPort", "https://example.com:443/x", "https", "example.com", 443, "/x", "example.com:443", "https://example.com:443/x"},
};
// clang-format on

class ParseAbsoluteUriAccepts : public ::testing::TestWithParam<ParsedCase> {};

TEST_P(ParseAbsoluteUriAccepts, NormalizesEveryPart) {
  const ParsedCase& c = GetParam();
  std::optional<AbsoluteUri> uri = parse_exact(c.target);
  ASSERT_TRUE(uri.has_value());
  EXPECT_EQ(uri->scheme, c.scheme);
  EXPECT_EQ(uri->host, c.host);
  EXPECT_EQ(uri->port, c.port);
  EXPECT_EQ(uri->path_and_query, c.path_and_query);
  EXPECT_EQ(uri->authority(), c.authority);
  EXPECT_EQ(uri->cache_key(), c.cache_key);
}

INSTANTIATE_TEST_SUITE_P(Cases, ParseAbsoluteUriAccepts, ::testing::ValuesIn(kParsedCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- targets refused: one line each -----------------------------------------------------------

struct RefusedCase {
  const char* name;
  std::string_view target;
};

// GoogleTest looks this name up to print a value.
// NOLINTNEXTLINE(readability-identifier-naming)
void PrintTo(const RefusedCase& c, std::ostream* os) {
  *os << c.name << ": " << printable(c.target);
}

// clang-format off
constexpr RefusedCase kRefusedCases[] = {
    {"OriginForm", "/x"},
    {"AsteriskForm", "*"},
    {"AuthorityForm", "example.com:443"},
    {"Empty", ""},
    {"HttpsWithoutPort", "https://example.com/x"},
    {"HttpsWithEmptyPort", "https://example.com:/x"},
    {"Userinfo", "http://user@example.com/"},
    {"UserinfoWithPassword", "http://user:secret@example.com/"},
    {"PortZero", "http://example.com:0/"},
    {"Port65536", "http://example.com:65536/"},
    {"PortSixDigits", "http://example.com:100080/"},
    {"PortWithLetter", "http://example.com:8a/"},
    {"NegativePort", "http://example.com:-80/"},
    {"TwoPorts", "http://example.com:80:81/"},
    {"Ipv6PortWithLetter", "http://[::1]:8a/"},
    {"NoHost", "http:///x"},
    {"NoHostWithPort", "http://:80/x"},
    {"NothingAfterScheme", "http://"},
    {"SingleSlash", "http:/example.com/x"},
    {"NoScheme", "://example.com/"},
    {"SchemeStartsWithDigit", "1http://example.com/"},
    {"SchemeWithUnderscore", "ht_tp://example.com/"},
    {"SpaceInPath", "http://example.com/a b"},
    {"TabInPath", "http://example.com/a\tb"},
    {"ControlCharInPath", "http://example.com/a\001b"},
    {"NulInHost", "http://exa\000mple.com/"sv},
    {"DelInPath", "http://example.com/\177"},
    {"PercentInHost", "http://exa%41mple.com/"},
    {"UnclosedIpv6", "http://[::1/"},
    {"EmptyIpv6", "http://[]/"},
    {"JunkAfterIpv6", "http://[::1]x/"},
    {"Ipv6ZoneId", "http://[fe80::1%25eth0]/"},
    {"Ipv6WithoutBrackets", "http://::1/"},
};
// clang-format on

class ParseAbsoluteUriRefuses : public ::testing::TestWithParam<RefusedCase> {};

TEST_P(ParseAbsoluteUriRefuses, ReturnsNullopt) {
  std::optional<AbsoluteUri> uri = parse_exact(GetParam().target);
  EXPECT_FALSE(uri.has_value()) << "parsed with cache key " << uri->cache_key();
}

INSTANTIATE_TEST_SUITE_P(Cases, ParseAbsoluteUriRefuses, ::testing::ValuesIn(kRefusedCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- authority() and cache_key() on their own -------------------------------------------------

TEST(AbsoluteUri, SpellingsOfOneResourceShareOneCacheKey) {
  const std::string key = parse_exact("http://example.com/a?b=1")->cache_key();
  for (std::string_view spelling : {"HTTP://EXAMPLE.COM/a?b=1", "http://example.com:80/a?b=1",
                                    "http://Example.Com:/a?b=1#frag"}) {
    std::optional<AbsoluteUri> uri = parse_exact(spelling);
    ASSERT_TRUE(uri.has_value()) << spelling;
    EXPECT_EQ(uri->cache_key(), key) << spelling;
  }
}

TEST(AbsoluteUri, DifferentPortPathCaseOrQueryMeansDifferentKey) {
  const std::string key = parse_exact("http://example.com/a?b=1")->cache_key();
  for (std::string_view other : {"http://example.com:8080/a?b=1", "http://example.com/A?b=1",
                                 "http://example.com/a?b=2", "http://example.com/a"}) {
    EXPECT_NE(parse_exact(other)->cache_key(), key) << other;
  }
}

TEST(AbsoluteUri, AuthorityBracketsIpv6AndAddsOnlyNonDefaultPorts) {
  AbsoluteUri uri;
  uri.scheme = "http";
  uri.host = "fe80::2";
  uri.port = 80;
  uri.path_and_query = "/";
  EXPECT_EQ(uri.authority(), "[fe80::2]");
  uri.port = 3128;
  EXPECT_EQ(uri.authority(), "[fe80::2]:3128");
  uri.host = "origin.test";
  EXPECT_EQ(uri.authority(), "origin.test:3128");
  EXPECT_EQ(uri.cache_key(), "http://origin.test:3128/");
}

}  // namespace
}  // namespace proxy
