// The browser check (tests/e2e/README.md): Debian's Chromium, headless, loads a page of
// HTML, CSS, a script and three images (PNG, SVG, a GIF as a CSS background) from the harness
// origin (`origin --site tests/e2e/site`), first directly and then twice through a stage, each
// time with a new empty profile so that only the proxy can remember anything. Everything is a
// real process: the origin, the stage, the browser and its helpers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "chromium.h"
#include "http_client.h"
#include "launcher.h"
#include "stage_fixture.h"
#include "../test_support.h"

namespace {

using test_support::read_file;

using namespace std::chrono_literals;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr const char* kNoChromium =
    "e2e: chromium not installed — the browser check did not run; scripts/install-deps e2e";

using Counts = std::map<std::string, std::uint64_t>;

// What the origin has been asked for, per path, read from its /__stats (not counted itself).
Counts origin_counts(std::uint16_t origin_port) {
  testing_support::HttpResponse r = testing_support::exchange(
      origin_port, "GET /__stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  if (r.status != 200)
    throw std::runtime_error("origin /__stats answered " + std::to_string(r.status));
  return nlohmann::json::parse(r.body).get<Counts>();
}

// Every file of the site is a resource of its index.html, so a load must fetch each one: the
// expected counts after `loads` loads that reached the origin.
Counts site_counts(std::uint64_t loads) {
  Counts counts;
  for (const auto& entry : fs::directory_iterator(E2E_SITE_DIR)) {
    if (entry.is_regular_file()) counts["/site/" + entry.path().filename().string()] = loads;
  }
  return counts;
}

// The number after `name=` in a stage's stats line, e.g. "hits=6"; -1 when absent.
long long stat_value(const std::string& output, const std::string& name) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex("\\b" + name + "=([0-9]+)"))) return -1;
  return std::stoll(match[1].str());
}

/// One stage behind the origin with the site, and a browser. Parameterized over stage names.
class BrowserCheck : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    chromium_ = e2e::chromium_path();
    if (chromium_.empty()) GTEST_SKIP() << kNoChromium;
    // Once per run: which browser the result is about.
    static const std::string version = e2e::chromium_version(chromium_);
    std::cout << "e2e: " << chromium_ << ": " << (version.empty() ? "version unknown" : version)
              << "\n";
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    std::string pattern = ::testing::TempDir() + "e2e-" + name + "-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    work_dir_ = pattern;

    harness::ProcessOptions origin_options;
    origin_options.stderr_path = work_dir_ + "/origin.log";
    origin_ = std::make_unique<harness::Process>(
        std::vector<std::string>{testing_support::binary_path("origin"), "--port", "0", "--site",
                                 E2E_SITE_DIR},
        origin_options);

    harness::ProcessOptions stage_options;
    stage_options.stderr_path = work_dir_ + "/stage.log";
    stage_options.ready_timeout = 30s;  // sanitizer builds start slowly on a loaded machine
    std::vector<std::string> argv{testing_support::binary_path(GetParam()), "--port", "0"};
    stage_ = std::make_unique<harness::Process>(argv, stage_options);
  }

  // Stops the stage and the origin; each must exit cleanly with no sanitizer report in its log
  // (under `make tsan` that is how a race in either fails the check).
  void TearDown() override {
    for (auto [process, log] :
         {std::pair{&stage_, "stage.log"}, std::pair{&origin_, "origin.log"}}) {
      if (!*process) continue;
      harness::ExitStatus status = (*process)->stop(10s);
      process->reset();
      const std::string text = read_file(work_dir_ + "/" + log);
      EXPECT_TRUE(status.clean()) << log << ": did not exit cleanly\n" << text;
      for (const char* report : {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer",
                                 "runtime error:", "ERROR: LeakSanitizer"}) {
        EXPECT_EQ(text.find(report), std::string::npos) << "sanitizer report in " << log << ":\n"
                                                        << text;
      }
    }
    // Kept when something failed: the screenshots and logs are what one looks at next.
    if (!work_dir_.empty() && !HasFailure()) {
      std::error_code error;
      fs::remove_all(work_dir_, error);
    } else if (!work_dir_.empty()) {
      std::cout << "e2e: screenshots and logs kept in " << work_dir_ << "\n";
    }
  }

  // Loads the page (directly, or through this test's stage) into screenshot `label`.png.
  e2e::LoadResult load(const std::string& label, bool through_proxy) {
    e2e::LoadOptions options;
    options.url = "http://127.0.0.1:" + std::to_string(origin_->port()) + "/site/index.html";
    if (through_proxy) options.proxy = "http://127.0.0.1:" + std::to_string(stage_->port());
    options.screenshot_path = work_dir_ + "/" + label + ".png";
    options.work_dir = work_dir_;
    e2e::LoadResult result = e2e::load_page(chromium_, options);
    std::cout << "e2e: " << GetParam() << " " << label << " load: " << result.elapsed.count()
              << " ms\n";
    return result;
  }

  std::string stage_log() const { return read_file(work_dir_ + "/stage.log"); }

  std::string chromium_;
  std::string work_dir_;
  std::unique_ptr<harness::Process> origin_;
  std::unique_ptr<harness::Process> stage_;
};

