// Runs Debian's Chromium headless for one page load, the way the browser check needs it: a new
// empty profile every time (so the browser's own cache cannot hide a request), no background
// traffic (this machine's network is closed), optionally through an HTTP proxy, with a deadline
// so a hang fails instead of stalling the suite.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace e2e {

/// The Chromium binary the check runs: $CHROMIUM when set, else /usr/bin/chromium (Debian's
/// package `chromium`, installed by `scripts/install-deps e2e`). Empty when neither is an
/// executable file. Thread-safe while nobody changes the environment.
std::string chromium_path();

/// What `chromium --version` prints (one line, e.g. "Chromium 156.0.8078.114 built on Debian
/// ..."), or an empty string when it cannot be run within 30 s.
std::string chromium_version(const std::string& chromium);

/// One page load.
struct LoadOptions {
  std::string url;  ///< the page, e.g. "http://127.0.0.1:PORT/site/index.html"
  /// "http://HOST:PORT" of the proxy to load through; empty loads directly. With a proxy the
  /// implicit loopback bypass is removed (`--proxy-bypass-list=<-loopback>`; Chromium otherwise
  /// never sends loopback addresses to a proxy) and Google's hosts bypass it instead, so only
  /// the page's own requests reach the proxy (chromium.cpp says which requests those are).
  std::string proxy;
  /// Where `--screenshot` writes the PNG (required). The DOM and Chromium's log are kept beside
  /// it, with the extensions .html and .log, for a person to look at when the check fails.
  std::string screenshot_path;
  std::string work_dir;  ///< holds the fresh profile, removed after the run (must exist)
  int width = 480;       ///< window size in CSS px; the page is laid out for 480 x 320
  int height = 320;
  /// Kill the whole browser (its process group) and fail when the load has not finished by
  /// then. A load takes ~1-3 s on a loaded 2-core machine.
  std::chrono::milliseconds deadline{60'000};
};

/// How a load went.
struct LoadResult {
  bool finished = false;                 ///< exited on its own before the deadline
  int exit_code = -1;                    ///< its exit status when it exited, else -1
  int signal = 0;                        ///< the signal that ended it, 0 if none
  std::string dom;                       ///< `--dump-dom`: the DOM serialized after the load event
  std::string screenshot;                ///< the PNG's bytes; empty when none was written
  std::string log;                       ///< Chromium's stderr, for failure messages
  std::chrono::milliseconds elapsed{0};  ///< from start until it exited or was killed
  /// The command line, for failure messages.
  std::vector<std::string> argv;

  /// Exited 0 on its own and wrote both a DOM and a screenshot.
  [[nodiscard]] bool ok() const noexcept {
    return finished && signal == 0 && exit_code == 0 && !dom.empty() && !screenshot.empty();
  }
  /// A few lines about a load that went wrong: how it ended, the command, the log's tail.
  [[nodiscard]] std::string describe() const;
};

/// Loads `options.url` in a new headless Chromium with a new empty profile (created under
/// work_dir and removed afterwards), takes `--screenshot` and `--dump-dom` in the same run, and
/// waits for it to exit or for the deadline (then SIGKILLs its process group). Runs `chromium`
/// as a real process in its own process group, stdout/stderr to files in work_dir. Throws
/// std::runtime_error when it cannot be started. Thread-safe (no shared state).
LoadResult load_page(const std::string& chromium, const LoadOptions& options);

}  // namespace e2e
