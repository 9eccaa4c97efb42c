// The checks themselves. Each runs real stage processes against an in-process scripted origin
// and judges only what a client, the process table, ThreadSanitizer or Valgrind can see, so
// the same code grades the reference and a student's tree. Every wait has a deadline: a hung
// submission fails its check instead of hanging the grader.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "../tests/blackbox/http_client.h"
#include "grader.h"
#include "launcher.h"
#include "origin_server.h"
#include "wrk.h"

namespace grader {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing_support::HttpResponse;
using json = nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Runs a shell command, returning its combined output (at most `limit` bytes kept).
std::string run_capture(const std::string& command, std::size_t limit = 200'000) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return "(cannot run: " + command + ")";
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) {
    if (out.size() < limit) out.append(buf.data(), n);
  }
  ::pclose(pipe);
  return out;
}

/// Every thread's stack of a live process, from gdb (the hang watchdog's evidence).
std::string thread_stacks(pid_t pid, const std::string& gdb) {
  std::string out = run_capture("timeout 90 " + gdb + " -p " + std::to_string(pid) +
                                " -batch -ex 'set pagination off' -ex 'thread apply all bt' "
                                "</dev/null");
  // Keep the stacks; drop gdb's chatter about loading symbols.
  std::stringstream in(out);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[New LWP", 0) == 0 || line.rfind("[Thread debugging", 0) == 0 ||
        line.rfind("Using host libthread_db", 0) == 0 || line.find("No such file or directory") !=
                                                              std::string::npos) {
      continue;
    }
    kept += line + "\n";
  }
  return kept;
}

std::size_t fd_count(pid_t pid) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);  // polling a condition with a deadline, not a fixed wait
  }
  return condition();
}

/// A port nothing listens on: bound, then closed.
std::uint16_t dead_port() {
  proxy::Socket s = proxy::listen_tcp("127.0.0.1", 0);
  std::uint16_t port = proxy::local_port(s);
  s.close();
  return port;
}

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
    std::size_t kind_end = log.find_first_of(" \n(", at + marker.size());
    std::string kind = log.substr(at + marker.size(), kind_end - at - marker.size());
    if (log.compare(at + marker.size(), 20, "lock-order-inversion") == 0) {
      kind = "lock-order-inversion";
    }
    reports.push_back({kind, log.substr(start, end - start)});
    at = end;
  }
  return reports;
}

/// The stage's flags for a run: pool stages get the rubric's --workers / --queue.
std::vector<std::string> pool_flags(const StageInfo& stage, const json& params) {
  std::vector<std::string> flags;
  if (!stage.pool) return flags;
  if (params.contains("workers")) {
    flags.insert(flags.end(), {"--workers", std::to_string(params["workers"].get<int>())});
  }
  if (params.contains("queue")) {
    flags.insert(flags.end(), {"--queue", std::to_string(params["queue"].get<int>())});
  }
  return flags;
}

/// A stage process started the way the check's build needs: plain, under TSan with reports
/// kept going, or under Valgrind memcheck. Its stderr goes to a file in the work directory.
struct Launched {
  std::unique_ptr<harness::Process> process;
  std::string stderr_path;
  std::string valgrind_log;
  [[nodiscard]] std::string log() const { return slurp(stderr_path); }
};

