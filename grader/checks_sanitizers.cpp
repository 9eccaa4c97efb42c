// The sanitizer checks: a stress load with a lull and a SIGTERM in the middle, watched by a
// hang watchdog, under ThreadSanitizer (races, deadlock; queue-races, stage 4's worker queue
// under a load of its own) or Valgrind memcheck (memory).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "check_support.h"
#include "evidence.h"
#include "origin_server.h"
#include "support.h"

namespace grader {

using namespace std::chrono_literals;
using Clock = CheckClock;
using testing_support::HttpResponse;
using json = nlohmann::json;

namespace {

/// One ThreadSanitizer report: its kind ("data race", "lock-order-inversion (potential
/// deadlock)", ...) and its full text, both stacks included.
struct TsanReport {
  std::string kind;
  std::string text;
};

std::vector<TsanReport> tsan_reports(const std::string& log) {
  std::vector<TsanReport> reports;
  const std::string marker = "WARNING: ThreadSanitizer: ";
  std::size_t at = 0;
  while ((at = log.find(marker, at)) != std::string::npos) {
    std::size_t start = log.rfind("==================", at);
    if (start == std::string::npos || at - start > 40) start = at;
    std::size_t end = log.find("==================", at);
    end = end == std::string::npos ? log.size() : end + 18;
    // "data race (pid=12)", "lock-order-inversion (potential deadlock) (pid=12)": the kind is
    // all of it before the pid, spaces included.
    const std::size_t line_end = std::min(log.find('\n', at), log.size());
    std::size_t kind_end = std::min(log.find(" (pid=", at), line_end);
    std::string kind = log.substr(at + marker.size(), kind_end - at - marker.size());
    if (log.compare(at + marker.size(), 20, "lock-order-inversion") == 0) {
      kind = "lock-order-inversion";
    }
    reports.push_back({kind, log.substr(start, end - start)});
    at = end;
  }
  return reports;
}

/// What one stress run saw.
struct StressRun {
  bool hung = false;
  std::string hang_when;  ///< "under load" or "after SIGTERM"
  std::string stacks;     ///< gdb's thread apply all bt, when hung
  bool died_early = false;
  bool full_at_stop = false;  ///< pool stages: workers busy, queue full when SIGTERM came
  harness::ExitStatus status;
  long completed = 0;
  long errors = 0;
  long errors_before_stop = 0;  ///< failed before SIGTERM (after it, refusals are expected)
  std::string log;           ///< the stage's stderr
  std::string stats;         ///< its stdout after the listening line: the stats line at exit
  std::string valgrind_log;  ///< memcheck's log, under Valgrind
  std::string log_path;       ///< where the full stderr is kept
  std::string valgrind_path;  ///< where memcheck's full log is kept ("" without Valgrind)
  std::string stacks_path;    ///< where gdb's full stacks are kept, when hung
  /// Descriptors the stage held at the hang beyond those it held idle: the clients it had
  /// accepted (in the accept loop's hands, queued, being served) and origin connections; -1
  /// when it did not hang.
  long held_at_hang = -1;
  /// The load made no progress: it hung, or not one response completed. Races, memory and the
  /// TSan part of deadlock have no evidence then and give no points.
  [[nodiscard]] bool served_nothing() const { return hung || completed == 0; }
};

/// The path a stress client asks for on its `k`th request: half are hits on three objects,
/// the rest misses, slow misses (a delayed origin) and large objects that evict each other.
std::string stress_path(int client, long k) {
  const std::string id = std::to_string(client) + "-" + std::to_string(k);
  switch ((k + client) % 10) {
    case 0: case 1: case 2: case 3: case 4: return "/bytes/3000?hit=" + std::to_string(k % 3);
    case 5: case 6: return "/bytes/1500?miss=" + id;
    case 7: return "/delay/20/bytes/800?slow=" + id;
    default: return "/bytes/6000?evict=" + std::to_string(k % 8);
  }
}

/// The stress load: `clients` threads, each sending stress_path requests one after another
/// through the proxy until stopped, holding back while paused (the lull). Counts what
/// completed and failed, and when a response last completed, for the watchdog.
/// Thread-safety: the observers and pause/resume may be called from any thread; stop() and
/// the destructor join the client threads.
class StressLoad {
 public:
  StressLoad(int clients, std::uint16_t port, std::string base)
      : port_(port), base_(std::move(base)) {
    for (int t = 0; t < clients; ++t) threads_.emplace_back([this, t] { client(t); });
  }
  ~StressLoad() { stop(); }
  StressLoad(const StressLoad&) = delete;
  StressLoad& operator=(const StressLoad&) = delete;

