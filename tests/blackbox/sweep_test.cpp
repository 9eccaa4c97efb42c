// `make sweep` in miniature: tuning-sweep run as a process for one point of one second
// against stage3-pool, then its CSV row and its plots checked. Needs wrk and gnuplot
// (scripts/install-deps bench); skipped without them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "load_report.h"
#include "stage_fixture.h"
#include "../test_support.h"

namespace {

namespace fs = std::filesystem;

bool installed(const char* program) {
  return std::system(("command -v " + std::string(program) + " >/dev/null 2>&1").c_str()) == 0;
}

TEST(TuningSweep, OnePointGivesACsvRowAndBothPlots) {
  if (!installed("wrk") || !installed("gnuplot"))
    GTEST_SKIP() << "needs wrk and gnuplot (scripts/install-deps bench)";
  const std::string stage = testing_support::binary_path("stage3-pool");
  if (!fs::exists(stage)) GTEST_SKIP() << "stage3-pool is not built in this tree";

  char pattern[] = "/tmp/sweep-test-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path out = pattern;
  // Removed however the test ends (an ASSERT returns early).
  struct RemoveAll {
    fs::path path;
    ~RemoveAll() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } cleanup{out};
  // `timeout` ends a hung sweep, so a hang fails the test instead of blocking it.
  const std::string command = "timeout 120 " +
                              harness::shell_command(testing_support::binary_path("tuning-sweep")) +
                              " --workers 2 --connections 4 --duration 1 --delay-ms 5 "
                              "--wrk-threads 1 --out '" + out.string() + "' > '" +
                              (out / "stdout.txt").string() + "' 2> '" +
                              (out / "stderr.txt").string() + "'";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << status << "; stderr:\n" << test_support::read_file(out / "stderr.txt");
  const std::string progress = test_support::read_file(out / "stderr.txt");
  EXPECT_NE(progress.find("[1/1] stage3-pool"), std::string::npos) << progress;
  EXPECT_NE(progress.find("ETA"), std::string::npos) << progress;

  std::istringstream csv(test_support::read_file(out / "sweep.csv"));
  std::string header, row, extra;
  ASSERT_TRUE(std::getline(csv, header));
  ASSERT_TRUE(std::getline(csv, row)) << "no data row";
  EXPECT_FALSE(std::getline(csv, extra) && !extra.empty()) << "more than one row: " << extra;
  EXPECT_EQ(header, bench::csv_header());
  const auto columns = bench::csv_columns();
  const auto fields = bench::split_csv_line(row);
  ASSERT_EQ(fields.size(), columns.size()) << row;
  auto at = [&](const std::string& name) {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return fields[i];
    return std::string();
  };
  EXPECT_EQ(at("server"), "stage3-pool");
  EXPECT_EQ(at("workload"), "miss");
  EXPECT_EQ(at("workers"), "2");
  EXPECT_EQ(at("connections"), "4");
  EXPECT_EQ(at("bound_rps"), "400");  // min(2 workers, 4 connections) / 5 ms
  EXPECT_GT(std::stod(at("requests")), 0) << row;
  EXPECT_GT(std::stod(at("requests_per_s")), 0) << row;
  EXPECT_FALSE(at("latency_p99_ms").empty()) << row;
  EXPECT_GT(std::stol(at("peak_rss_kib")), 0) << row;
  EXPECT_GT(std::stol(at("peak_vsz_kib")), 0) << row;
  // Two workers plus at least the accept loop.
  EXPECT_GE(std::stol(at("peak_threads")), 3) << row;

  const std::string svg = test_support::read_file(out / "sweep.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("Little"), std::string::npos) << "the bound's key entry is missing";
  const std::string png = test_support::read_file(out / "sweep.png");
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
}

}  // namespace
