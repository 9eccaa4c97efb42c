// RFC 9111 caching (docs/caching.md), against every stage: each test is one rule, named for it and
// citing its section. The origin's request count tells a hit (the origin never heard of the
// request) from a miss (it did) from a revalidation (it did, and answered 304, so the client
// gets the stored body). Nothing waits for time to pass: responses are stale on arrival
// (max-age=0, an Expires in the past, an origin Age over max-age) or fresh for a minute.
// /respond?h=NAME:VALUE sets any response field; its body echoes the request's header lines,
// so a body shows which request a stored response was fetched by.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "hardening_support.h"
#include "http/http_cache_rules.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

class HttpCaching : public StageTest {
 protected:
  // "/respond?h=F1&h=F2...", each field percent-encoded, plus `extra` query text as is.
  std::string respond(const std::vector<std::string>& fields, const std::string& extra = "") {
    std::string path = "/respond?";
    for (const std::string& field : fields) {
      path += "h=";
      for (unsigned char c : field) {
        if (std::isalnum(c) || c == ':' || c == '-' || c == '.' || c == '/') {
          path += static_cast<char>(c);
        } else {
          char escaped[4];
          std::snprintf(escaped, sizeof escaped, "%%%02X", c);
          path += escaped;
        }
      }
      path += '&';
    }
    return origin_url(path + extra);
  }
  HttpResponse get(const std::string& url, const std::vector<std::string>& fields = {}) {
    return exchange(proxy_port(), proxy_get(url, fields));
  }
  std::uint64_t origin_requests() const { return origin_->request_count("/respond"); }
};

constexpr const char* kHttpDatePast = "Thu, 01 Jan 2015 00:00:00 GMT";

TEST_P(HttpCaching, StoresA200WithoutFreshnessHeuristically_Rfc9111_4_2_2) {
  start_stage();
  const std::string url = respond({});
  HttpResponse first = get(url);
  HttpResponse second = get(url);
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(origin_requests(), 1u);
}

// CS:APP's tiny answers HTTP/1.0 with no Date, no Cache-Control and no Last-Modified: the
// response a Proxy Lab cache exists for. It is stored (heuristically fresh), and dated on the way
// through (RFC 9110 §6.6.1).
TEST_P(HttpCaching, StoresProxyLabTinysUndatedResponseAndDatesIt_Rfc9111_4_2_2) {
  RawOrigin tiny("HTTP/1.0 200 OK\r\nServer: Tiny Web Server\r\nContent-length: 5\r\n"
                 "Content-type: text/plain\r\n\r\nhello");
  start_stage();
  HttpResponse first = get(tiny.url("/home.html"));
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  EXPECT_EQ(first.body, "hello");
  EXPECT_TRUE(proxy::parse_http_date(first.field("Date")).has_value()) << first.field("Date");
  HttpResponse second = get(tiny.url("/home.html"));
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_EQ(second.body, "hello");
  EXPECT_EQ(second.field("Date"), first.field("Date"));
  EXPECT_EQ(tiny.connections(), 1);
}

TEST_P(HttpCaching, HeuristicFreshnessIsTenPercentOfTheTimeSinceLastModified_Rfc9111_4_2_2) {
  start_stage();
  // Modified in 2015: 10% of a decade is over the one-day cap, so fresh.
  const std::string old = respond({std::string("Last-Modified: ") + kHttpDatePast});
  EXPECT_EQ(get(old).field("X-Cache"), "MISS");
  EXPECT_EQ(get(old).field("X-Cache"), "HIT");
  EXPECT_EQ(origin_requests(), 1u);
  // Modified "after" its Date: no heuristic lifetime at all, so every use is revalidated with
  // If-Modified-Since (the origin answers 304) and served from the cache.
  const std::string just_changed = respond({"Last-Modified: Fri, 01 Jan 2100 00:00:00 GMT"});
  HttpResponse first = get(just_changed);
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  HttpResponse second = get(just_changed);
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(origin_requests(), 3u);
}

TEST_P(HttpCaching, HeuristicFreshnessZeroStoresOnlyExplicitlyFreshResponses_Rfc9111_4_2_2) {
  start_stage({"--heuristic-freshness-s", "0"});
  const std::string heuristic = origin_url("/bytes/100");
  EXPECT_EQ(fetch(proxy_port(), heuristic).field("X-Cache"), "MISS");
  EXPECT_EQ(fetch(proxy_port(), heuristic).field("X-Cache"), "MISS");
  EXPECT_EQ(origin_->request_count("/bytes/100"), 2u);
  const std::string explicit_fresh = origin_url("/cache/60");
  EXPECT_EQ(fetch(proxy_port(), explicit_fresh).field("X-Cache"), "MISS");
  EXPECT_EQ(fetch(proxy_port(), explicit_fresh).field("X-Cache"), "HIT");
  EXPECT_EQ(origin_->request_count("/cache/60"), 1u);
}

