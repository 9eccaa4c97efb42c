// RFC 9111's rules as common/http/http_cache_rules.h implements them: dates, Cache-Control,
// freshness, age, the store decision, the use decision, Vary, conditional requests and 304 updates.
// Pure functions on parsed heads and explicit times, so no test needs a clock or a socket.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "http/http_cache_rules.h"

namespace proxy {
namespace {

constexpr UnixSeconds kNow = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example)
constexpr std::int64_t kHeuristic = 86'400;

Request get(HeaderFields fields = {}) {
  Request request;
  request.method = "GET";
  request.target = "http://example.org/x";
  request.fields = std::move(fields);
  return request;
}

HeaderFields dated(HeaderFields fields, UnixSeconds date = kNow) {
  fields.push_back({"Date", format_http_date(date)});
  return fields;
}

StoreDecision store(const Request& request, int status, const HeaderFields& fields,
                    std::int64_t heuristic = kHeuristic) {
  return decide_store(request, request_cache_rules(request), status, fields,
                      make_freshness(status, fields, kNow, kNow, heuristic));
}

CachedResponse stored(const HeaderFields& fields, const Request& request = get()) {
  CachedResponse entry;
  entry.head = stored_head_text(200, "OK", fields);
  entry.freshness = make_freshness(200, fields, kNow, kNow, kHeuristic).value();
  entry.vary = vary_fields(fields, request).value();
  return entry;
}

TEST(HttpDate, ParsesAllThreeFormsOfRfc9110Section5_6_7) {
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), kNow);
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), kNow);
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994"), kNow);
  EXPECT_EQ(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
}

TEST(HttpDate, RefusesMalformedDatesIncludingExpiresZero) {
  for (const char* bad : {"0", "", "Sun, 06 Nov 1994 08:49:37", "Sun, 31 Feb 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 25:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 08:49:37 GMT trailing", "tomorrow"}) {
    EXPECT_EQ(parse_http_date(bad), std::nullopt) << bad;
  }
}

