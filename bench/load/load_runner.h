// Runs one load point: start a server (a stage, a peer proxy), drive it with wrk while
// sampling it from /proc, stop it. Shared by `tuning-sweep` (make sweep) and `stage-bench`
// (make bench), so both measure the same way.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher.h"
#include "load_report.h"
#include "wrk.h"

namespace bench {

/// The folder this executable lives in (build/<preset>/bin), where the stages and the origin
/// are built. Throws std::runtime_error if /proc/self/exe cannot be read.
std::string own_bin_dir();

/// A server to measure: a command that prints `listening on HOST:PORT` first (every stage
/// does; bench/peers/* scripts do for squid, tinyproxy and nginx).
struct ServerCommand {
  std::string name;               ///< as reported: "stage3-pool", "squid", ...
  std::vector<std::string> argv;  ///< full command line
  /// Measure the processes it starts instead of itself (a peer's launcher script).
  bool measure_children = false;
};

/// Starts the harness origin (`BIN_DIR/origin --port 0 --delay-ms D --overload LAW
/// [--capacity K]`; the laws: harness/downstream.h), its stderr to `log_path`. Throws
/// std::runtime_error when it does not start.
harness::Process start_origin(const std::string& bin_dir, int delay_ms, int capacity,
                              const std::string& log_path, const std::string& overload = "queue");

/// Starts `server` (stderr to `log_path`), runs wrk at it with `wrk` (proxy_url filled in
/// here) while a ProcSampler watches it, stops it (SIGTERM, 5 s grace) and fills
/// point.wrk and point.process. Throws std::runtime_error when the server does not start or
/// wrk fails; a server that does not exit cleanly is reported on stderr, not thrown, because
/// its numbers are still valid.
void measure(const ServerCommand& server, harness::WrkOptions wrk, const std::string& log_path,
             LoadPoint& point);

/// "1 2 4,8" → {1, 2, 4, 8}: numbers separated by spaces or commas, each > 0. Throws
/// std::invalid_argument naming the bad entry.
std::vector<int> parse_int_list(const std::string& text);

/// "m:ss" for a progress line.
std::string format_duration(std::chrono::seconds duration);

/// One progress line, printed to stderr and flushed, e.g.
/// "[3/8] stage3-pool workers=4 c=100: 198 req/s ... | 0:12 elapsed, ETA 0:50".
void print_progress(std::size_t done, std::size_t total, const LoadPoint& point,
                    std::chrono::steady_clock::time_point started);

}  // namespace bench