TEST_P(HttpCaching, ServesFreshByMaxAgeSMaxageOrExpiresWithAnAgeHeader_Rfc9111_4_2_1_and_5_1) {
  start_stage();
  const std::vector<std::string> urls = {
      respond({"Cache-Control: max-age=60"}),
      // A shared cache takes s-maxage over max-age.
      respond({"Cache-Control: max-age=0, s-maxage=60"}),
      respond({"Expires: Fri, 01 Jan 2100 00:00:00 GMT"}),
  };
  for (const std::string& url : urls) {
    HttpResponse first = get(url);
    EXPECT_EQ(first.field("X-Cache"), "MISS") << url;
    EXPECT_EQ(first.field("Age"), "") << "the origin sent no Age, so a miss has none";
    HttpResponse second = get(url);
    EXPECT_EQ(second.field("X-Cache"), "HIT") << url;
    EXPECT_THAT(second.field("Age"), MatchesRegex("[0-9]+")) << url;
    EXPECT_LT(std::stoi(second.field("Age")), 60) << url;
    EXPECT_EQ(second.body, first.body);
  }
  EXPECT_EQ(origin_requests(), urls.size());
}

TEST_P(HttpCaching, AgeOnAHitIncludesTheAgeTheOriginReported_Rfc9111_4_2_3) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=600", "Age: 100"});
  HttpResponse first = get(url);
  EXPECT_EQ(first.field("Age"), "100") << "a miss relays the origin's Age";
  HttpResponse second = get(url);
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_GE(std::stoi(second.field("Age")), 100);
  EXPECT_LT(std::stoi(second.field("Age")), 600);
}

TEST_P(HttpCaching, NeverServesAResponseStaleOnArrivalWithoutRevalidation_Rfc9111_4_2) {
  start_stage();
  const std::vector<std::string> urls = {
      respond({"Cache-Control: max-age=0"}),
      respond({std::string("Expires: ") + kHttpDatePast}),
      respond({"Expires: 0"}),  // an invalid Expires is in the past (§5.3)
      respond({"Cache-Control: max-age=60", "Age: 61"}),
  };
  for (const std::string& url : urls) {
    EXPECT_EQ(get(url).field("X-Cache"), "MISS") << url;
    EXPECT_EQ(get(url).field("X-Cache"), "MISS") << url;
  }
  EXPECT_EQ(origin_requests(), 2 * urls.size());
}

TEST_P(HttpCaching, NeverStoresNoStoreOrPrivateResponses_Rfc9111_5_2_2_5_and_5_2_2_7) {
  start_stage();
  const std::string no_store = origin_url("/no-store/100");
  EXPECT_EQ(fetch(proxy_port(), no_store).field("X-Cache"), "MISS");
  EXPECT_EQ(fetch(proxy_port(), no_store).field("X-Cache"), "MISS");
  EXPECT_EQ(origin_->request_count("/no-store/100"), 2u);
  const std::string private_url = respond({"Cache-Control: private, max-age=60"});
  EXPECT_EQ(get(private_url).field("X-Cache"), "MISS");
  EXPECT_EQ(get(private_url).field("X-Cache"), "MISS");
  EXPECT_EQ(origin_requests(), 2u);
}

TEST_P(HttpCaching, StoresAResponseToAnAuthorizedRequestOnlyWhenPublic_Rfc9111_3_5) {
  start_stage();
  const std::vector<std::string> auth = {"Authorization: Basic dXNlcjpwYXNz"};
  const std::string plain = respond({"Cache-Control: max-age=60"});
  EXPECT_EQ(get(plain, auth).field("X-Cache"), "MISS");
  EXPECT_EQ(get(plain, auth).field("X-Cache"), "MISS");
  EXPECT_EQ(origin_requests(), 2u);
  const std::string shared = respond({"Cache-Control: public, max-age=60"});
  EXPECT_EQ(get(shared, auth).field("X-Cache"), "MISS");
  EXPECT_EQ(get(shared, auth).field("X-Cache"), "HIT");
  EXPECT_EQ(origin_requests(), 3u);
}

