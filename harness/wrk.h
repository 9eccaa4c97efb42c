// Drives a forward proxy with wrk (https://github.com/wg/wrk) through bench/wrk/proxy.lua and
// reads back the JSON summary that script writes, so nothing parses wrk's human-readable text.
// Used by `make sweep`, `make bench` and the grader's throughput check.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace harness {

/// One wrk run against a proxy. See bench/wrk/proxy.lua for what each field becomes.
struct WrkOptions {
  /// The proxy wrk connects to, e.g. "http://127.0.0.1:40123" (wrk's URL argument).
  std::string proxy_url;
  /// Absolute URL at the origin server that every request names in absolute-form
  /// (RFC 9112 §3.2.2), e.g. "http://127.0.0.1:41234/bytes/1024".
  std::string target;
  int connections = 10;  ///< open connections in total (wrk -c); at least 1
  int threads = 1;       ///< wrk threads (wrk -t); lowered to `connections` when above it
  std::chrono::seconds duration{10};  ///< wrk -d; at least 1 s
  /// "hit": the same URL every request; "miss": a unique URL per request (`?n=THREAD-COUNT`).
  std::string workload = "hit";
  bool close = false;  ///< send `Connection: close` on every request
  /// Path to proxy.lua; empty means default_wrk_script() (the source tree's copy).
  std::string script;
  /// wrk --timeout (whole seconds: wrk takes no finer unit): a response slower than this
  /// counts as a timeout error. wrk's default is 2 s.
  std::chrono::seconds timeout{2};
  /// APDEX threshold T in ms (apdex.org); 0 = do not compute. Sets APDEX_T_MS for the script.
  double apdex_t_ms = 0;
  /// The wrk executable, searched in PATH when it has no '/'.
  std::string wrk_binary = "wrk";
};

/// Latencies from wrk's histogram, in milliseconds. NaN when no request completed.
struct WrkLatency {
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

/// Errors as wrk counts them (per socket event, not per request).
struct WrkErrors {
  std::uint64_t connect = 0;  ///< connect() failed (refused, reset during connect)
  std::uint64_t read = 0;     ///< read failed, or the connection ended mid-response
  std::uint64_t write = 0;    ///< write failed
  std::uint64_t timeout = 0;  ///< no response within WrkOptions::timeout
  std::uint64_t status = 0;   ///< responses with a status of 400 or more (non-2xx/3xx)

  /// All of the above added up.
  [[nodiscard]] std::uint64_t total() const noexcept {
    return connect + read + write + timeout + status;
  }
};

/// The summary proxy.lua writes in done(), field for field.
struct WrkResult {
  std::uint64_t requests = 0;  ///< completed responses, any status
  double duration_s = 0;       ///< measured wall-clock time, seconds
  double requests_per_s = 0;   ///< requests / duration_s
  std::uint64_t bytes = 0;     ///< bytes read from the proxy, heads included
  WrkLatency latency_ms;
  WrkErrors errors;
  int connections = 0;  ///< wrk -c as run (0 if the script could not tell)
  int threads = 0;      ///< wrk -t as run
  /// APDEX inputs, present when WrkOptions::apdex_t_ms was set (else apdex_t_ms is 0): the
  /// fractions of wrk's latency distribution at or below T and in (T, 4T]. Fractions, not
  /// counts: wrk adds samples to correct for coordinated omission.
  double apdex_t_ms = 0;
  double apdex_satisfied = 0;   ///< fraction in [0, 1]; NaN when no request completed
  double apdex_tolerating = 0;  ///< fraction in [0, 1]; NaN when no request completed
  /// wrk's own stdout (the human report). Filled by run_wrk only; for logs, never parsed.
  std::string report;

  /// Answered requests per second: 2xx/3xx responses (requests minus errors.status) over
  /// duration_s; NaN when nothing was timed. A stage that sheds load answers 503 in
  /// microseconds and wrk counts those in requests_per_s, so throughput is judged by this.
  [[nodiscard]] double ok_per_s() const noexcept {
    if (!(duration_s > 0)) return std::numeric_limits<double>::quiet_NaN();
    const std::uint64_t ok = requests - std::min(requests, errors.status);
    return static_cast<double>(ok) / duration_s;
  }
};

/// The copy of bench/wrk/proxy.lua in the source tree this binary was built from.
std::string default_wrk_script();

/// Parses the JSON object proxy.lua writes. Throws std::runtime_error naming the field when
/// the text is not JSON or a field is missing or of the wrong type; a null latency (no
/// request completed) becomes NaN.
WrkResult parse_wrk_json(std::string_view json);

/// Runs wrk once against options.proxy_url and returns its summary. Blocks for about
/// options.duration. wrk gets our environment plus TARGET, WORKLOAD, CLOSE and JSON (a file in
/// $TMPDIR, removed afterwards), with stdin from /dev/null. Throws std::invalid_argument for a
/// bad option, std::runtime_error — with wrk's stderr — when wrk cannot start, fails (wrk
/// exits at once when its first connection to the proxy is refused), or
/// writes no summary; wrk is killed if it outlives its duration by 30 s.
/// Thread-safety: independent calls may run in parallel.
WrkResult run_wrk(const WrkOptions& options);

}  // namespace harness