  /// Ends the load and joins the client threads. Idempotent.
  void stop() {
    stop_ = true;
    threads_.clear();
  }
  void pause() { paused_ = true; }
  /// Ends the lull; the watchdog counts its stall time from now.
  void resume() {
    last_progress_.store(Clock::now().time_since_epoch().count());
    paused_ = false;
  }
  [[nodiscard]] int in_flight() const { return in_flight_.load(); }
  [[nodiscard]] long completed() const { return completed_.load(); }
  [[nodiscard]] long errors() const { return errors_.load(); }
  /// Seconds since a response last completed (or since the load started or resumed).
  [[nodiscard]] double seconds_since_progress() const {
    Clock::time_point last{Clock::duration(last_progress_.load())};
    return std::chrono::duration<double>(Clock::now() - last).count();
  }

 private:
  void client(int t) {
    for (long k = 0; !stop_.load(); ++k) {
      while (paused_.load() && !stop_.load()) {
        std::this_thread::sleep_for(5ms);  // the lull in the load profile
      }
      in_flight_.fetch_add(1);
      struct Done {
        std::atomic<int>& count;
        ~Done() { count.fetch_sub(1); }
      } done{in_flight_};
      try {
        proxy::Socket s = testing_support::send_request(
            port_, testing_support::proxy_get(base_ + stress_path(t, k)));
        auto r = testing_support::read_response(s, 120s);
        if (r && r->complete) {
          completed_.fetch_add(1);
          last_progress_.store(Clock::now().time_since_epoch().count());
        } else {
          errors_.fetch_add(1);
        }
      } catch (const std::exception&) {
        errors_.fetch_add(1);
        if (stop_.load()) break;
        std::this_thread::sleep_for(5ms);  // refused: the stage is stopping; back off a little
      }
    }
  }