TEST_P(HttpCaching, NeverStoresAResponseThatSetsACookie) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60", "Set-Cookie: session=42"});
  EXPECT_EQ(get(url).field("X-Cache"), "MISS");
  HttpResponse second = get(url);
  EXPECT_EQ(second.field("X-Cache"), "MISS");
  EXPECT_EQ(second.field("Set-Cookie"), "session=42");
  EXPECT_EQ(origin_requests(), 2u);
}

TEST_P(HttpCaching, VaryKeysTheStoredVariantOnTheNamedRequestFields_Rfc9111_4_1) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60", "Vary: Accept"});
  const std::vector<std::string> html = {"Accept: text/html"};
  const std::vector<std::string> png = {"Accept: image/png"};
  HttpResponse first = get(url, html);
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  HttpResponse same = get(url, html);
  EXPECT_EQ(same.field("X-Cache"), "HIT");
  EXPECT_THAT(same.body, HasSubstr("Accept: text/html"));
  HttpResponse other = get(url, png);
  EXPECT_EQ(other.field("X-Cache"), "MISS") << "another Accept must not get the html variant";
  EXPECT_THAT(other.body, HasSubstr("Accept: image/png"));
  HttpResponse none = get(url);
  EXPECT_EQ(none.field("X-Cache"), "MISS") << "no Accept at all is another variant too";
  EXPECT_EQ(origin_requests(), 3u);
}

TEST_P(HttpCaching, NeverStoresVaryStar_Rfc9111_4_1) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60", "Vary: *"});
  EXPECT_EQ(get(url).field("X-Cache"), "MISS");
  EXPECT_EQ(get(url).field("X-Cache"), "MISS");
  EXPECT_EQ(origin_requests(), 2u);
}

TEST_P(HttpCaching, RangeRequestsAnd206ResponsesBypassTheCache_Rfc9111_3_3_and_3_4) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60"});
  HttpResponse whole = get(url);
  EXPECT_EQ(get(url).field("X-Cache"), "HIT");
  // A Range request is forwarded, not answered with the whole stored object...
  HttpResponse ranged = get(url, {"Range: bytes=0-3"});
  EXPECT_EQ(ranged.field("X-Cache"), "MISS");
  EXPECT_EQ(origin_requests(), 2u);
  // ...and what answers it does not replace the whole object.
  HttpResponse again = get(url);
  EXPECT_EQ(again.field("X-Cache"), "HIT");
  EXPECT_EQ(again.body, whole.body);
  // A 206 is never stored as the object.
  const std::string partial =
      respond({"Cache-Control: max-age=60", "Content-Range: bytes 0-3/100"}, "status=206");
  EXPECT_EQ(get(partial).status, 206);
  HttpResponse partial_again = get(partial);
  EXPECT_EQ(partial_again.status, 206);
  EXPECT_EQ(partial_again.field("X-Cache"), "MISS");
  EXPECT_EQ(origin_requests(), 4u);
}

TEST_P(HttpCaching, RequestNoCacheRevalidatesTheStoredResponse_Rfc9111_5_2_1_4) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60", "ETag: \"v1\""});
  HttpResponse first = get(url);
  ASSERT_EQ(first.field("X-Cache"), "MISS");
  for (std::string no_cache : {"Cache-Control: no-cache", "Pragma: no-cache"}) {
    HttpResponse revalidated = get(url, {no_cache});
    EXPECT_EQ(revalidated.status, 200) << no_cache;
    EXPECT_EQ(revalidated.field("X-Cache"), "HIT") << "a 304 serves the stored body: " << no_cache;
    // The stored body echoes the first request: the origin's 304 sent no body of its own.
    EXPECT_EQ(revalidated.body, first.body) << no_cache;
    EXPECT_THAT(revalidated.body, Not(HasSubstr("no-cache")));
  }
  EXPECT_EQ(origin_requests(), 3u) << "each no-cache request reached the origin";
  EXPECT_EQ(get(url).field("X-Cache"), "HIT");
  EXPECT_EQ(origin_requests(), 3u);
}

TEST_P(HttpCaching, RequestNoStoreKeepsTheResponseOutOfTheCache_Rfc9111_5_2_1_5) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60"});
  EXPECT_EQ(get(url, {"Cache-Control: no-store"}).field("X-Cache"), "MISS");
  EXPECT_EQ(get(url).field("X-Cache"), "MISS");
  EXPECT_EQ(get(url).field("X-Cache"), "HIT");
  EXPECT_EQ(origin_requests(), 2u);
}

