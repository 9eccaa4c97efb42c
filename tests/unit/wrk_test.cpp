// harness::run_wrk and bench/wrk/proxy.lua: the JSON summary parsed field by field, and real
// wrk runs against the scripted origin (which, like any HTTP/1.1 server, accepts the
// absolute-form targets the script sends, RFC 9112 §3.2.2), checked against what the origin
// saw. Needs the `wrk` package (scripts/install-deps bench); skipped without it.
#include "wrk.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "origin_server.h"

namespace {

using namespace std::chrono_literals;

constexpr const char* kFullSummary = R"({"requests":1200,"duration_s":2.004,"requests_per_s":598.8,
  "bytes":1290000,"latency_ms":{"mean":3.25,"p50":2.5,"p90":6.75,"p99":12.125,"max":40.5},
  "errors":{"connect":1,"read":2,"write":3,"timeout":4,"status":5},"connections":16,"threads":2})";

bool wrk_installed() { return std::system("command -v wrk >/dev/null 2>&1") == 0; }

#define SKIP_WITHOUT_WRK()                                                              \
  if (!wrk_installed())                                                                 \
  GTEST_SKIP() << "wrk is not installed (Debian package wrk: scripts/install-deps bench)"

TEST(WrkJson, EveryFieldOfTheSummaryIsRead) {
  harness::WrkResult result = harness::parse_wrk_json(kFullSummary);
  EXPECT_EQ(result.requests, 1200u);
  EXPECT_DOUBLE_EQ(result.duration_s, 2.004);
  EXPECT_DOUBLE_EQ(result.requests_per_s, 598.8);
  EXPECT_EQ(result.bytes, 1290000u);
  EXPECT_DOUBLE_EQ(result.latency_ms.mean, 3.25);
  EXPECT_DOUBLE_EQ(result.latency_ms.p50, 2.5);
  EXPECT_DOUBLE_EQ(result.latency_ms.p90, 6.75);
  EXPECT_DOUBLE_EQ(result.latency_ms.p99, 12.125);
  EXPECT_DOUBLE_EQ(result.latency_ms.max, 40.5);
  EXPECT_EQ(result.errors.connect, 1u);
  EXPECT_EQ(result.errors.read, 2u);
  EXPECT_EQ(result.errors.write, 3u);
  EXPECT_EQ(result.errors.timeout, 4u);
  EXPECT_EQ(result.errors.status, 5u);
  EXPECT_EQ(result.errors.total(), 15u);
  EXPECT_EQ(result.connections, 16);
  EXPECT_EQ(result.threads, 2);
}

TEST(WrkJson, ApdexFractionsAreReadWhenPresent) {
  EXPECT_EQ(harness::parse_wrk_json(kFullSummary).apdex_t_ms, 0.0);
  std::string with_apdex = kFullSummary;
  with_apdex.insert(with_apdex.rfind('}'),
                    R"(,"apdex":{"t_ms":25,"satisfied":0.75,"tolerating":0.125})");
  harness::WrkResult result = harness::parse_wrk_json(with_apdex);
  EXPECT_DOUBLE_EQ(result.apdex_t_ms, 25);
  EXPECT_DOUBLE_EQ(result.apdex_satisfied, 0.75);
  EXPECT_DOUBLE_EQ(result.apdex_tolerating, 0.125);
}

TEST(WrkJson, NoCompletedRequestGivesNaNLatencies) {
  harness::WrkResult result = harness::parse_wrk_json(
      R"({"requests":0,"duration_s":1.0,"requests_per_s":0,"bytes":0,
          "latency_ms":{"mean":null,"p50":null,"p90":null,"p99":null,"max":null},
          "errors":{"connect":7,"read":0,"write":0,"timeout":0,"status":0},
          "connections":null,"threads":1})");
  EXPECT_EQ(result.requests, 0u);
  EXPECT_TRUE(std::isnan(result.latency_ms.p50));
  EXPECT_TRUE(std::isnan(result.latency_ms.max));
  EXPECT_EQ(result.errors.connect, 7u);
  EXPECT_EQ(result.connections, 0);
}

