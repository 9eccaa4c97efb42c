// Hardening, nobody let in (docs/hardening.md), against every stage: loopback by default, a warning on
// any other bind address, `--allow CIDR` answering everyone else with 403, and no CR or LF from
// a client ever reaching a forwarded header.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "hardening_support.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

class HardeningAccess : public StageTest {};

TEST_P(HardeningAccess, BindsLoopbackByDefaultAndWarnsOnAnyOtherAddress) {
  start_stage();
  EXPECT_EQ(stage_->host(), "127.0.0.1");
  EXPECT_THAT(stage_log(), Not(HasSubstr("open relay")));
  stage_->stop();

  start_stage({"--bind", "0.0.0.0"});
  EXPECT_EQ(stage_->host(), "0.0.0.0");
  EXPECT_THAT(stage_log(), HasSubstr("open relay"));
  EXPECT_EQ(closing_fetch(proxy_port(), origin_url("/bytes/10")).status, 200);
}

TEST_P(HardeningAccess, AnswersClientsOutsideTheAllowListWith403) {
  start_stage({"--allow", "10.0.0.0/8", "--allow", "192.168.0.0/16", "--allow", "fd00::/8"});
  HttpResponse r = closing_fetch(proxy_port(), origin_url("/bytes/10"));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.field("X-Cache"), "MISS");
  EXPECT_EQ(origin_->request_count(""), 0u) << "a refused client's request reached the origin";
  EXPECT_THAT(stage_log(), HasSubstr("403"));
  // A refused client that sends nothing at all is answered too, and does not hold the stage.
  proxy::Socket silent = send_request(proxy_port(), "");
  auto answer = read_response(silent, 20s);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 403);
}

TEST_P(HardeningAccess, ServesClientsInsideTheAllowList) {
  start_stage({"--allow", "10.0.0.0/8", "--allow", "127.0.0.1/32"});
  HttpResponse r = closing_fetch(proxy_port(), origin_url("/bytes/10"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, harness::deterministic_bytes(10));
  stage_->stop();
  start_stage({"--allow", "127.1.2.3/8"});  // host bits past the prefix do not matter
  EXPECT_EQ(closing_fetch(proxy_port(), origin_url("/bytes/10")).status, 200);
}

TEST_P(HardeningAccess, RefusesAMalformedAllowRangeAtStartUp) {
  for (const char* bad : {"10.0.0.0/33", "300.1.1.1", "example.com", "10.0.0.0/", "::1/129", "10.0.0.0/-1"}) {
    EXPECT_THROW(start_stage({"--allow", bad}), std::runtime_error) << bad;
  }
  stage_.reset();
}

// A client's CR or LF never splits a forwarded field: raw ones are refused (400), and
// percent-encoded ones stay encoded in the target the origin receives.
TEST_P(HardeningAccess, NeverLetsACrOrLfFromAClientIntoAForwardedHeader) {
  start_stage();
  for (const std::string& raw : {
           std::string("GET ") + origin_url("/headers") + " HTTP/1.1\r\nX-A: a\rX-Injected: 1\r\n\r\n",
           std::string("GET ") + origin_url("/headers") + " HTTP/1.1\r\nX-A: a\nX-Injected: 1\r\n\r\n",
           std::string("GET ") + origin_url("/headers") + "\rX-Injected:1 HTTP/1.1\r\n\r\n",
       }) {
    HttpResponse r = exchange(proxy_port(), raw);
    EXPECT_EQ(r.status, 400);
  }
  EXPECT_EQ(origin_->request_count("/headers"), 0u);

  HttpResponse encoded = closing_fetch(proxy_port(), origin_url("/headers?x=%0d%0aX-Injected:%201"));
  ASSERT_EQ(encoded.status, 200);
  EXPECT_THAT(encoded.body, Not(HasSubstr("\nX-Injected")));
  HttpResponse anything = closing_fetch(proxy_port(), origin_url("/anything?x=%0d%0aX-Injected:%201"));
  EXPECT_THAT(anything.body, HasSubstr("%0d%0aX-Injected:%201"));
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HardeningAccess);
INSTANTIATE_TEST_SUITE_P(Stages, HardeningAccess, ::testing::ValuesIn(built_stages()), stage_name);

}  // namespace
}  // namespace testing_support
