// What every check uses: starting a stage process the way its build needs (plain, TSan,
// Valgrind), fetching through it with deadlines, collecting pass/fail lines, and waiting on a
// condition with a deadline. Internal to the grader's checks*.cpp.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../tests/blackbox/http_client.h"
#include "grader.h"
#include "launcher.h"

namespace grader {

using CheckClock = std::chrono::steady_clock;

/// Seconds from `start` to now.
double seconds_since(CheckClock::time_point start);

/// Every thread's stack of a live process, from gdb (the hang watchdog's evidence). Blocks up
/// to 90 s.
std::string thread_stacks(pid_t pid, const std::string& gdb);

/// How many descriptors `pid` has open (/proc/PID/fd), 0 when it cannot be read.
std::size_t fd_count(pid_t pid);

/// Polls `condition` until it holds or `timeout` passes; returns its last value.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout);

/// A port nothing listens on: bound, then closed.
std::uint16_t dead_port();

/// The stage's flags for a run: pool stages get the params' --workers / --queue.
std::vector<std::string> pool_flags(const StageInfo& stage, const nlohmann::json& params);

/// A stage process started the way the check's build needs: plain, under TSan with reports
/// kept going, or under Valgrind memcheck. Its stderr goes to a file in the work directory.
struct Launched {
  std::unique_ptr<harness::Process> process;
  std::string stderr_path;
  std::string valgrind_log;
  /// The stage's stderr so far.
  [[nodiscard]] std::string log() const;
};

/// Starts `stage`'s `build` binary on port 0 with `flags`, after `prefix` (e.g. prlimit). Throws
/// when there is no such binary or it does not print its listening line in time.
Launched launch(const StageInfo& stage, const std::string& build,
                const std::vector<std::string>& flags, const CheckContext& ctx,
                const std::string& tag, const std::vector<std::string>& prefix = {});

/// Collects pass/fail lines for a check's report.
class Verdict {
 public:
  /// One line, "[pass] what" or "[FAIL] what" with `detail` under it.
  void expect(bool ok, const std::string& what, const std::string& detail = "");
  /// A line that is neither.
  void note(const std::string& text) { lines_ += text + "\n"; }
  [[nodiscard]] bool passed() const { return passed_; }
  [[nodiscard]] const std::string& text() const { return lines_; }

 private:
  bool passed_ = true;
  std::string lines_;
};

/// "got status 200, 5 body bytes, X-Cache 'MISS'".
std::string describe(const testing_support::HttpResponse& r);

/// GET (or `method`) `url` through the proxy on `port`; nullopt with `error` set on failure.
std::optional<testing_support::HttpResponse> try_fetch(
    std::uint16_t port, const std::string& url, std::string& error,
    std::chrono::milliseconds timeout = std::chrono::seconds(10),
    const std::vector<std::string>& extra = {}, const std::string& method = "GET");

/// "exited with status 0", "was killed by signal 11 (Segmentation fault)", ...
std::string exit_text(const harness::ExitStatus& s);

/// SIGTERM, and expects an exit 0 within 10 s. Returns how it ended, with its stdout after the
/// listening line (the stats line).
harness::ExitStatus expect_clean_stop(Verdict& v, Launched& stage);

// The checks, one function each; `index` is the repeat (0-based) for the repeated ones.
RunOutcome check_correctness(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
RunOutcome check_concurrency(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
RunOutcome check_cache(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
RunOutcome check_shutdown(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
RunOutcome check_worker_exception(const CheckSpec& spec, const StageInfo& stage,
                                  const CheckContext& ctx);
RunOutcome check_races(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                       int index);
/// Stage 4: the races check's stress under the rubric's own flags for it (every miss through
/// the worker queue, few workers, CoDel shedding within milliseconds), so that the poller's
/// side of the queue (submit, enqueue, the queueing delay it reads) and the workers' (taking a
/// job, refusing one that waited too long) run at once under ThreadSanitizer. Fails too, with
/// no evidence, when the stats line shows that no request ever waited in the queue.
RunOutcome check_queue_races(const CheckSpec& spec, const StageInfo& stage,
                             const CheckContext& ctx, int index);
RunOutcome check_deadlock(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                          int index);
RunOutcome check_memory(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                        int index);
RunOutcome measure_throughput(const CheckSpec& spec, const StageInfo& stage,
                              const CheckContext& ctx);
/// A response the origin resets mid-body (Content-Length not reached) is never stored: the
/// same URL afterwards reaches the origin and arrives whole, byte-exact (checks_escapes.cpp).
RunOutcome check_cut_off(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
/// Pool stages under a flood with --workers 1: no more than --queue clients (plus the one the
/// accept loop holds) wait inside the proxy, measured by its open descriptors; every client is
/// then answered (checks_escapes.cpp).
RunOutcome check_queue_bound(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
/// Stage 4: --origin-limit N holds at the origin under a burst of misses, a hit never waits for
/// the limit, and a permit comes back when its request ends (not at its client's hang-up)
/// (checks_origin_limit.cpp).
RunOutcome check_origin_limit(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
/// Stage 4: --origin-limit auto against one origin serving a fast and a slow path alike; after
/// a probe re-measured the unloaded latency, the limit must not collapse (/metrics)
/// (checks_origin_limit.cpp).
RunOutcome check_mixed_paths(const CheckSpec& spec, const StageInfo& stage,
                             const CheckContext& ctx);
/// Stage 4: load shedding by queueing delay (CoDel). Behind one busy worker a long but young
/// queue is not shed, a standing queue refuses a newcomer at once with 503, and a drained queue
/// stops refusing (checks_shedding.cpp).
RunOutcome check_shedding(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
/// Stage 4: a POST reaches the origin at most once when the origin drops the kept connection it
/// could have taken, and is answered (checks_post_once.cpp).
RunOutcome check_post_once(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);
/// Stage 4: clients that do not read for a moment, then read slowly, get every response whole
/// and byte-exact, the poller's hits and the workers' alike, pipelined or not
/// (checks_slow_reader.cpp).
RunOutcome check_slow_reader(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);

}  // namespace grader