TEST(WrkJson, MissingOrMistypedFieldsAreNamed) {
  auto message = [](const std::string& json) -> std::string {
    try {
      harness::parse_wrk_json(json);
    } catch (const std::runtime_error& error) {
      return error.what();
    }
    return "(no exception)";
  };
  std::string without_p99 = kFullSummary;
  without_p99.replace(without_p99.find("\"p99\":12.125,"), 13, "");
  EXPECT_NE(message(without_p99).find("latency_ms.p99"), std::string::npos) << message(without_p99);

  std::string negative = kFullSummary;
  negative.replace(negative.find("\"read\":2"), 8, "\"read\":-2");
  EXPECT_NE(message(negative).find("errors.read"), std::string::npos) << message(negative);

  std::string text_rate = kFullSummary;
  text_rate.replace(text_rate.find("598.8"), 5, "\"fast\"");
  EXPECT_NE(message(text_rate).find("requests_per_s"), std::string::npos) << message(text_rate);

  EXPECT_NE(message("Running 10s test @ http://127.0.0.1:8080").find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(message("[1,2]").find("not an object"), std::string::npos);
}

TEST(RunWrk, BadOptionsAreRefusedBeforeStarting) {
  harness::WrkOptions options;
  options.proxy_url = "http://127.0.0.1:1";
  options.target = "127.0.0.1:2/bytes/1";  // not absolute-form
  EXPECT_THROW(harness::run_wrk(options), std::invalid_argument);
  options.target = "http://127.0.0.1:2/bytes/1";
  options.workload = "sometimes";
  EXPECT_THROW(harness::run_wrk(options), std::invalid_argument);
  options.workload = "miss";
  options.connections = 0;
  EXPECT_THROW(harness::run_wrk(options), std::invalid_argument);
  options.connections = 1;
  options.script = "/nonexistent/proxy.lua";
  EXPECT_THROW(harness::run_wrk(options), std::invalid_argument);
  EXPECT_TRUE(std::filesystem::exists(harness::default_wrk_script()))
      << harness::default_wrk_script();
}

TEST(RunWrk, AMissingWrkBinaryIsAnErrorThatSaysSo) {
  harness::WrkOptions options;
  options.proxy_url = "http://127.0.0.1:1";
  options.target = "http://127.0.0.1:2/bytes/1";
  options.duration = 1s;
  options.wrk_binary = "/nonexistent/wrk";
  try {
    harness::run_wrk(options);
    FAIL() << "run_wrk started a binary that does not exist";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/wrk"), std::string::npos)
        << error.what();
  }
}

// The origin plays the proxy: it answers absolute-form requests, and its counters say what
// arrived, so the summary can be checked against the server's side.
TEST(RunWrk, HitWorkloadRepeatsOneAbsoluteFormTarget) {
  SKIP_WITHOUT_WRK();
  harness::OriginServer origin;
  const std::string base = "http://" + origin.address();
  harness::WrkOptions options;
  options.proxy_url = base;
  options.target = base + "/bytes/1024";
  options.connections = 4;
  options.threads = 2;
  options.duration = 1s;
  options.apdex_t_ms = 1000;  // a local origin answers far faster: all satisfied
  harness::WrkResult result = harness::run_wrk(options);

  EXPECT_GT(result.requests, 0u);
  EXPECT_DOUBLE_EQ(result.apdex_t_ms, 1000);
  EXPECT_GT(result.apdex_satisfied, 0.99);
  EXPECT_LE(result.apdex_satisfied + result.apdex_tolerating, 1.0 + 1e-9);
  EXPECT_EQ(result.errors.total(), 0u) << result.report;
  EXPECT_EQ(result.connections, 4);
  EXPECT_EQ(result.threads, 2);
  EXPECT_GT(result.duration_s, 0.9);
  EXPECT_NEAR(result.requests_per_s, static_cast<double>(result.requests) / result.duration_s,
              1.0);
  // Every response carries a 1,024-byte body plus its head.
  EXPECT_GT(result.bytes, result.requests * 1024);
  EXPECT_LE(result.latency_ms.p50, result.latency_ms.p90);
  EXPECT_LE(result.latency_ms.p90, result.latency_ms.p99);
  EXPECT_LE(result.latency_ms.p99, result.latency_ms.max);
  // The origin received every completed request (and perhaps a few cut off at the end).
  EXPECT_GE(origin.request_count("/bytes/1024"), result.requests);
  EXPECT_EQ(origin.request_count(""), origin.request_count("/bytes/1024"));
  EXPECT_FALSE(result.report.empty());
}

TEST(RunWrk, ErrorStatusesAreCountedAsStatusErrors) {
  SKIP_WITHOUT_WRK();
  harness::OriginServer origin;
  const std::string base = "http://" + origin.address();
  harness::WrkOptions options;
  options.proxy_url = base;
  options.target = base + "/status/503";
  options.workload = "miss";  // `?n=...` appended; the origin still answers /status/503
  options.close = true;
  options.connections = 2;
  options.duration = 1s;
  harness::WrkResult result = harness::run_wrk(options);

  ASSERT_GT(result.requests, 0u) << result.report;
  EXPECT_EQ(result.errors.status, result.requests);
  EXPECT_EQ(result.errors.connect + result.errors.read + result.errors.write, 0u) << result.report;
  EXPECT_GE(origin.request_count("/status/503"), result.requests);
}

// wrk tries one connection before the run and gives up at once when it is refused.
TEST(RunWrk, NothingListeningIsAnErrorWithWrksReason) {
  SKIP_WITHOUT_WRK();
  // A port that was just free: bound to learn it, then closed without listening.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));

  harness::WrkOptions options;
  options.proxy_url = url;
  options.target = url + "/bytes/1";
  options.connections = 2;
  options.duration = 1s;
  try {
    harness::run_wrk(options);
    FAIL() << "run_wrk succeeded with nothing listening at " << url;
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("unable to connect"), std::string::npos)
        << error.what();
  }
}

}  // namespace