Launched launch(const StageInfo& stage, const std::string& build,
                const std::vector<std::string>& flags, const CheckContext& ctx,
                const std::string& tag, const std::vector<std::string>& prefix = {}) {
  auto binary = stage.binaries.find(build);
  if (binary == stage.binaries.end()) throw std::runtime_error("no " + build + " binary");
  Launched launched;
  launched.stderr_path = ctx.work_dir + "/" + tag + ".stderr";
  std::vector<std::string> argv = prefix;
  if (build == "debug") {
    launched.valgrind_log = ctx.work_dir + "/" + tag + ".valgrind";
    argv.insert(argv.end(),
                {"valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite",
                 "--errors-for-leak-kinds=definite", "--track-fds=yes", "--num-callers=30",
                 "--log-file=" + launched.valgrind_log});
  }
  argv.push_back(binary->second);
  argv.insert(argv.end(), {"--port", "0"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (build == "tsan") {
    // Keep going after the first report so one run shows them all; a second stack for
    // lock-order inversions shows where each mutex was taken.
    ::setenv("TSAN_OPTIONS", "halt_on_error=0 second_deadlock_stack=1 report_signal_unsafe=0",
             1);
  }
  harness::ProcessOptions options;
  options.stderr_path = launched.stderr_path;
  options.ready_timeout = build == "release" ? 15s : 90s;
  launched.process = std::make_unique<harness::Process>(argv, options);
  return launched;
}

/// Collects pass/fail lines for a check's report.
class Verdict {
 public:
  void expect(bool ok, const std::string& what, const std::string& detail = "") {
    lines_ += std::string(ok ? "  [pass] " : "  [FAIL] ") + what;
    if (!ok && !detail.empty()) lines_ += "\n         " + detail;
    lines_ += "\n";
    if (!ok) passed_ = false;
  }
  void note(const std::string& text) { lines_ += text + "\n"; }
  [[nodiscard]] bool passed() const { return passed_; }
  [[nodiscard]] const std::string& text() const { return lines_; }

 private:
  bool passed_ = true;
  std::string lines_;
};

std::string describe(const HttpResponse& r) {
  return "got status " + std::to_string(r.status) + ", " + std::to_string(r.body.size()) +
         " body bytes, X-Cache '" + r.field("X-Cache") + "'" + (r.complete ? "" : ", incomplete");
}

std::optional<HttpResponse> try_fetch(std::uint16_t port, const std::string& url,
                                      std::string& error,
                                      std::chrono::milliseconds timeout = 10s,
                                      const std::vector<std::string>& extra = {},
                                      const std::string& method = "GET") {
  try {
    return testing_support::exchange(port, testing_support::proxy_get(url, extra, 1, method),
                                     timeout);
  } catch (const std::exception& e) {
    error = e.what();
    return std::nullopt;
  }
}

std::string exit_text(const harness::ExitStatus& s) {
  if (s.killed) return "did not exit within the grace period and was killed";
  if (s.signal != 0) return "was killed by signal " + std::to_string(s.signal) + " (" +
                            ::strsignal(s.signal) + ")";
  return "exited with status " + std::to_string(s.exit_code);
}

void expect_clean_stop(Verdict& v, Launched& stage) {
  harness::ExitStatus s = stage.process->stop(10s);
  v.expect(s.clean(), "SIGTERM: the stage stops and exits 0", "it " + exit_text(s) + "\n" +
                                                                  stage.log().substr(0, 4000));
}

// ---- correctness ---------------------------------------------------------------------------

RunOutcome check_correctness(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  harness::OriginServer origin;
  auto url = [&](const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(origin.port()) + path;
  };
  Launched proxy = launch(stage, "release", {"--origin-timeout-ms", "1500"}, ctx, "correctness");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  std::string err;

  if (auto r = try_fetch(port, url("/anything/text?x=1"), err)) {
    v.expect(r->status == 200 && r->body.find("\"target\":\"/anything/text?x=1\"") !=
                                     std::string::npos,
             "text: GET /anything/text?x=1 relays the origin's JSON echo", describe(*r));
  } else {
    v.expect(false, "text: GET /anything/text?x=1", err);
  }
  for (std::size_t n : {std::size_t{5'000}, std::size_t{3'000'000}}) {
    std::string what = (n > 100'000 ? "large binary (over the cache's object limit): /bytes/"
                                    : "binary: /bytes/") + std::to_string(n) + " byte-exact";
    if (auto r = try_fetch(port, url("/bytes/" + std::to_string(n)), err, 30s)) {
      bool exact = r->body == harness::deterministic_bytes(n);
      v.expect(r->status == 200 && r->complete && exact, what,
               describe(*r) + (exact ? "" : ", body differs from the origin's"));
    } else {
      v.expect(false, what, err);
    }
  }
  if (auto r = try_fetch(port, url("/stream-bytes/20000"), err)) {
    v.expect(r->status == 200 && r->body == harness::deterministic_bytes(20'000),
             "chunked: /stream-bytes/20000 decoded byte-exact", describe(*r));
  } else {
    v.expect(false, "chunked: /stream-bytes/20000", err);
  }
  if (auto r = try_fetch(port, url("/headers"), err, 10s,
                         {"User-Agent: grader/1", "Proxy-Connection: keep-alive",
                          "Keep-Alive: 300", "Connection: keep-alive", "X-End-To-End: kept"})) {
    const std::string& sent = r->body;
    const std::string host = "Host: 127.0.0.1:" + std::to_string(origin.port()) + "\r\n";
    v.expect(sent.find(host) != std::string::npos, "header rewriting: Host names the origin",
             "the origin received:\n" + sent);
    v.expect(sent.find("Connection: close\r\n") != std::string::npos,
             "header rewriting: Connection: close to the origin", "the origin received:\n" + sent);
    v.expect(sent.find("X-End-To-End: kept\r\n") != std::string::npos &&
                 sent.find("User-Agent: grader/1\r\n") != std::string::npos,
             "header rewriting: end-to-end fields are forwarded unchanged",
             "the origin received:\n" + sent);
    v.expect(sent.find("Proxy-Connection") == std::string::npos &&
                 sent.find("Keep-Alive") == std::string::npos,
             "header rewriting: hop-by-hop fields (Proxy-Connection, Keep-Alive) are dropped",
             "the origin received:\n" + sent);
    v.expect(!r->field("X-Cache").empty(), "every response carries X-Cache", describe(*r));
  } else {
    v.expect(false, "header rewriting: GET /headers", err);
  }
  auto expect_status = [&](const std::string& what, const std::string& request, int status) {
    try {
      HttpResponse r = testing_support::exchange(port, request, 10s);
      v.expect(r.status == status, what + " -> " + std::to_string(status), describe(r));
    } catch (const std::exception& e) {
      v.expect(false, what + " -> " + std::to_string(status), e.what());
    }
  };
  expect_status("malformed request line", "THIS IS NOT HTTP\r\n\r\n", 400);
  expect_status("TRACE (unsupported method)",
                testing_support::proxy_get(url("/anything"), {"Content-Length: 0"}, 1, "TRACE"),
                501);
  expect_status("unreachable origin",
                testing_support::proxy_get("http://127.0.0.1:" + std::to_string(dead_port()) +
                                           "/bytes/10"),
                502);
  expect_status("origin that never answers (--origin-timeout-ms 1500)",
                testing_support::proxy_get(url("/stall")), 504);
  if (auto r = try_fetch(port, url("/bytes/10"), err)) {
    v.expect(r->status == 200, "still serving after the errors", describe(*r));
  } else {
    v.expect(false, "still serving after the errors", err);
  }
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

// ---- concurrency ---------------------------------------------------------------------------

RunOutcome check_concurrency(const CheckSpec& spec, const StageInfo& stage,
                             const CheckContext& ctx) {
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {"--origin-timeout-ms", "20000"}, ctx, "concurrency");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  const int wait_ms = spec.params.value("second_request_ms", 3000);
  proxy::Socket stalled =
      testing_support::send_request(port, testing_support::proxy_get(base + "/stall"));
  bool held = origin.wait_for_requests("/stall", 1, 10s);
  v.expect(held, "the first client's request reaches the stalling origin");
  std::string err;
  auto r = try_fetch(port, base + "/bytes/100", err, std::chrono::milliseconds(wait_ms));
  v.expect(r && r->status == 200 && r->body == harness::deterministic_bytes(100),
           "a second client is served within " + std::to_string(wait_ms) +
               " ms while the first waits on a stalled origin",
           r ? describe(*r) : "no response: " + err);
  stalled.close();
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

// ---- cache ---------------------------------------------------------------------------------

RunOutcome check_cache(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  auto origin = std::make_unique<harness::OriginServer>();
  const std::string base = "http://127.0.0.1:" + std::to_string(origin->port());
  Launched proxy = launch(stage, "release", {"--cache-bytes", "10000", "--max-object-bytes",
                                             "5000", "--cache-policy", "lru"},
                          ctx, "cache");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  auto x_cache = [&](const std::string& path) {
    std::string err;
    auto r = try_fetch(port, base + path, err);
    return r ? r->field("X-Cache") : "(no response: " + err + ")";
  };
  // Size limits: an object over --max-object-bytes is never cached.
  std::string a = x_cache("/bytes/6000"), b = x_cache("/bytes/6000");
  v.expect(a == "MISS" && b == "MISS",
           "size limit: a 6000-byte object (over --max-object-bytes 5000) is never a hit",
           "X-Cache was " + a + ", then " + b);
  // LRU eviction: a, b, touch a, c -> b is the least recently used and goes.
  x_cache("/bytes/4000?a");
  x_cache("/bytes/4000?b");
  std::string hit_a = x_cache("/bytes/4000?a");
  v.expect(hit_a == "HIT", "a cached object is served as a hit", "X-Cache was " + hit_a);
  x_cache("/bytes/4000?c");
  std::string after_a = x_cache("/bytes/4000?a"), after_c = x_cache("/bytes/4000?c"),
              after_b = x_cache("/bytes/4000?b");
  v.expect(after_a == "HIT" && after_c == "HIT" && after_b == "MISS",
           "LRU eviction: after a, b, a, c in a 10000-byte cache, b (least recently used) was "
           "evicted and a, c stay",
           "X-Cache for a, c, b was " + after_a + ", " + after_c + ", " + after_b);
  // A hit with the origin gone.
  std::string first = x_cache("/bytes/3000?gone");
  origin->stop();
  std::string err;
  auto r = try_fetch(port, base + "/bytes/3000?gone", err);
  v.expect(first == "MISS" && r && r->status == 200 && r->field("X-Cache") == "HIT" &&
               r->body == harness::deterministic_bytes(3000),
           "a cached object is served byte-exact as a HIT after the origin is stopped",
           r ? "first X-Cache " + first + "; then " + describe(*r) : err);
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

// ---- shutdown ------------------------------------------------------------------------------

RunOutcome check_shutdown(const CheckSpec& spec, const StageInfo& stage,
                          const CheckContext& ctx) {
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  const int waiting = stage.pool ? spec.params.value("queued", 3) : 0;
  std::vector<std::string> flags;
  if (stage.pool) flags = {"--workers", "1", "--queue", std::to_string(waiting + 1)};
  Launched proxy = launch(stage, "release", flags, ctx, "shutdown");
  const std::uint16_t port = proxy.process->port();
  const pid_t pid = proxy.process->pid();
  const std::size_t idle_fds = fd_count(pid);
  Verdict v;
  std::vector<proxy::Socket> clients;
  clients.push_back(testing_support::send_request(
      port, testing_support::proxy_get(base + "/delay/1500/bytes/100")));
  v.expect(origin.wait_for_requests("/delay/", 1, 10s), "a slow request is in flight");
  for (int i = 0; i < waiting; ++i) {
    clients.push_back(testing_support::send_request(
        port, testing_support::proxy_get(base + "/bytes/100?queued=" + std::to_string(i))));
  }
  if (waiting > 0) {
    bool inside = eventually([&] { return fd_count(pid) >= idle_fds + clients.size() + 1; }, 10s);
    v.expect(inside, std::to_string(waiting) + " more clients are accepted and wait for the "
                                                "one worker (--workers 1)");
  }
  harness::ExitStatus status = proxy.process->stop(10s);
  v.expect(status.clean() && status.elapsed < 6s,
           "SIGTERM: exits 0 within 5 s with work in flight",
           "it " + exit_text(status) + " after " + std::to_string(status.elapsed.count()) + " ms");
  for (std::size_t i = 0; i < clients.size(); ++i) {
    auto r = testing_support::read_response(clients[i], 10s);
    bool ok = false;
    std::string got = "no response";
    if (r) {
      got = describe(*r);
      ok = i == 0 ? (r->status == 200 && r->body == harness::deterministic_bytes(100))
                  : (r->status == 503 && r->complete);
    }
    v.expect(ok, i == 0 ? "the in-flight client gets its whole response"
                        : "queued client " + std::to_string(i) +
                              " is told 503 (never reached a worker), not a bare close",
             got);
  }
  return {v.passed(), v.text(), {}};
}

// ---- stress: races, deadlocks, memory ------------------------------------------------------

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
  std::string valgrind_log;  ///< memcheck's log, under Valgrind
};

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
  Launched proxy = launch(stage, build, flags, ctx, tag);
  const std::uint16_t port = proxy.process->port();
  const pid_t pid = proxy.process->pid();
  const std::size_t idle_fds = fd_count(pid);
  const int clients = params.value("clients", 12);
  const double load_s = params.value(ctx.quick ? "quick_seconds" : "seconds", 3.0);
  const double stall_s = params.value("stall_seconds", 8.0);
  const double exit_s = params.value("exit_seconds", 15.0);

  std::atomic<bool> stop{false};
  std::atomic<bool> paused{false};
  std::atomic<int> in_flight{0};
  std::atomic<long> completed{0}, errors{0};
  std::atomic<Clock::rep> last_progress{Clock::now().time_since_epoch().count()};
  std::vector<std::jthread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      for (long k = 0; !stop.load(); ++k) {
        while (paused.load() && !stop.load()) {
          std::this_thread::sleep_for(5ms);  // the lull in the load profile
        }
        in_flight.fetch_add(1);
        struct Done {
          std::atomic<int>& count;
          ~Done() { count.fetch_sub(1); }
        } done{in_flight};
        std::string id = std::to_string(t) + "-" + std::to_string(k);
        std::string path;
        switch ((k + t) % 10) {
          case 0: case 1: case 2: case 3: case 4:
            path = "/bytes/3000?hit=" + std::to_string(k % 3); break;
          case 5: case 6: path = "/bytes/1500?miss=" + id; break;
          case 7: path = "/delay/20/bytes/800?slow=" + id; break;
          default: path = "/bytes/6000?evict=" + std::to_string(k % 8); break;
        }
        try {
          proxy::Socket s =
              testing_support::send_request(port, testing_support::proxy_get(base + path));
          auto r = testing_support::read_response(s, 120s);
          if (r && r->complete) {
            completed.fetch_add(1);
            last_progress.store(Clock::now().time_since_epoch().count());
          } else {
            errors.fetch_add(1);
          }
        } catch (const std::exception&) {
          errors.fetch_add(1);
          if (stop.load()) break;
          std::this_thread::sleep_for(5ms);  // refused: the stage is stopping; back off a little
        }
      }
    });
  }
  StressRun run;
  auto stalled = [&] {
    Clock::time_point last{Clock::duration(last_progress.load())};
    return std::chrono::duration<double>(Clock::now() - last).count() > stall_s;
  };
  auto hang = [&](const std::string& when) {
    run.hung = true;
    run.hang_when = when;
    run.stacks = thread_stacks(proxy.process->pid(), ctx.gdb);
  };
  auto since_progress = [&] {
    Clock::time_point last{Clock::duration(last_progress.load())};
    return std::chrono::duration<double>(Clock::now() - last).count();
  };
  const auto start = Clock::now();
  // Halfway, a lull: no request at all until every worker has gone idle and waits for work,
  // then the load comes back. A lost wakeup (a push nobody is told about) only shows when
  // every worker is asleep; a busy pool hides it.
  bool lull_done = false;
  const auto lull = std::chrono::milliseconds(params.value("lull_ms", 300));
  // The load lasts load_s, and then until responses are flowing (one in the last second):
  // a stage that stopped answering is given stall_s to recover before the watchdog calls it
  // a hang, however short the load.
  for (;;) {
    if (!proxy.process->running()) {
      run.died_early = true;
      break;
    }
    if (stalled()) {
      hang("under load: no response completed for " + std::to_string(int(stall_s)) +
           " s while the process was alive");
      break;
    }
    if (!lull_done && seconds_since(start) >= load_s / 2) {
      lull_done = true;
      paused = true;
      // In-flight requests must finish on their own; if they stall, that is the hang.
      const bool drained = eventually(
          [&] { return in_flight.load() == 0 || stalled() || !proxy.process->running(); },
          std::chrono::seconds(int(stall_s) + 5));
      if (!proxy.process->running()) {
        run.died_early = true;
        break;
      }
      if (!drained || in_flight.load() != 0) {
        hang("under load: no response completed for " + std::to_string(int(stall_s)) +
             " s while the process was alive");
        break;
      }
      std::this_thread::sleep_for(lull);  // the idle period itself, not a wait for a condition
      last_progress.store(Clock::now().time_since_epoch().count());
      paused = false;
    }
    if (seconds_since(start) >= load_s && since_progress() < 1.0) break;
    std::this_thread::sleep_for(50ms);  // the watchdog's polling period
  }
  // The stop lands on a full house: every worker busy with a slow origin, the queue full and
  // the accept loop holding one more client -- the paths a shutdown bug hides in.
  std::vector<proxy::Socket> slow;
  if (!run.hung && !run.died_early && stage.pool) {
    const int workers = params.value("workers", 2), queue = params.value("queue", 2);
    for (int i = 0; i < workers; ++i) {
      try {
        slow.push_back(testing_support::send_request(
            port, testing_support::proxy_get(base + "/delay/2000/bytes/100?at-stop=" +
                                             std::to_string(i))));
      } catch (const std::exception&) {
      }
    }
    const std::size_t full = idle_fds + 2 * workers + queue + 1;
    run.full_at_stop = eventually([&] { return fd_count(pid) >= full; }, 5s);
  }
  run.errors_before_stop = errors.load();
  if (!run.hung && !run.died_early) {
    proxy.process->send_signal(SIGTERM);
    const auto term = Clock::now();
    while (proxy.process->running() && seconds_since(term) < exit_s) {
      std::this_thread::sleep_for(50ms);
    }
    if (proxy.process->running()) {
      hang("after SIGTERM: still running " + std::to_string(int(exit_s)) + " s later");
    }
  }
  run.status = proxy.process->stop(0ms);  // SIGKILL if still alive
  stop = true;
  threads.clear();
  run.completed = completed.load();
  run.errors = errors.load();
  run.log = proxy.log();
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

std::string tail(const std::string& text, std::size_t max) {
  return text.size() <= max ? text : "...\n" + text.substr(text.size() - max);
}

RunOutcome check_races(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                       int index) {
  StressRun run = stress(stage, "tsan", spec.params, ctx, "races-" + std::to_string(index));
  std::string out = run_header(run, index);
  bool ok = true;
  for (const TsanReport& report : tsan_reports(run.log)) {
    if (report.kind == "lock-order-inversion") continue;  // the deadlock check's evidence
    ok = false;
    out += "\nThreadSanitizer found a " + report.kind + ":\n" + report.text + "\n";
  }
  if (run.died_early || (!run.hung && run.status.signal != 0)) {
    ok = false;
    out += "\nThe stage crashed under load. Its stderr:\n" + tail(run.log, 6000);
  }
  if (ok) out += "  no ThreadSanitizer report\n";
  return {ok, out, {}};
}

RunOutcome check_deadlock(const CheckSpec& spec, const StageInfo& stage,
                          const CheckContext& ctx, int index) {
  StressRun run = stress(stage, spec.build, spec.params, ctx, "deadlock-" + std::to_string(index));
  std::string out = run_header(run, index);
  bool ok = true;
  if (run.hung) {
    ok = false;
    out += "\nThe watchdog found a hang (" + run.hang_when +
           "). Every thread's stack, from gdb, before the process was killed:\n" + run.stacks;
  }
  for (const TsanReport& report : tsan_reports(run.log)) {
    if (report.kind != "lock-order-inversion") continue;
    ok = false;
    out += "\nThreadSanitizer found two locks taken in opposite orders (a deadlock waiting to "
           "happen):\n" + report.text + "\n";
  }
  if (run.died_early) {
    ok = false;
    out += "\nThe stage died under load. Its stderr:\n" + tail(run.log, 6000);
  }
  if (ok) out += "  responses kept completing, it stopped on SIGTERM, no lock-order inversion\n";
  return {ok, out, {}};
}

/// The blocks of a Valgrind log that matter to a student: errors with their stacks, the leak
/// summary, and open descriptors at exit.
std::string valgrind_findings(const std::string& log, bool& clean) {
  clean = true;
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
    for (std::size_t j = i; j < lines.size() && !(j > i && lines[j].empty()); ++j) {
      out += lines[j] + "\n";
    }
    out += "\n";
  }
  for (const std::string& line : lines) {
    if (line.find("definitely lost:") != std::string::npos ||
        line.find("ERROR SUMMARY") != std::string::npos ||
        line.find("FILE DESCRIPTORS:") != std::string::npos) {
      out += line + "\n";
    }
  }
  return out;
}

RunOutcome check_memory(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                        int index) {
  StressRun run = stress(stage, "debug", spec.params, ctx, "memory-" + std::to_string(index));
  std::string out = run_header(run, index);
  bool clean = true;
  std::string findings = valgrind_findings(run.valgrind_log, clean);
  bool ok = clean && !run.hung && !run.died_early && run.status.clean();
  if (run.hung) out += "\nThe stage hung (" + run.hang_when + "); stacks:\n" + run.stacks;
  if (!run.status.clean() && !run.hung) out += "\nNot a clean exit. Its stderr:\n" + tail(run.log, 4000);
  out += "\nValgrind memcheck (invalid accesses, definitely lost bytes, descriptors open at "
         "exit):\n" + findings;
  return {ok, out, {}};
}

// ---- a worker survives an exception ----------------------------------------------------------

RunOutcome check_worker_exception(const CheckSpec& spec, const StageInfo& stage,
                                  const CheckContext& ctx) {
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  const std::string limit = std::to_string(spec.params.value("address_space_bytes", 150'000'000));
  const std::string body = std::to_string(spec.params.value("body_bytes", 200'000'000));
  // One worker, and an address-space limit the cache's copy of a huge body cannot fit in:
  // the transaction fails with std::bad_alloc, which the pool must survive.
  Launched proxy = launch(stage, "release",
                          {"--workers", "1", "--max-object-bytes", "400000000", "--cache-bytes",
                           "400000000"},
                          ctx, "worker-exception", {"prlimit", "--as=" + limit, "--"});
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  std::string err;
  (void)try_fetch(port, base + "/bytes/" + body, err, 60s);
  bool failed = eventually([&] { return proxy.log().find("bad_alloc") != std::string::npos; }, 5s);
  v.note(failed ? "  (the big transaction failed with std::bad_alloc, as planned)"
                : "  (the big transaction did not fail; nothing to survive)");
  auto r = try_fetch(port, base + "/bytes/100", err, 5s);
  v.expect(r && r->status == 200, "after a transaction threw, the one worker still serves",
           r ? describe(*r) : "no response in 5 s: " + err + "\nstderr:\n" + tail(proxy.log(), 2000));
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

// ---- throughput ----------------------------------------------------------------------------

RunOutcome measure_throughput(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  const json& t = ctx.throughput;
  const int delay = t.value("miss_delay_ms", 20);
  harness::OriginServer origin(harness::OriginOptions{.threads = 2});
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {}, ctx, "throughput");
  json data = json::object();
  const int seconds = t.value(ctx.quick ? "quick_seconds" : "seconds", 2);
  std::string out = t.value("close", false)
                        ? "  (each request on a new connection: Connection: close)\n"
                        : "  (keep-alive connections)\n";
  for (const std::string workload : {"hit", "miss"}) {
    for (int connections : t.value("connections", std::vector<int>{1, 10, 100})) {
      harness::WrkOptions options;
      options.proxy_url = "http://" + proxy.process->address();
      options.target = workload == "hit" ? base + "/bytes/1024"
                                         : base + "/delay/" + std::to_string(delay) + "/bytes/1024";
      options.workload = workload;
      options.close = t.value("close", false);
      options.connections = connections;
      options.threads = std::min(connections, 2);
      options.duration = std::chrono::seconds(seconds);
      options.script = ctx.wrk_script;
      std::string key = workload + "@" + std::to_string(connections);
      try {
        harness::WrkResult r = harness::run_wrk(options);
        // Only answered requests count: a stage that refused everything with a quick 503
        // would otherwise win every ratio.
        data[key] = r.ok_per_s();
        char line[200];
        std::snprintf(line, sizeof line, "  %-9s %8.0f req/s answered  p99 %7.1f ms  errors %llu\n",
                      key.c_str(), r.ok_per_s(), r.latency_ms.p99,
                      static_cast<unsigned long long>(r.errors.total()));
        out += line;
      } catch (const std::exception& e) {
        data[key] = 0.0;
        out += "  " + key + ": wrk failed: " + e.what() + "\n";
      }
    }
  }
  harness::ExitStatus s = proxy.process->stop(10s);
  bool ok = s.clean();
  if (!ok) out += "the stage " + exit_text(s) + " after the load\n";
  return {ok, out, data};
}

}  // namespace