TEST(HttpDate, FormatsImfFixdateThatParsesBack) {
  EXPECT_EQ(format_http_date(kNow), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(format_http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  for (UnixSeconds t : {UnixSeconds{951782400}, UnixSeconds{1764547200}, UnixSeconds{4102444799}}) {
    EXPECT_EQ(parse_http_date(format_http_date(t)), t);
  }
}

TEST(CacheControlParse, ReadsDirectivesCaseInsensitivelyAcrossLinesAndIgnoresUnknownOnes) {
  CacheControl cc = parse_cache_control(
      {{"Cache-Control", "PUBLIC, Max-Age=60, x-unknown=\"a, b\", immutable"},
       {"cache-control", "s-maxage=\"30\", must-revalidate, no-cache=\"Set-Cookie\""}});
  EXPECT_TRUE(cc.is_public);
  EXPECT_EQ(cc.max_age, 60);
  EXPECT_EQ(cc.s_maxage, 30);
  EXPECT_TRUE(cc.must_revalidate);
  EXPECT_TRUE(cc.no_cache) << "the qualified form counts as unqualified";
  EXPECT_FALSE(cc.no_store);
  EXPECT_FALSE(cc.malformed_age);
}

TEST(CacheControlParse, FirstValueWinsAndHugeValuesCapAt2To31) {
  CacheControl cc = parse_cache_control({{"Cache-Control", "max-age=10, max-age=99999999999999"}});
  EXPECT_EQ(cc.max_age, 10);
  EXPECT_EQ(parse_cache_control({{"Cache-Control", "max-age=99999999999999"}}).max_age,
            2147483648);
}

TEST(CacheControlParse, MarksANonNumericAgeMalformed) {
  EXPECT_TRUE(parse_cache_control({{"Cache-Control", "max-age=soon"}}).malformed_age);
  EXPECT_TRUE(parse_cache_control({{"Cache-Control", "s-maxage"}}).malformed_age);
}

TEST(RequestRules, RangeBypassesNoStoreForbidsStoringNoCacheAndPragmaForceRevalidation) {
  EXPECT_TRUE(request_cache_rules(get({{"Range", "bytes=0-9"}})).bypass);
  EXPECT_FALSE(request_cache_rules(get({{"Range", "bytes=0-9"}})).may_store);
  EXPECT_FALSE(request_cache_rules(get({{"Cache-Control", "no-store"}})).may_store);
  EXPECT_TRUE(request_cache_rules(get({{"Cache-Control", "no-cache"}})).must_revalidate);
  EXPECT_TRUE(request_cache_rules(get({{"Pragma", "no-cache"}})).must_revalidate);
  // RFC 9111 §5.4: Pragma is ignored when Cache-Control is present.
  EXPECT_FALSE(
      request_cache_rules(get({{"Cache-Control", "max-age=5"}, {"Pragma", "no-cache"}}))
          .must_revalidate);
  EXPECT_TRUE(request_cache_rules(get({{"Cache-Control", "only-if-cached"}})).only_if_cached);
  const RequestCacheRules plain = request_cache_rules(get());
  EXPECT_FALSE(plain.bypass);
  EXPECT_TRUE(plain.may_store);
  EXPECT_FALSE(plain.must_revalidate);
}

TEST(FreshnessLifetime, PrefersSMaxageThenMaxAgeThenExpiresMinusDate) {
  EXPECT_EQ(freshness_lifetime(200, {{"Cache-Control", "max-age=60, s-maxage=5"}}, kNow, 0), 5);
  EXPECT_EQ(freshness_lifetime(200, dated({{"Cache-Control", "max-age=60"},
                                           {"Expires", format_http_date(kNow + 500)}}),
                               kNow, 0),
            60);
  EXPECT_EQ(freshness_lifetime(200, dated({{"Expires", format_http_date(kNow + 500)}}, kNow - 100),
                               kNow, 0),
            600);
}

TEST(FreshnessLifetime, ExpiresInThePastOrInvalidIsStaleOnArrival) {
  EXPECT_EQ(freshness_lifetime(200, dated({{"Expires", format_http_date(kNow - 10)}}), kNow, 0),
            0);
  EXPECT_EQ(freshness_lifetime(200, dated({{"Expires", "0"}}), kNow, kHeuristic), 0);
  EXPECT_EQ(freshness_lifetime(200, {{"Cache-Control", "max-age=x"}}, kNow, kHeuristic), 0);
  EXPECT_EQ(freshness_lifetime(200, {{"Cache-Control", "max-age=60, no-cache"}}, kNow, 0), 0);
}

TEST(FreshnessLifetime, HeuristicIsTenPercentSinceLastModifiedCappedOrTheFlagItself) {
  // RFC 9111 §4.2.2: 10% of the time since Last-Modified.
  EXPECT_EQ(freshness_lifetime(200, dated({{"Last-Modified", format_http_date(kNow - 1000)}}),
                               kNow, kHeuristic),
            100);
  EXPECT_EQ(freshness_lifetime(200, dated({{"Last-Modified", format_http_date(kNow - 10'000'000)}}),
                               kNow, kHeuristic),
            kHeuristic);
  EXPECT_EQ(freshness_lifetime(200, dated({}), kNow, kHeuristic), kHeuristic);
  EXPECT_EQ(freshness_lifetime(200, dated({}), kNow, 0), std::nullopt) << "heuristics off";
  EXPECT_EQ(freshness_lifetime(404, dated({}), kNow, kHeuristic), std::nullopt);
}

TEST(Age, CorrectedInitialAgeTakesTheLargerOfApparentAgeAndAgePlusDelay) {
  // RFC 9111 §4.2.3: Date 30 s before arrival, Age 5, 2 s on the wire: apparent age wins.
  auto f = make_freshness(200, {{"Date", format_http_date(kNow - 30)}, {"Age", "5"}},
                          kNow - 2, kNow, kHeuristic);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->corrected_initial_age, 30);
  // Age 100 beats an apparent age of 0.
  f = make_freshness(200, dated({{"Age", "100"}}), kNow - 2, kNow, kHeuristic);
  EXPECT_EQ(f->corrected_initial_age, 102);
  EXPECT_EQ(current_age(*f, kNow + 8), 110);
}

TEST(StoreDecisionTest, StoresA200WithoutAnyCacheControlHeuristically) {
  EXPECT_TRUE(store(get(), 200, dated({})).store);
  EXPECT_FALSE(store(get(), 200, dated({}), 0).store)
      << "--heuristic-freshness-s 0 stores only explicitly fresh responses";
  EXPECT_TRUE(store(get(), 200, dated({{"Cache-Control", "max-age=60"}}), 0).store);
}

TEST(StoreDecisionTest, NeverStoresNoStorePrivateSetCookieVaryStarOrNon200) {
  EXPECT_FALSE(store(get(), 200, {{"Cache-Control", "no-store, max-age=60"}}).store);
  EXPECT_FALSE(store(get(), 200, {{"Cache-Control", "private, max-age=60"}}).store);
  EXPECT_FALSE(store(get(), 200, {{"Cache-Control", "private=\"X-A\""}}).store);
  EXPECT_FALSE(store(get(), 200, {{"Set-Cookie", "a=b"}, {"Cache-Control", "max-age=60"}}).store);
  EXPECT_FALSE(store(get(), 200, {{"Vary", "Accept, *"}}).store);
  EXPECT_FALSE(store(get(), 206, {{"Cache-Control", "max-age=60"}}).store);
  EXPECT_FALSE(store(get(), 404, {{"Cache-Control", "max-age=60"}}).store);
  Request head = get();
  head.method = "HEAD";
  EXPECT_FALSE(store(head, 200, {{"Cache-Control", "max-age=60"}}).store);
}

TEST(StoreDecisionTest, HonoursRequestNoStoreAndRangeBypass) {
  EXPECT_FALSE(store(get({{"Cache-Control", "no-store"}}), 200, dated({})).store);
  EXPECT_FALSE(store(get({{"Range", "bytes=0-1"}}), 200, dated({})).store);
}

TEST(StoreDecisionTest, StoresAnAuthorizedResponseOnlyWhenItSaysPublicSMaxageOrMustRevalidate) {
  const Request authorized = get({{"Authorization", "Basic dTpw"}});
  EXPECT_FALSE(store(authorized, 200, dated({{"Cache-Control", "max-age=60"}})).store);
  EXPECT_TRUE(store(authorized, 200, dated({{"Cache-Control", "public"}})).store);
  EXPECT_TRUE(store(authorized, 200, dated({{"Cache-Control", "s-maxage=60"}})).store);
  EXPECT_TRUE(store(authorized, 200, dated({{"Cache-Control", "max-age=60, must-revalidate"}}))
                  .store);
}

TEST(StoreDecisionTest, StoresAResponseStaleOnArrivalOnlyWithAValidator) {
  EXPECT_FALSE(store(get(), 200, dated({{"Cache-Control", "max-age=0"}})).store);
  EXPECT_TRUE(store(get(), 200, dated({{"Cache-Control", "max-age=0"}, {"ETag", "\"v\""}})).store);
  EXPECT_TRUE(store(get(), 200, dated({{"Cache-Control", "no-cache"},
                                       {"Last-Modified", format_http_date(kNow - 5)}}))
                  .store);
  EXPECT_FALSE(store(get(), 200, dated({{"Cache-Control", "no-cache"}})).store);
}

TEST(VaryFieldsTest, KeepsTheNamedRequestValuesLowerCasedOnceEach) {
  auto vary = vary_fields({{"Vary", "Accept, accept-encoding"}, {"Vary", "ACCEPT"}},
                          get({{"Accept", "text/html"}, {"accept", "image/png"}}));
  ASSERT_TRUE(vary);
  ASSERT_EQ(vary->size(), 2u);
  EXPECT_EQ((*vary)[0].name, "accept");
  EXPECT_EQ((*vary)[0].value, "text/html, image/png");
  EXPECT_EQ((*vary)[1].name, "accept-encoding");
  EXPECT_EQ((*vary)[1].value, std::nullopt);
  EXPECT_EQ(vary_fields({{"Vary", "*"}}, get()), std::nullopt);
}

TEST(DecideUse, ServesFreshRevalidatesStaleWithValidatorMissesStaleWithout) {
  const RequestCacheRules plain = request_cache_rules(get());
  const CachedResponse fresh = stored(dated({{"Cache-Control", "max-age=60"}}));
  EXPECT_EQ(decide_use(fresh, get(), plain, kNow + 59), StoredUse::serve);
  EXPECT_EQ(decide_use(fresh, get(), plain, kNow + 60), StoredUse::miss);
  const CachedResponse tagged = stored(dated({{"Cache-Control", "max-age=60"}, {"ETag", "\"a\""}}));
  EXPECT_EQ(decide_use(tagged, get(), plain, kNow + 60), StoredUse::revalidate);
  // An origin Age larger than max-age: stale on arrival.
  const CachedResponse old = stored(dated({{"Cache-Control", "max-age=60"}, {"Age", "61"},
                                           {"ETag", "\"a\""}}));
  EXPECT_EQ(decide_use(old, get(), plain, kNow), StoredUse::revalidate);
}

TEST(DecideUse, HonoursRequestNoCacheMaxAgeAndMinFresh) {
  const CachedResponse entry = stored(dated({{"Cache-Control", "max-age=60"}, {"ETag", "\"a\""}}));
  auto use = [&](HeaderFields fields, UnixSeconds now) {
    Request request = get(std::move(fields));
    return decide_use(entry, request, request_cache_rules(request), now);
  };
  EXPECT_EQ(use({{"Cache-Control", "no-cache"}}, kNow), StoredUse::revalidate);
  EXPECT_EQ(use({{"Cache-Control", "max-age=10"}}, kNow + 10), StoredUse::serve);
  EXPECT_EQ(use({{"Cache-Control", "max-age=10"}}, kNow + 11), StoredUse::revalidate);
  EXPECT_EQ(use({{"Cache-Control", "min-fresh=30"}}, kNow + 30), StoredUse::serve);
  EXPECT_EQ(use({{"Cache-Control", "min-fresh=30"}}, kNow + 31), StoredUse::revalidate);
  EXPECT_EQ(use({{"Cache-Control", "max-stale=1000, community=\"UCI\""}}, kNow), StoredUse::serve);
}

TEST(DecideUse, AnotherVaryVariantIsAMiss) {
  const HeaderFields fields = dated({{"Cache-Control", "max-age=60"}, {"Vary", "Accept"}});
  const CachedResponse html = stored(fields, get({{"Accept", "text/html"}}));
  auto use = [&](HeaderFields request_fields) {
    Request request = get(std::move(request_fields));
    return decide_use(html, request, request_cache_rules(request), kNow);
  };
  EXPECT_EQ(use({{"Accept", "text/html"}}), StoredUse::serve);
  EXPECT_EQ(use({{"accept", "text/html"}}), StoredUse::serve);
  EXPECT_EQ(use({{"Accept", "image/png"}}), StoredUse::miss);
  EXPECT_EQ(use({}), StoredUse::miss);
  EXPECT_GT(entry_bytes("k", html), entry_bytes("k", CachedResponse{html.head, html.body}))
      << "the Vary'd values are charged to the entry";
}

TEST(StoredHead, RoundTripsWithoutAge) {
  const std::string text =
      stored_head_text(200, "OK", {{"Age", "5"}, {"ETag", "\"a\""}, {"X-Thing", "1"}});
  EXPECT_EQ(text, "HTTP/1.1 200 OK\r\nETag: \"a\"\r\nX-Thing: 1\r\n");
  auto parsed = parse_stored_head(text);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->status, 200);
  EXPECT_EQ(parsed->reason, "OK");
  ASSERT_EQ(parsed->fields.size(), 2u);
  EXPECT_EQ(parsed->fields[1].value, "1");
}

