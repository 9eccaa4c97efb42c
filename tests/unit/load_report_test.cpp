// The pieces `make sweep` and `make bench` compute and write: the Little's-law bound, APDEX,
// and the CSV schema that plots and readers depend on.
#include "load_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>

namespace {

TEST(LittlesLaw, BoundIsInFlightOverDelay) {
  // 4 requests in flight, each at least 20 ms at the origin: at most 4 / 0.020 s = 200/s.
  EXPECT_DOUBLE_EQ(bench::littles_law_bound(4, 20), 200.0);
  EXPECT_DOUBLE_EQ(bench::littles_law_bound(100, 50), 2000.0);
  EXPECT_DOUBLE_EQ(bench::littles_law_bound(1, 1), 1000.0);
  EXPECT_TRUE(std::isinf(bench::littles_law_bound(8, 0)));
}

TEST(LittlesLaw, InFlightIsTheSmallestOfWorkersConnectionsAndCapacity) {
  EXPECT_EQ(bench::in_flight_limit(4, 100), 4);      // workers limit
  EXPECT_EQ(bench::in_flight_limit(128, 100), 100);  // connections limit
  EXPECT_EQ(bench::in_flight_limit(64, 100, 16), 16);  // the origin's capacity limits
  EXPECT_EQ(bench::in_flight_limit(8, 100, 0), 8);     // 0: no capacity limit
  // The sweep's default curve: 20 ms origin, 100 connections.
  EXPECT_DOUBLE_EQ(bench::littles_law_bound(bench::in_flight_limit(128, 100), 20), 5000.0);
}

harness::WrkResult summary(std::uint64_t requests, double satisfied, double tolerating) {
  harness::WrkResult result;
  result.requests = requests;
  result.apdex_t_ms = 10;
  result.apdex_satisfied = satisfied;
  result.apdex_tolerating = tolerating;
  return result;
}

TEST(Apdex, SatisfiedCountOneToleratingHalf) {
  EXPECT_DOUBLE_EQ(bench::apdex(summary(100, 1.0, 0.0)), 1.0);
  EXPECT_DOUBLE_EQ(bench::apdex(summary(100, 0.5, 0.5)), 0.75);
  EXPECT_DOUBLE_EQ(bench::apdex(summary(100, 0.0, 0.0)), 0.0);
}

TEST(Apdex, DroppedRequestsAndErrorStatusesAreFrustrated) {
  harness::WrkResult result = summary(90, 1.0, 0.0);
  result.errors.timeout = 6;
  result.errors.connect = 4;  // 100 asked, 90 answered
  EXPECT_DOUBLE_EQ(bench::apdex(result), 0.9);
  EXPECT_EQ(bench::dropped(result.errors), 10u);
  result.errors.status = 30;  // 30 of the 90 answers were 503s: 60 good of 100
  EXPECT_DOUBLE_EQ(bench::apdex(result), 0.6);
}

TEST(Apdex, NotMeasuredIsNaN) {
  harness::WrkResult result = summary(100, 1.0, 0.0);
  result.apdex_t_ms = 0;
  EXPECT_TRUE(std::isnan(bench::apdex(result)));
  EXPECT_TRUE(std::isnan(bench::apdex(summary(0, 0, 0))));
}

TEST(CsvSchema, HasEveryColumnTheIssueAsksFor) {
  auto columns = bench::csv_columns();
  std::set<std::string> names(columns.begin(), columns.end());
  EXPECT_EQ(names.size(), columns.size()) << "duplicate column";
  for (const char* required :
       {"workers", "connections", "requests_per_s", "bound_rps", "latency_p50_ms",
        "latency_p90_ms", "latency_p99_ms", "latency_max_ms", "errors_connect", "errors_read",
        "errors_write", "errors_timeout", "errors_status", "peak_rss_kib", "peak_vsz_kib",
        "peak_threads", "cpu_seconds", "apdex"}) {
    EXPECT_TRUE(names.count(required)) << "missing column " << required;
  }
  EXPECT_EQ(bench::split_csv_line(bench::csv_header()), columns);
}

TEST(CsvSchema, ARowHasOneFieldPerColumnInOrder) {
  bench::LoadPoint point;
  point.scenario = "sweep";
  point.server = "stage3-pool";
  point.workload = "miss";
  point.workers = 16;
  point.connections = 100;
  point.body_bytes = 1024;
  point.origin_delay_ms = 20;
  point.bound_rps = 800;
  point.wrk.requests = 7000;
  point.wrk.duration_s = 10;
  point.wrk.requests_per_s = 700;
  point.wrk.latency_ms = {21.5, 20.25, 24.0, 40.5, 99.0};
  point.wrk.errors = {1, 2, 3, 4, 5};
  point.process.peak_rss_kib = 5120;
  point.process.peak_vsz_kib = 300000;
  point.process.threads = 17;
  point.process.cpu_seconds = 1.5;

  auto columns = bench::csv_columns();
  auto fields = bench::split_csv_line(bench::csv_row(point));
  ASSERT_EQ(fields.size(), columns.size()) << bench::csv_row(point);
  auto at = [&](const std::string& name) {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return fields[i];
    return std::string("(no column ") + name + ")";
  };
  EXPECT_EQ(at("server"), "stage3-pool");
  EXPECT_EQ(at("workers"), "16");
  EXPECT_EQ(at("connections"), "100");
  EXPECT_EQ(at("requests_per_s"), "700");
  EXPECT_EQ(at("ok_per_s"), "699.5");  // (7000 - 5 non-2xx) / 10 s
  EXPECT_EQ(at("bound_rps"), "800");
  EXPECT_EQ(at("latency_p50_ms"), "20.25");
  EXPECT_EQ(at("latency_p99_ms"), "40.5");
  EXPECT_EQ(at("errors_connect"), "1");
  EXPECT_EQ(at("errors_timeout"), "4");
  EXPECT_EQ(at("errors_status"), "5");
  EXPECT_EQ(at("peak_rss_kib"), "5120");
  EXPECT_EQ(at("peak_threads"), "17");
  EXPECT_EQ(at("cpu_seconds"), "1.5");
  EXPECT_EQ(at("apdex"), "");  // not measured: empty, not "nan"
}

TEST(CsvSchema, MissingNumbersAreEmptyAndTextIsQuoted) {
  bench::LoadPoint point;
  point.server = "squid, 6.x \"peer\"";
  point.bound_rps = std::numeric_limits<double>::infinity();
  point.wrk.latency_ms.p99 = std::numeric_limits<double>::quiet_NaN();
  auto columns = bench::csv_columns();
  auto fields = bench::split_csv_line(bench::csv_row(point));
  ASSERT_EQ(fields.size(), columns.size()) << bench::csv_row(point);
  EXPECT_EQ(fields[1], "squid, 6.x \"peer\"");
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == "bound_rps" || columns[i] == "latency_p99_ms") {
      EXPECT_EQ(fields[i], "") << columns[i];
    }
  }
}

