// The arithmetic and file formats of the load benchmarks (`make sweep`, `make bench`): the
// Little's-law bound a sweep is drawn against, APDEX, the CSV schema and gnuplot. No sockets
// or processes here, so each piece is a unit test.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "proc_stats.h"
#include "wrk.h"

namespace bench {

/// The most requests per second a server can complete when at most `in_flight` requests are
/// served at once and each takes at least `delay_ms` at the origin server: Little's law,
/// L = λ·W, so λ ≤ L / W (Little, Operations Research 9(3), 1961). For a pool, `in_flight` is
/// min(workers, connections) — and the origin's capacity when it has one
/// (see in_flight_limit). Returns +infinity for a delay of 0 (no bound). Requests/s.
double littles_law_bound(double in_flight, double delay_ms);

/// How many requests can be in flight at once: min(workers, connections), further limited by
/// an origin that serves at most `origin_capacity` at once (0 = unlimited).
int in_flight_limit(int workers, int connections, int origin_capacity = 0);

/// APDEX (apdex.org, "Application Performance Index", 2007): satisfied responses (latency
/// ≤ T) count 1, tolerating ones (T < latency ≤ 4T) count ½, all else and every failed
/// request 0, over everything asked. From wrk: `satisfied` and `tolerating` come from its
/// latency histogram; responses with status ≥ 400 and dropped requests (connect, read, write
/// and timeout errors) are frustrated. Returns NaN when nothing was asked.
double apdex(const harness::WrkResult& result);

/// Requests that did not complete: wrk's connect, read, write and timeout errors (each is one
/// connection dropped or refused, or one request that never got its answer).
std::uint64_t dropped(const harness::WrkErrors& errors);

/// One measured point of a sweep or a bench: what ran, what wrk saw, what the proxy cost.
struct LoadPoint {
  std::string scenario;   ///< e.g. "sweep", "quick-io", "hit-1KiB"
  std::string server;     ///< stage name or peer ("squid", "tinyproxy", "nginx-direct")
  std::string workload;   ///< "hit" or "miss"
  int workers = 0;        ///< --workers given to the proxy; 0 = not applicable or its default
  int connections = 0;    ///< wrk -c
  int body_bytes = 0;     ///< origin body size, bytes
  int origin_delay_ms = 0;
  int origin_capacity = 0;     ///< 0 = unlimited
  double bound_rps = 0;        ///< Little's-law bound for this point (+inf: none)
  harness::WrkResult wrk;      ///< throughput, latency, errors
  harness::ProcStats process;  ///< peak memory, peak threads, CPU seconds of the proxy
  /// APDEX as read back from a CSV (read_csv_row); NaN: compute it from `wrk` (point_apdex).
  double apdex_read = std::numeric_limits<double>::quiet_NaN();
};

/// The point's APDEX: apdex(point.wrk), or the value read back from a CSV.
double point_apdex(const LoadPoint& point);

/// Parses one csv_row line back into a LoadPoint (for re-drawing tables and plots from a
/// saved CSV). Throws std::runtime_error when the field count does not match csv_columns().
LoadPoint read_csv_row(std::string_view line);

/// The CSV header: one name per column, in csv_row's order. Columns: scenario, server,
/// workload, workers, connections, body_bytes, origin_delay_ms, origin_capacity, duration_s,
/// requests, requests_per_s, ok_per_s (2xx/3xx only, WrkResult::ok_per_s), bound_rps,
/// latency_mean_ms, latency_p50_ms, latency_p90_ms,
/// latency_p99_ms, latency_max_ms, errors_connect, errors_read, errors_write, errors_timeout,
/// errors_status (non-2xx/3xx), apdex_t_ms, apdex, peak_rss_kib, peak_vsz_kib, peak_threads,
/// cpu_seconds.
std::vector<std::string> csv_columns();
/// csv_columns() joined with commas (no newline).
std::string csv_header();
/// One CSV line (no newline) for `point`; NaN and +inf are written as empty fields so
/// spreadsheets and gnuplot see "missing", not text. Text fields are quoted if they need it
/// (RFC 4180).
std::string csv_row(const LoadPoint& point);

/// Splits one CSV line into fields (RFC 4180 quoting). For tests and for reading results back.
std::vector<std::string> split_csv_line(std::string_view line);

/// Runs `gnuplot script_path`; throws std::runtime_error with gnuplot's output when it fails
/// or is missing (Debian package gnuplot-nox).
void run_gnuplot(const std::string& script_path);

/// A number for tables: fixed with `decimals`, "–" for NaN, "∞" for +inf.
std::string format_number(double value, int decimals);

}  // namespace bench