TEST(ConditionalRequest, CarriesTheStoredValidatorsInPlaceOfTheClientsOwn) {
  const Request request = conditional_request(
      get({{"Accept", "*/*"}, {"If-None-Match", "\"client\""}}),
      {{"ETag", "\"stored\""}, {"Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"}});
  EXPECT_EQ(find_field(request.fields, "Accept"), "*/*");
  EXPECT_EQ(find_field(request.fields, "If-None-Match"), "\"stored\"");
  EXPECT_EQ(find_field(request.fields, "If-Modified-Since"), "Sun, 06 Nov 1994 08:49:37 GMT");
  int conditions = 0;
  for (const auto& field : request.fields) conditions += iequals(field.name, "If-None-Match");
  EXPECT_EQ(conditions, 1);
}

TEST(MergeNotModified, ReplacesUpdatedFieldsButNeverContentLengthOrHopByHop) {
  const HeaderFields merged = merge_not_modified(
      {{"Cache-Control", "max-age=0"}, {"ETag", "\"a\""}, {"X-Old", "1"}, {"Date", "old"}},
      {{"Cache-Control", "max-age=60"}, {"Date", "new"}, {"Content-Length", "0"},
       {"Connection", "close"}, {"X-New", "2"}});
  EXPECT_EQ(find_field(merged, "Cache-Control"), "max-age=60");
  EXPECT_EQ(find_field(merged, "Date"), "new");
  EXPECT_EQ(find_field(merged, "ETag"), "\"a\"");
  EXPECT_EQ(find_field(merged, "X-Old"), "1");
  EXPECT_EQ(find_field(merged, "X-New"), "2");
  EXPECT_EQ(find_field(merged, "Content-Length"), std::nullopt);
  EXPECT_EQ(find_field(merged, "Connection"), std::nullopt);
  EXPECT_EQ(merged.size(), 5u);
}

}  // namespace
}  // namespace proxy