TEST_P(HttpCaching, OnlyIfCachedGets504UnlessAFreshResponseIsStored_Rfc9111_5_2_1_7) {
  start_stage();
  const std::string url = respond({"Cache-Control: max-age=60"});
  EXPECT_EQ(get(url, {"Cache-Control: only-if-cached"}).status, 504);
  EXPECT_EQ(origin_requests(), 0u);
  get(url);
  HttpResponse hit = get(url, {"Cache-Control: only-if-cached"});
  EXPECT_EQ(hit.status, 200);
  EXPECT_EQ(hit.field("X-Cache"), "HIT");
  EXPECT_EQ(origin_requests(), 1u);
}

TEST_P(HttpCaching, AStaleEntryIsRevalidatedAndA304RefreshesIt_Rfc9111_4_3) {
  start_stage();
  // Stale on arrival, with a validator; the 304 makes it fresh for a minute and updates a field.
  const std::string url =
      respond({"Cache-Control: max-age=0", "ETag: \"v1\"", "X-Version: 1"},
              "h304=Cache-Control:max-age%3D60&h304=X-Version:2");
  HttpResponse first = get(url);
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  EXPECT_EQ(first.field("X-Version"), "1");
  HttpResponse revalidated = get(url);
  EXPECT_EQ(revalidated.status, 200);
  EXPECT_EQ(revalidated.field("X-Cache"), "HIT");
  EXPECT_EQ(revalidated.field("X-Version"), "2") << "the 304's fields update the stored ones";
  // Age counts from the 304 (whole seconds: a second may tick during the exchange).
  EXPECT_LE(std::stoi(revalidated.field("Age")), 5);
  EXPECT_EQ(revalidated.body, first.body);
  EXPECT_EQ(origin_requests(), 2u);
  HttpResponse fresh = get(url);
  EXPECT_EQ(fresh.field("X-Cache"), "HIT");
  EXPECT_EQ(fresh.field("X-Version"), "2");
  EXPECT_EQ(origin_requests(), 2u) << "refreshed: fresh again without asking the origin";
}

TEST_P(HttpCaching, RevalidatesWithIfModifiedSinceWhenThereIsNoETag_Rfc9111_4_3_1) {
  start_stage();
  const std::string url =
      respond({"Cache-Control: max-age=0", std::string("Last-Modified: ") + kHttpDatePast});
  HttpResponse first = get(url);
  HttpResponse second = get(url);
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_EQ(second.body, first.body);
  EXPECT_EQ(origin_requests(), 2u);
}

TEST_P(HttpCaching, RevalidatesWithTheStoredValidatorNotTheClients_Rfc9111_4_3_1) {
  start_stage();
  // The harness's /cache/0 answers If-None-Match with 304; a client's own different validator
  // is replaced by the stored one, so the stored response is what it gets.
  const std::string url = origin_url("/cache/0");
  EXPECT_EQ(fetch(proxy_port(), url).field("X-Cache"), "MISS");
  HttpResponse second = get(url, {"If-None-Match: \"something-else\""});
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.field("X-Cache"), "HIT");
  EXPECT_EQ(origin_->request_count("/cache/0"), 2u);
}

TEST_P(HttpCaching, ResponseNoCacheIsStoredButRevalidatedOnEveryUse_Rfc9111_5_2_2_4) {
  start_stage();
  const std::string url = respond({"Cache-Control: no-cache", "ETag: \"n\""});
  HttpResponse first = get(url);
  EXPECT_EQ(first.field("X-Cache"), "MISS");
  for (int i = 0; i < 2; ++i) {
    HttpResponse again = get(url);
    EXPECT_EQ(again.field("X-Cache"), "HIT");
    EXPECT_EQ(again.body, first.body);
  }
  EXPECT_EQ(origin_requests(), 3u);
}

TEST_P(HttpCaching, IgnoresUnknownCacheControlExtensions_Rfc9111_5_2_3) {
  start_stage();
  const std::string url =
      respond({"Cache-Control: x-unknown=\"a, b\", max-age=60, community=UCI, immutable"});
  EXPECT_EQ(get(url).field("X-Cache"), "MISS");
  EXPECT_EQ(get(url, {"Cache-Control: x-whatever, max-stale=5"}).field("X-Cache"), "HIT");
  EXPECT_EQ(origin_requests(), 1u);
}

TEST_P(HttpCaching, DocumentsTheHeuristicFreshnessFlag) {
  const harness::CommandOutput help = help_output(GetParam());
  ASSERT_TRUE(help.started);
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.text, HasSubstr("--heuristic-freshness-s"));
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HttpCaching);
INSTANTIATE_TEST_SUITE_P(Stages, HttpCaching, ::testing::ValuesIn(built_stages()), stage_name);

}  // namespace
}  // namespace testing_support