RunOutcome run_check_once(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  const int index = ctx.run;
  try {
    if (spec.id == "correctness") return check_correctness(spec, stage, ctx);
    if (spec.id == "concurrency") return check_concurrency(spec, stage, ctx);
    if (spec.id == "cache") return check_cache(spec, stage, ctx);
    if (spec.id == "shutdown") return check_shutdown(spec, stage, ctx);
    if (spec.id == "races") return check_races(spec, stage, ctx, index);
    if (spec.id == "deadlock") return check_deadlock(spec, stage, ctx, index);
    if (spec.id == "memory") return check_memory(spec, stage, ctx, index);
    if (spec.id == "worker-exception") return check_worker_exception(spec, stage, ctx);
    if (spec.id == "throughput") return measure_throughput(spec, stage, ctx);
    return {false, "the grader has no check named '" + spec.id + "'", {}};
  } catch (const std::exception& e) {
    return {false, std::string("the check could not run: ") + e.what(), {}};
  }
}

std::map<std::string, RunOutcome> judge_throughput(
    const json& rubric, const std::map<std::string, json>& measured) {
  std::map<std::string, RunOutcome> verdicts;
  for (const auto& [stage, data] : measured) verdicts[stage] = {true, "", data};
  for (const json& rule : rubric.value("thresholds", json::array())) {
    const std::string stage = rule.at("stage"), vs = rule.at("vs");
    const std::string key = rule.at("workload").get<std::string>() + "@" +
                            std::to_string(rule.at("connections").get<int>());
    const double min_ratio = rule.at("min_ratio");
    if (!verdicts.count(stage) || !measured.count(vs)) continue;  // not both in this run
    auto rate = [&](const std::string& name) {
      const json& data = measured.at(name);
      return data.is_object() ? data.value(key, 0.0) : 0.0;
    };
    double mine = rate(stage), theirs = rate(vs);
    double ratio = theirs > 0 ? mine / theirs : 0;
    bool ok = ratio >= min_ratio;
    char line[300];
    std::snprintf(line, sizeof line, "  [%s] %s / %s on %s: %.0f / %.0f req/s = %.2f (need >= %.2f)%s%s\n",
                  ok ? "pass" : "FAIL", stage.c_str(), vs.c_str(), key.c_str(), mine, theirs,
                  ratio, min_ratio, rule.contains("why") ? " — " : "",
                  rule.value("why", std::string()).c_str());
    verdicts[stage].output += line;
    if (!ok) verdicts[stage].passed = false;
  }
  return verdicts;
}

}  // namespace grader