  const std::uint16_t port_;
  const std::string base_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<long> completed_{0}, errors_{0};
  std::atomic<Clock::rep> last_progress_{Clock::now().time_since_epoch().count()};
  std::vector<std::jthread> threads_;  // last: joined (by stop) before the fields above go
};

/// How long each phase of a stress run may take, from the check's params.
struct StressTimes {
  double load_s;   ///< how long the load runs (at least)
  double stall_s;  ///< no response for this long under load is a hang
  double exit_s;   ///< still running this long after SIGTERM is a hang
  std::chrono::milliseconds lull;  ///< the idle period halfway through
};

/// Records a hang in `run`: when it was seen, and every thread's stack from gdb (kept in full
/// in the work directory, condensed in the run).
void record_hang(StressRun& run, const std::string& when, pid_t pid, std::size_t idle_fds,
                 const CheckContext& ctx, const std::string& tag) {
  run.hung = true;
  run.hang_when = when;
  // Before gdb attaches. Where the sleeping threads wait says who waits; this says whether a
  // client waits in the queue (a worker missed it) or none does (the accept loop missed the
  // room a pop made).
  run.held_at_hang = static_cast<long>(fd_count(pid)) - static_cast<long>(idle_fds);
  const std::string stacks = thread_stacks(pid, ctx.gdb);
  run.stacks_path = ctx.work_dir + "/" + tag + ".stacks";
  std::ofstream(run.stacks_path) << stacks;
  run.stacks = condense_gdb_stacks(stacks);
}

/// The watchdog over the load: returns once the load has run its time and responses are
/// flowing (one in the last second), or with `run` marked hung or died_early. A stage that
/// stopped answering gets stall_s to recover before it is called hung, however short the
/// load. Halfway, a lull: no request at all until every worker has gone idle and waits for
/// work, then the load comes back. A lost wakeup (a push nobody is told about) only shows
/// when every worker is asleep; a busy pool hides it.
void watch_load(StressLoad& load, harness::Process& process, const StressTimes& times,
                std::size_t idle_fds, const CheckContext& ctx, const std::string& tag,
                StressRun& run) {
  const std::string stalled_text = "under load: no response completed for " +
                                   std::to_string(int(times.stall_s)) +
                                   " s while the process was alive";
  auto stalled = [&] { return load.seconds_since_progress() > times.stall_s; };
  const auto start = Clock::now();
  bool lull_done = false;
  for (;;) {
    if (!process.running()) {
      run.died_early = true;
      return;
    }
    if (stalled()) return record_hang(run, stalled_text, process.pid(), idle_fds, ctx, tag);
    if (!lull_done && seconds_since(start) >= times.load_s / 2) {
      lull_done = true;
      load.pause();
      // In-flight requests must finish on their own; if they stall, that is the hang.
      const bool drained = eventually(
          [&] { return load.in_flight() == 0 || stalled() || !process.running(); },
          std::chrono::seconds(int(times.stall_s) + 5));
      if (!process.running()) {
        run.died_early = true;
        return;
      }
      if (!drained || load.in_flight() != 0) {
        return record_hang(run, stalled_text, process.pid(), idle_fds, ctx, tag);
      }
      std::this_thread::sleep_for(times.lull);  // the idle period itself, not a wait for a condition
      load.resume();
    }
    if (seconds_since(start) >= times.load_s && load.seconds_since_progress() < 1.0) return;
    std::this_thread::sleep_for(50ms);  // the watchdog's polling period
  }
}

/// How long the origin holds each request sent at the stop, in ms: long enough that workers
/// busy with them cannot make room before the stop is taken, even under Valgrind.
constexpr int kSlowAtStopMs = 3000;

/// Pool stages: makes the stop land on a full house — every worker busy with a slow origin,
/// the queue full and the accept loop holding one more client, the paths a shutdown bug
/// hides in. Returns the slow clients' sockets (kept open until the stage is gone) and sets
/// run.full_at_stop when the house is known to be full.
///
/// Slow clients enough for the whole house (workers, queue, the accept loop's hand), so that
/// the house is full whatever the load is doing (it may be between requests); and the stop is
/// sent only once the origin has seen one slow request per worker and the stage's descriptors
/// show the rest queued: then no worker can make room for kSlowAtStop, and the accept loop is
/// certainly waiting in push when SIGTERM lands. A full descriptor count alone once passed
/// while workers were finishing fast requests; the stop then found room, the accept loop never
/// took its stop path, and a client leaked on that path went unseen.
std::vector<proxy::Socket> fill_the_house(const json& params, std::uint16_t port,
                                          const std::string& base, pid_t pid,
                                          std::size_t idle_fds, StressRun& run,
                                          const harness::OriginServer& origin) {
  std::vector<proxy::Socket> slow;
  const int workers = params.value("workers", 2), queue = params.value("queue", 2);
  const std::string slow_path = "/delay/" + std::to_string(kSlowAtStopMs) + "/bytes/100";
  for (int i = 0; i < workers + queue + 1; ++i) {
    try {
      slow.push_back(testing_support::send_request(
          port, testing_support::proxy_get(base + slow_path + "?at-stop=" + std::to_string(i))));
    } catch (const std::exception&) {
    }
  }
  const std::size_t full = idle_fds + 2 * workers + queue + 1;
  run.full_at_stop = eventually(
      [&] {
        return origin.request_count(slow_path) >= static_cast<std::uint64_t>(workers) &&
               fd_count(pid) >= full;
      },
      8s);
  return slow;
}

/// SIGTERM, then a wait of up to exit_s for the stage to exit; still running is a hang.
void terminate(harness::Process& process, double exit_s, std::size_t idle_fds,
               const CheckContext& ctx, const std::string& tag, StressRun& run) {
  process.send_signal(SIGTERM);
  const auto term = Clock::now();
  while (process.running() && seconds_since(term) < exit_s) {
    std::this_thread::sleep_for(50ms);
  }
  if (process.running()) {
    record_hang(run, "after SIGTERM: still running " + std::to_string(int(exit_s)) + " s later",
                process.pid(), idle_fds, ctx, tag);
  }
}

/// Concurrent clients send a mix of hits, misses, delayed misses and objects that evict each
/// other; a watchdog notices when responses stop arriving; SIGTERM lands in the middle of it.
StressRun stress(const StageInfo& stage, const std::string& build, const json& params,
                 const CheckContext& ctx, const std::string& tag) {
  harness::OriginServer origin(harness::OriginOptions{.threads = 2});
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  std::vector<std::string> flags = pool_flags(stage, params);
  flags.insert(flags.end(), {"--cache-bytes", std::to_string(params.value("cache_bytes", 30000)),
                             "--max-object-bytes",
                             std::to_string(params.value("max_object_bytes", 8000))});
  // A check's own load shape on the stage it grades (queue-races: every miss through the worker
  // queue, CoDel shedding within milliseconds).
  for (const json& flag : params.value("flags", json::array())) {
    flags.push_back(flag.get<std::string>());
  }
  Launched proxy = launch(stage, build, flags, ctx, tag);
  harness::Process& process = *proxy.process;
  const std::uint16_t port = process.port();
  const pid_t pid = process.pid();
  const std::size_t idle_fds = fd_count(pid);
  const StressTimes times{params.value(ctx.quick ? "quick_seconds" : "seconds", 3.0),
                          params.value("stall_seconds", 8.0), params.value("exit_seconds", 15.0),
                          std::chrono::milliseconds(params.value("lull_ms", 300))};

  StressLoad load(params.value("clients", 12), port, base);
  StressRun run;
  watch_load(load, process, times, idle_fds, ctx, tag, run);
  std::vector<proxy::Socket> slow;
  // queue-races leaves it out: its shedding refuses the slow requests while the load keeps the
  // queue standing, so the house would seldom fill, and its stop finds a queue anyway.
  if (!run.hung && !run.died_early && stage.pool && params.value("fill_at_stop", true)) {
    slow = fill_the_house(params, port, base, pid, idle_fds, run, origin);
  }
  run.errors_before_stop = load.errors();
  if (!run.hung && !run.died_early) terminate(process, times.exit_s, idle_fds, ctx, tag, run);
  run.status = process.stop(0ms);  // SIGKILL if still alive
  load.stop();
  run.completed = load.completed();
  run.errors = load.errors();
  run.log = proxy.log();
  run.stats = process.output();
  run.log_path = proxy.stderr_path;
  run.valgrind_path = proxy.valgrind_log;
  if (!proxy.valgrind_log.empty()) run.valgrind_log = slurp(proxy.valgrind_log);
  return run;
}

std::string run_header(const StressRun& run, int index) {
  return "run " + std::to_string(index + 1) + ": " + std::to_string(run.completed) +
         " responses completed; " + std::to_string(run.errors_before_stop) +
         " requests failed before the SIGTERM, " +
         std::to_string(run.errors - run.errors_before_stop) +
         " after it (refused or cut: expected); the stage " +
         (run.hung ? "HUNG " + run.hang_when : exit_text(run.status)) +
         (run.full_at_stop ? "; SIGTERM came with every worker busy and the queue full" : "") +
         "\n";
}

/// The blocks of a Valgrind log that matter to a student: errors with their stacks, the leak
/// summary, and open descriptors at exit.
std::string valgrind_findings(const std::string& log, bool& clean) {
  clean = true;
  int shown = 0;
  std::string out;
  std::stringstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (auto bar = line.find("== "); line.rfind("==", 0) == 0 && bar != std::string::npos) {
      line = line.substr(bar + 3);
    }
    lines.push_back(line);
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    bool error = line.rfind("Invalid read", 0) == 0 || line.rfind("Invalid write", 0) == 0 ||
                 line.rfind("Invalid free", 0) == 0 || line.find("uninitialised") != std::string::npos ||
                 line.find("definitely lost in loss record") != std::string::npos ||
                 line.rfind("Open AF_", 0) == 0 || line.rfind("Open file descriptor", 0) == 0;
    if (line.rfind("Open file descriptor", 0) == 0 &&
        (line.find("<inherited from parent>") != std::string::npos ||
         (lines.size() > i + 1 && lines[i + 1].find("<inherited from parent>") != std::string::npos))) {
      error = false;  // stdin/stdout/stderr and the log file
    }
    if (line.rfind("Open file descriptor", 0) == 0 && line.find(".valgrind") != std::string::npos) {
      error = false;
    }
    if (!error) continue;
    clean = false;
    // The first few errors, each with the top of its stack: the rest are in the full log.
    if (++shown > 3) continue;
    for (std::size_t j = i; j < lines.size() && j < i + 12 && !(j > i && lines[j].empty()); ++j) {
      out += lines[j] + "\n";
    }
    out += "\n";
  }
  if (shown > 3) out += "(" + std::to_string(shown - 3) + " more errors in the full log)\n";
  for (const std::string& line : lines) {
    if (line.find("definitely lost:") != std::string::npos ||
        line.find("ERROR SUMMARY") != std::string::npos ||
        line.find("FILE DESCRIPTORS:") != std::string::npos) {
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace

/// The sanitizer's crash report, cut to the student's frames, or the end of the stderr.
std::string crash_text(const StressRun& run) {
  std::string report = crash_report(run.log);
  return report.empty() ? "The end of its stderr:\n" + tail(run.log, 1500)
                        : "The sanitizer's report (stacks cut to your code):\n" + report;
}

/// The line a check that needs the load to progress gives instead of points when it did not.
std::string served_nothing_text(const StressRun& run) {
  return "\nNO POINTS: the stage served nothing under load — see the deadlock check (" +
         (run.hung ? "it HUNG " + run.hang_when
                   : std::to_string(run.completed) + " responses completed") +
         "). Without a load that makes progress this check has no evidence to judge.\n";
}

namespace {

/// The races check's judgement of one stress run under TSan: no data race (nor heap misuse)
/// reported, no crash, and some progress. `evidence` goes under the run's header.
RunOutcome judge_races(const StressRun& run, int index, const std::string& evidence) {
  std::string out = run_header(run, index) + evidence;
  bool ok = !run.served_nothing();
  if (!ok) out += served_nothing_text(run);
  std::vector<TsanReport> reports = tsan_reports(run.log);
  std::erase_if(reports, [](const TsanReport& r) { return r.kind == "lock-order-inversion"; });
  if (!reports.empty()) {
    ok = false;
    // The first report is the one to fix first; the others often follow from it.
    out += "\nThreadSanitizer found a " + reports[0].kind + " (its stacks cut to your code):\n" +
           student_frames(reports[0].text);
    if (reports.size() > 1) {
      out += "(" + std::to_string(reports.size() - 1) + " more ThreadSanitizer reports)\n";
    }
  }
  if (run.died_early || (!run.hung && run.status.signal != 0)) {
    ok = false;
    out += "\nThe stage crashed under load. " + crash_text(run);
  }
  if (ok) out += "  no ThreadSanitizer report\n";
  out += "  full log: " + run.log_path + "\n";
  return {ok, out, {}};
}

/// The number after `key` (e.g. " shed=") in stage 4's stats line, or -1 when it is not there.
long stats_field(const std::string& stats, const std::string& key) {
  const std::size_t at = stats.find(key);
  if (at == std::string::npos) return -1;
  return std::strtol(stats.c_str() + at + key.size(), nullptr, 10);
}

}  // namespace

RunOutcome check_races(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                       int index) {
  return judge_races(stress(stage, "tsan", spec.params, ctx, "races-" + std::to_string(index)),
                     index, "");
}

RunOutcome check_queue_races(const CheckSpec& spec, const StageInfo& stage,
                             const CheckContext& ctx, int index) {
  const StressRun run =
      stress(stage, "tsan", spec.params, ctx, "queue-races-" + std::to_string(index));
  // Stage 4's stats line says whether the load used the queue it is about: requests waited in
  // it (the poller pushed while workers popped) and some were refused (submit, or a worker
  // reaching one that waited too long). Without a queue the run has nothing to judge.
  const long peak = stats_field(run.stats, " peak_queued=");
  const long shed = stats_field(run.stats, " shed=");
  std::string evidence;
  if (peak >= 0) {
    evidence = "  the worker queue: up to " + std::to_string(peak) + " requests waiting at once, " +
               std::to_string(shed) + " refused with 503 (the stats line's peak_queued, shed)\n";
  }
  RunOutcome outcome = judge_races(run, index, evidence);
  if (peak == 0) {
    outcome.passed = false;
    outcome.output += "\nNO POINTS: no request waited in the worker queue (peak_queued=0): the "
                      "load never reached the queue this check is about. Does submit queue "
                      "anything (enqueue)?\n";
  }
  return outcome;
}

RunOutcome check_deadlock(const CheckSpec& spec, const StageInfo& stage,
                          const CheckContext& ctx, int index) {
  StressRun run = stress(stage, spec.build, spec.params, ctx, "deadlock-" + std::to_string(index));
  std::string out = run_header(run, index);
  bool ok = true;
  if (run.hung) {
    ok = false;
    out += "\nThe watchdog found a hang (" + run.hang_when +
           "). Every thread's stack, from gdb, before the process was killed (your frames with "
           "file:line; full stacks: " + run.stacks_path + "):\n" + run.stacks +
           "At the hang the stage held " + std::to_string(run.held_at_hang) +
           " descriptors more than when idle (the clients it had accepted, in its accept "
           "loop's hands, queued or being served, and connections to origins).\n";
    // A memory error before the hang is its likely cause (a client lost to a use-after-free
    // leaves every worker idle, which the stacks alone would show as a lost wakeup).
    for (const TsanReport& report : tsan_reports(run.log)) {
      if (report.kind == "lock-order-inversion") continue;
      out += "\nBefore the hang ThreadSanitizer reported a " + report.kind +
             " (a likely cause; stacks cut to your code):\n" + student_frames(report.text) + "\n";
      break;  // the first one; the full log has the rest
    }
  } else if (run.completed == 0 && !run.died_early) {
    ok = false;
    out += "\nNot one response completed under load, so no lock order was exercised.\n";
  }
  bool inversion_shown = false;
  for (const TsanReport& report : tsan_reports(run.log)) {
    if (report.kind != "lock-order-inversion") continue;
    ok = false;
    if (inversion_shown) continue;  // the first one; the full log has the rest
    inversion_shown = true;
    out += "\nThreadSanitizer found two locks taken in opposite orders (a deadlock waiting to "
           "happen; stacks cut to your code):\n" + student_frames(report.text) + "\n";
  }
  if (run.died_early) {
    ok = false;
    out += "\nThe stage died under load. " + crash_text(run);
  }
  if (ok) out += "  responses kept completing, it stopped on SIGTERM, no lock-order inversion\n";
  out += "  full log: " + run.log_path + "\n";
  return {ok, out, {}};
}

RunOutcome check_memory(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                        int index) {
  StressRun run = stress(stage, "debug", spec.params, ctx, "memory-" + std::to_string(index));
  std::string out = run_header(run, index);
  bool clean = true;
  std::string findings = valgrind_findings(run.valgrind_log, clean);
  bool ok = clean && !run.served_nothing() && !run.died_early && run.status.clean();
  if (run.served_nothing()) out += served_nothing_text(run);
  if (!run.status.clean() && !run.hung) {
    out += "\nNot a clean exit. The end of its stderr:\n" + tail(run.log, 1500);
  }
  out += "\nValgrind memcheck (the first errors, definitely lost bytes, descriptors open at "
         "exit; full log: " + run.valgrind_path + "):\n" + findings;
  return {ok, out, {}};
}

}  // namespace grader