TEST(FormatNumber, MissingAndUnboundedValuesRead) {
  EXPECT_EQ(bench::format_number(1234.567, 1), "1234.6");
  EXPECT_EQ(bench::format_number(std::numeric_limits<double>::quiet_NaN(), 1), "–");
  EXPECT_EQ(bench::format_number(std::numeric_limits<double>::infinity(), 0), "∞");
}

}  // namespace

#include "load_runner.h"

namespace {

TEST(IntList, SpacesOrCommasSeparatePositiveNumbers) {
  EXPECT_EQ(bench::parse_int_list("1 2 4,8, 16"), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_THROW(bench::parse_int_list("1 two 3"), std::invalid_argument);
  EXPECT_THROW(bench::parse_int_list("0"), std::invalid_argument);
  EXPECT_THROW(bench::parse_int_list("4x"), std::invalid_argument);
  EXPECT_THROW(bench::parse_int_list(" "), std::invalid_argument);
  EXPECT_EQ(bench::format_duration(std::chrono::seconds(125)), "2:05");
}

}  // namespace

// A stage that sheds load answers most of an overload with 503 in microseconds; wrk counts those
// as requests, so the tables must rank servers by the answers that were not refusals.
TEST(CsvSchema, ShedRequestsAreNotThroughput) {
  harness::WrkResult shedding;
  shedding.requests = 36'000;
  shedding.duration_s = 2;
  shedding.requests_per_s = 18'000;
  shedding.errors.status = 35'000;
  EXPECT_DOUBLE_EQ(shedding.ok_per_s(), 500.0);
  harness::WrkResult empty;
  EXPECT_TRUE(std::isnan(empty.ok_per_s()));
}