// The proxy must be invisible to the page: the same DOM after the script ran and the same
// pixels. Every resource must cross the proxy (its first load reaches the origin once per
// resource) and the second load, from a browser that remembers nothing, must come from the
// proxy's cache (the origin hears nothing; the stage counts one hit per resource).
TEST_P(BrowserCheck, PageRendersTheSameThroughTheProxyAndASecondLoadComesFromItsCache) {
  // 1. Directly: the page works, and the site's files are exactly what a load asks for.
  e2e::LoadResult direct = load("direct", false);
  ASSERT_TRUE(direct.ok()) << direct.describe();
  EXPECT_THAT(direct.dom, HasSubstr(R"(<p id="status" class="ran">the script ran</p>)"));
  EXPECT_THAT(direct.dom, HasSubstr(R"(<li id="css">css: applied</li>)"));
  EXPECT_THAT(direct.dom, HasSubstr(R"(<li id="images">images: 2 of 2 decoded</li>)"));
  EXPECT_THAT(direct.dom, HasSubstr(R"(<body data-loaded="yes">)"));
  ASSERT_EQ(origin_counts(origin_->port()), site_counts(1))
      << "a direct load must fetch every file of " << E2E_SITE_DIR << " once and nothing else";

  // 2. Through the proxy, first time: a miss for every resource, one more origin request each.
  e2e::LoadResult first = load("proxied-first", true);
  ASSERT_TRUE(first.ok()) << first.describe() << "\nstage log:\n" << stage_log();
  EXPECT_EQ(first.dom, direct.dom) << "the DOM after the script ran differs through the proxy";
  EXPECT_TRUE(first.screenshot == direct.screenshot)
      << "the page looks different through the proxy: compare direct.png and "
         "proxied-first.png in "
      << work_dir_;
  EXPECT_EQ(origin_counts(origin_->port()), site_counts(2))
      << "the first proxied load must reach the origin once per resource";

  // 3. Through the proxy again, with a new empty profile: every resource from the cache.
  e2e::LoadResult second = load("proxied-second", true);
  ASSERT_TRUE(second.ok()) << second.describe() << "\nstage log:\n" << stage_log();
  EXPECT_EQ(second.dom, direct.dom) << "the DOM differs when served from the proxy's cache";
  EXPECT_TRUE(second.screenshot == direct.screenshot)
      << "the page looks different from the cache: compare direct.png and proxied-second.png in "
      << work_dir_;
  EXPECT_EQ(origin_counts(origin_->port()), site_counts(2))
      << "the second proxied load must be served from the proxy's cache";

  // The stage's own account: every request of both loads went through it, half of them hits.
  const harness::ExitStatus stopped = stage_->stop(10s);
  const auto resources = static_cast<long long>(site_counts(1).size());
  EXPECT_EQ(stat_value(stopped.output, "requests"), 2 * resources) << stopped.output;
  EXPECT_EQ(stat_value(stopped.output, "misses"), resources) << stopped.output;
  EXPECT_EQ(stat_value(stopped.output, "hits"), resources) << stopped.output;
}

INSTANTIATE_TEST_SUITE_P(EveryStage, BrowserCheck,
                         ::testing::ValuesIn(testing_support::built_stages()),
                         testing_support::stage_name);

}  // namespace
