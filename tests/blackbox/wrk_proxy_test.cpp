// bench/wrk/proxy.lua against a real proxy: the hit workload must produce cache hits and the
// miss workload cache misses, as the stage's own stats line counts them. Needs wrk
// (scripts/install-deps bench); skipped without it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "launcher.h"
#include "origin_server.h"
#include "stage_fixture.h"
#include "wrk.h"

namespace {

using namespace std::chrono_literals;

// The number after `name=` in a stage's stats line.
long stat(const std::string& output, const std::string& name) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex("\\b" + name + "=(\\d+)"))) return -1;
  return std::stol(match[1]);
}

struct Counts {
  harness::WrkResult wrk;
  long hits = -1;
  long misses = -1;
};

Counts drive(const std::string& workload) {
  harness::OriginServer origin;
  harness::ProcessOptions options;
  options.stderr_path = ::testing::TempDir() + "wrk-proxy-" + workload + ".log";
  harness::Process proxy({testing_support::binary_path("stage3-pool"), "--port", "0"}, options);
  harness::WrkOptions wrk;
  wrk.proxy_url = "http://" + proxy.address();
  wrk.target = "http://" + origin.address() + "/bytes/512";
  wrk.workload = workload;
  wrk.connections = 2;
  wrk.duration = 1s;
  Counts counts;
  counts.wrk = harness::run_wrk(wrk);
  harness::ExitStatus status = proxy.stop();
  EXPECT_TRUE(status.clean()) << status.output;
  counts.hits = stat(status.output, "hits");
  counts.misses = stat(status.output, "misses");
  EXPECT_GE(counts.hits, 0) << status.output;
  EXPECT_GE(counts.misses, 0) << status.output;
  return counts;
}

bool wrk_installed() { return std::system("command -v wrk >/dev/null 2>&1") == 0; }

TEST(WrkThroughAProxy, HitWorkloadIsServedFromTheCache) {
  if (!wrk_installed()) GTEST_SKIP() << "wrk is not installed (scripts/install-deps bench)";
  if (!std::filesystem::exists(testing_support::binary_path("stage3-pool")))
    GTEST_SKIP() << "stage3-pool is not built in this tree";
  Counts counts = drive("hit");
  ASSERT_GT(counts.wrk.requests, 10u) << counts.wrk.report;
  EXPECT_EQ(counts.wrk.errors.total(), 0u) << counts.wrk.report;
  // The first request misses; a request cut off at the end may be counted by the proxy only.
  EXPECT_LE(counts.misses, 2);
  EXPECT_GE(counts.hits, static_cast<long>(counts.wrk.requests) - 2);
}

TEST(WrkThroughAProxy, MissWorkloadNeverRepeatsAUrl) {
  if (!wrk_installed()) GTEST_SKIP() << "wrk is not installed (scripts/install-deps bench)";
  if (!std::filesystem::exists(testing_support::binary_path("stage3-pool")))
    GTEST_SKIP() << "stage3-pool is not built in this tree";
  Counts counts = drive("miss");
  ASSERT_GT(counts.wrk.requests, 10u) << counts.wrk.report;
  EXPECT_EQ(counts.wrk.errors.total(), 0u) << counts.wrk.report;
  EXPECT_EQ(counts.hits, 0);
  EXPECT_GE(counts.misses, static_cast<long>(counts.wrk.requests));
}

}  // namespace
