// Lab 1's hidden tests (labs/manifest.json): run by the grader (make grade LAB=1), never shipped
// in a handout (make handout leaves this file out). Cases a student's parser, rewriter, decoder
// and LRU cache meet in real traffic but the visible tests do not spell out.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "cache/cache.h"
#include "cache/lru_cache.h"
#include "http/body_reader.h"
#include "http/http_message.h"
#include "http/rewrite.h"
#include "http/uri.h"

namespace proxy {
namespace {

constexpr std::string_view kHead = "HTTP/1.1 200 OK\r\n";

std::shared_ptr<const CachedResponse> charging(std::string_view key, std::size_t bytes) {
  return std::make_shared<const CachedResponse>(
      CachedResponse{std::string(kHead), std::string(bytes - key.size() - kHead.size(), 'x')});
}

TEST(Lab1HiddenLru, ALargeEntryEvictsAsManyOldEntriesAsItNeedsOldestFirst) {
  LruCache cache(400, 400);
  for (const char* key : {"a", "b", "c", "d"}) ASSERT_TRUE(cache.insert(key, charging(key, 100)));
  ASSERT_NE(cache.find("a"), nullptr);  // a is now the most recently used
  ASSERT_TRUE(cache.insert("big", charging("big", 250)));  // needs b, c and d gone
  EXPECT_NE(cache.find("a"), nullptr);
  EXPECT_EQ(cache.find("b"), nullptr);
  EXPECT_EQ(cache.find("c"), nullptr);
  EXPECT_EQ(cache.find("d"), nullptr);
  EXPECT_EQ(cache.stats().bytes, 350u);
  EXPECT_EQ(cache.stats().evictions, 3u);
}

TEST(Lab1HiddenLru, ReplacingAKeyChargesOnlyItsNewSize) {
  LruCache cache(1000, 1000);
  ASSERT_TRUE(cache.insert("k", charging("k", 300)));
  ASSERT_TRUE(cache.insert("k", charging("k", 200)));
  EXPECT_EQ(cache.stats().bytes, 200u);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.find("k")->body.size(), 200u - 1u - kHead.size());
}

TEST(Lab1HiddenParse, ARequestArrivingInPiecesIsIncompleteUntilItsBlankLine) {
  const std::string full = "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n";
  for (std::size_t cut = 1; cut < full.size(); ++cut) {
    Request request;
    EXPECT_EQ(parse_request(std::string_view(full).substr(0, cut), request).status,
              ParseStatus::incomplete)
        << "cut after " << cut << " bytes";
  }
  Request request;
  RequestParseResult r = parse_request(full + "GET next", request);
  ASSERT_EQ(r.status, ParseStatus::complete);
  EXPECT_EQ(r.consumed, full.size());
  EXPECT_EQ(request.target, "http://example.com/x");
}

TEST(Lab1HiddenRewrite, DropsTheFieldsTheClientListedInConnection) {
  Request request;
  request.method = "GET";
  request.target = "http://example.com:8080/p?q=1";
  request.version_minor = 1;
  request.fields = {{"Connection", "X-Secret, keep-alive"}, {"X-Secret", "1"}, {"Accept", "*/*"}};
  std::optional<AbsoluteUri> uri = parse_absolute_uri(request.target);
  ASSERT_TRUE(uri);
  const std::string out = build_origin_request(request, *uri, "");
  EXPECT_EQ(out.rfind("GET /p?q=1 HTTP/1.1\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("Host: example.com:8080\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("X-Secret"), std::string::npos) << out;
  EXPECT_NE(out.find("Accept: */*\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Connection: close\r\n\r\n"), std::string::npos) << out;
}

TEST(Lab1HiddenRelay, AChunkedBodyFedOneByteAtATimeDecodesExactly) {
  const std::string wire = "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nTrailer: x\r\n\r\n";
  BodyFraming framing;
  framing.kind = BodyKind::chunked;
  BodyReader reader(framing);
  std::string body;
  bool done = false;
  for (std::size_t i = 0; i < wire.size(); ++i) {
    BodyReader::Result r = reader.feed(std::string_view(wire).substr(i, 1), body);
    ASSERT_FALSE(r.error) << "at byte " << i;
    done = r.done;
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(body, "hello, world");
}

}  // namespace
}  // namespace proxy
