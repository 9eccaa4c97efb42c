// Stage 4's concurrency limit toward each origin (stage4-tuned/origin_gates.h), judged where
// it matters: at the origin, which counts the most requests it ever had in service at once
// (harness::OriginServer::load_json), whatever the proxy's own /metrics say. Three ways to get
// it wrong have a planted bug each (grader/mutants/): a path that sends misses past the limit
// (poller-ignores-limit), a permit not given back when its request ends unanswered
// (permit-leak), one given back when its client hangs up while the origin still serves the
// request, on the poller or on a worker (permit-freed-on-hang-up, worker-permit-freed-on-hang-up),
// and hits that wait for the limit as misses do (hits-wait). Each fails its own
// line below, and traps.cpp names the trap from which line failed. The mixed-paths check
// (check_mixed_paths, at the end) judges the adaptive limit (--origin-limit auto) by its own
// state in /metrics: a probe that took the first answers to come back for the origin's unloaded
// latency (probe-first-answers) measures a fast path's, and the limit collapses.
#include <atomic>
#include <cmath>
#include <sstream>
#include <thread>

#include "check_support.h"
#include "origin_server.h"

namespace grader {

using namespace std::chrono_literals;
using testing_support::HttpResponse;

namespace {

constexpr auto kLive = 5s;     // what a request that must not wait may take, on a loaded machine
constexpr auto kPermit = 10s;  // a permit given back lets the next request in within this

int peak_in_service(harness::OriginServer& origin) {
  return nlohmann::json::parse(origin.load_json())["peak_in_service"].get<int>();
}

/// Sample `family{origin="127.0.0.1:PORT"}` of the stage's /metrics, NaN when absent or the
/// stage does not answer. Asked with keep-alive, which the poller answers itself.
double origin_gauge(std::uint16_t port, const std::string& family, std::uint16_t origin_port) {
  const std::string name = family + "{origin=\"127.0.0.1:" + std::to_string(origin_port) + "\"} ";
  try {
    const HttpResponse r =
        testing_support::exchange(port, "GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n", kLive);
    std::istringstream lines(r.body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(name, 0) == 0) return std::stod(line.substr(name.size()));
    }
  } catch (const std::exception&) {
    // No answer, or no number: the caller's wait goes on to its deadline.
  }
  return std::nan("");
}

/// The answer on `client` within `timeout`, judged against /bytes/N's body.
bool answered_exactly(const proxy::Socket& client, std::size_t n, std::chrono::milliseconds timeout,
                      std::string& seen) {
  const std::optional<HttpResponse> r = testing_support::read_response(client, timeout);
  if (!r) {
    seen = "no complete response within " + std::to_string(timeout.count() / 1000) + " s";
    return false;
  }
  seen = describe(*r);
  return r->status == 200 && r->body == harness::deterministic_bytes(n);
}

// A burst of concurrent misses, each to its own URL, against --origin-limit `limit`: every one
// is answered byte-exact, and the origin never has more than `limit` in service at once. The
// burst goes after a warm-up that leaves the stage kept origin connections, so that the
// poller's own miss path (a kept connection) carries part of it, not only the workers.
void expect_limit_holds(Verdict& v, const StageInfo& stage, const CheckContext& ctx, int limit,
                        int burst) {
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {"--origin-limit", std::to_string(limit)}, ctx,
                          "origin-limit-burst");
  const std::uint16_t port = proxy.process->port();
  std::vector<proxy::Socket> clients;
  for (int i = 0; i < limit; ++i) {
    clients.push_back(testing_support::send_request(
        port, testing_support::proxy_get(base + "/delay/20/bytes/300?warm=" + std::to_string(i))));
  }
  int warm = 0;
  std::string seen;
  for (const proxy::Socket& client : clients) warm += answered_exactly(client, 300, 30s, seen);
  v.expect(warm == limit, "warm-up: " + std::to_string(limit) + " misses answered 200, byte-exact",
           std::to_string(warm) + " of " + std::to_string(limit) + "; last: " + seen);
  // The burst's peak, not the warm-up's.
  [[maybe_unused]] const std::string before = origin.load_json(/*reset_peak=*/true);
  clients.clear();
  for (int i = 0; i < burst; ++i) {
    clients.push_back(testing_support::send_request(
        port, testing_support::proxy_get(base + "/delay/100/bytes/300?n=" + std::to_string(i))));
  }
  int exact = 0;
  std::string first_bad;
  for (const proxy::Socket& client : clients) {
    if (answered_exactly(client, 300, 30s, seen)) {
      ++exact;
    } else if (first_bad.empty()) {
      first_bad = "; first wrong: " + seen;
    }
  }
  const int peak = peak_in_service(origin);
  const std::string limit_text = std::to_string(limit);
  v.note("  (the origin's most requests in service at once during the burst: " +
         std::to_string(peak) + ")");
  v.expect(exact == burst,
           "burst: every one of " + std::to_string(burst) +
               " concurrent misses (unique URLs, "
               "/delay/100/bytes/300) is answered 200, byte-exact",
           std::to_string(exact) + " of " + std::to_string(burst) + first_bad);
  v.expect(peak <= limit,
           "at most --origin-limit " + limit_text + " requests in service at the origin at once",
           "the origin had " + std::to_string(peak) +
               " in service at once: some path sends "
               "misses without a permit of their origin");
  v.expect(peak >= 2,
           "the burst overlapped at the origin (2 or more in service at once), else the limit "
           "was not put to the test",
           "the origin's peak was " + std::to_string(peak));
  expect_clean_stop(v, proxy);
}

// --origin-limit 1, its permit held by a /stall request: a cached object is still answered at
// once (a hit needs no permit), a miss waits on the proxy rather than reaching the origin, the
// /stall's client hangs up and still the miss waits (the origin is still serving the /stall),
// and once the origin ends the /stall the permit comes back and the miss goes on. Then twice
// more a client hangs up on a slow request, each time followed by a miss that needs the permit
// back. Meanwhile another origin
// is served throughout, so that a stage stuck as a whole is told apart from one origin starved
// of its permit.
void expect_permits_come_back(Verdict& v, const StageInfo& stage, const CheckContext& ctx) {
  harness::OriginServer origin;
  harness::OriginServer other;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {"--origin-limit", "1", "--origin-timeout-ms", "60000"},
                          ctx, "origin-limit-permits");
  const std::uint16_t port = proxy.process->port();
  std::string err;
  auto stored = try_fetch(port, base + "/bytes/100?hit", err);
  v.expect(stored && stored->status == 200 && stored->body == harness::deterministic_bytes(100),
           "a cacheable object is fetched (it leaves a kept origin connection behind)",
           stored ? describe(*stored) : err);
  proxy::Socket holder =
      testing_support::send_request(port, testing_support::proxy_get(base + "/stall"));
  v.expect(
      origin.wait_for_requests("/stall", 1, kPermit),
      "the only permit (--origin-limit 1) is held by a /stall request the origin never answers");

  // Connection: close, so that the poller cannot answer it itself and it goes the way a request
  // to be admitted goes.
  proxy::Socket hit = testing_support::send_request(
      port, testing_support::proxy_get(base + "/bytes/100?hit", {"Connection: close"}));
  const std::optional<HttpResponse> hit_answer = testing_support::read_response(hit, kLive);
  v.expect(hit_answer && hit_answer->status == 200 && hit_answer->field("X-Cache") == "HIT" &&
               hit_answer->body == harness::deterministic_bytes(100),
           "a hit never waits for its origin's limit: the cached object is answered within 5 s "
           "while the only permit is held",
           hit_answer ? describe(*hit_answer) : "no answer within 5 s: it waited for the permit");
  hit = proxy::Socket();  // a hit still waiting hangs up, as an impatient client does

  proxy::Socket waiter =
      testing_support::send_request(port, testing_support::proxy_get(base + "/bytes/7?miss"));
  double waiting = std::nan("");
  eventually(
      [&] {
        waiting = origin_gauge(port, "proxy_origin_waiting", origin.port());
        return waiting >= 1 || origin.request_count("/bytes/7") > 0;
      },
      kLive);
  v.expect(origin.request_count("/bytes/7") == 0,
           "a miss past the limit stays off the origin while the only permit is held",
           "the origin received it: the miss went past --origin-limit 1");
  v.expect(waiting >= 1, "that miss is counted waiting in /metrics (proxy_origin_waiting)",
           "proxy_origin_waiting{origin=...} read " + std::to_string(waiting));

  holder = proxy::Socket();
  // A second is long enough for a stage that gives the permit back at the hang-up to send the
  // waiting miss on (a poller notices a hang-up within one wake-up).
  const bool let_in = eventually([&] { return origin.request_count("/bytes/7") > 0; },
                                 std::chrono::seconds(1));
  v.expect(!let_in,
           "a client's hang-up does not give the permit back while the origin still serves its "
           "request: the waiting miss stays off the origin for 1 s after the /stall's client "
           "goes",
           "the origin received the waiting miss while it still served the /stall: two requests "
           "in service under --origin-limit 1");
  origin.end_stalled();
  std::string seen;
  v.expect(answered_exactly(waiter, 7, kPermit, seen),
           "a permit comes back when its request ends: the origin ends the /stall and the "
           "waiting miss is answered 200, byte-exact, within 10 s",
           seen);
  // Rounds 2 and 3 end the request with an answer, not with /stall's close: an origin that
  // closes a reused connection unanswered looks stale, and a GET is rightly retried on a new
  // connection (RFC 9110 §9.2.2), which would stall again and hold the permit for the whole
  // --origin-timeout-ms whenever the retry wins the race with the hang-up.
  for (int round = 2; round <= 3; ++round) {
    const std::string r = std::to_string(round);
    const std::string slow = "/delay/1500/bytes/" + std::to_string(3 + round);  // its own path
    proxy::Socket again =
        testing_support::send_request(port, testing_support::proxy_get(base + slow));
    const bool held = origin.wait_for_requests(slow, 1, kPermit);
    again = proxy::Socket();  // hangs up while the origin serves it
    auto next = held ? try_fetch(port, base + "/bytes/9?r=" + r, err, kPermit) : std::nullopt;
    v.expect(held && next && next->status == 200 && next->body == harness::deterministic_bytes(9),
             "a permit comes back when its client hangs up and its origin ends it (round " + r +
                 "): the next miss is answered within 10 s",
             !held  ? "the slow request never reached the origin"
             : next ? describe(*next)
                    : err);
  }
  // The same hang-up on a worker: a HEAD always goes to one. Its origin connection must outlive
  // the client, with the permit, until the origin has answered.
  const auto in_service = [&] {
    return nlohmann::json::parse(origin.load_json())["in_service"].get<int>();
  };
  origin.end_stalled();
  const bool idle = eventually([&] { return in_service() == 0; }, kPermit);
  [[maybe_unused]] const std::string reset = origin.load_json(/*reset_peak=*/true);
  bool worker_held = false;
  {
    proxy::Socket head = testing_support::send_request(
        port, "HEAD " + base + "/delay/1500/bytes/10?worker HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              "Connection: close\r\n\r\n");
    worker_held = eventually([&] { return in_service() == 1; }, kPermit);
  }  // hangs up while the origin serves it
  auto after_worker = worker_held && idle
                          ? try_fetch(port, base + "/bytes/13?after-worker", err, kPermit)
                          : std::nullopt;
  const int worker_peak = peak_in_service(origin);
  v.expect(idle && worker_held && after_worker && after_worker->status == 200 && worker_peak <= 1,
           "a worker's client hang-up does not give the permit back while the origin still "
           "serves its request: a HEAD's client goes, and the next miss reaches the origin only "
           "once the HEAD is done (at most 1 in service)",
           !idle           ? "the origin still had requests in service 10 s after they ended"
           : !worker_held  ? "the HEAD never reached the origin"
           : !after_worker ? err
           : worker_peak > 1
               ? "the origin had " + std::to_string(worker_peak) +
                     " in service at once under --origin-limit 1"
               : describe(*after_worker));
  auto elsewhere =
      try_fetch(port, "http://127.0.0.1:" + std::to_string(other.port()) + "/bytes/11", err, kLive);
  v.expect(elsewhere && elsewhere->status == 200,
           "meanwhile another origin is served within 5 s (the stage itself is not stuck)",
           elsewhere ? describe(*elsewhere) : err);
  expect_clean_stop(v, proxy);
}

/// Closed-loop clients, each on a keep-alive connection of its own, taking the next of `urls`
/// by one count they share (bench/mixed-paths.sh's wrk script does the same): whichever requests
/// the stage sends first, about half of them are slow. stop() or the destructor joins them.
class MixedLoad {
 public:
  MixedLoad(int clients, std::uint16_t port, std::vector<std::string> urls)
      : port_(port), urls_(std::move(urls)) {
    for (int i = 0; i < clients; ++i) threads_.emplace_back([this] { client(); });
  }
  ~MixedLoad() { stop(); }
  MixedLoad(const MixedLoad&) = delete;
  MixedLoad& operator=(const MixedLoad&) = delete;

  /// Ends the load: each client finishes the request it has in flight. Idempotent.
  void stop() {
    stop_ = true;
    threads_.clear();
  }
  /// No new request until resume(); those in flight go on.
  void pause() { paused_ = true; }
  /// From now on every client asks for the first of the urls only (`on`), or for each in turn.
  void first_only(bool on) { first_only_ = on; }
  void resume() { paused_ = false; }
  /// Requests sent and not yet answered.
  [[nodiscard]] int in_flight() const { return in_flight_.load(); }
  /// Responses 200 so far.
  [[nodiscard]] long answered() const { return answered_.load(); }
  /// Responses 503 (shed) so far, and requests that got no whole response.
  [[nodiscard]] long refused() const { return refused_.load(); }
  [[nodiscard]] long failed() const { return failed_.load(); }

 private:
  void client() {
    proxy::Socket connection;
    while (!stop_.load()) {
      if (paused_.load()) {
        std::this_thread::sleep_for(5ms);  // the pause, polled: resume() ends it
        continue;
      }
      const std::size_t n = next_.fetch_add(1);
      const std::string request =
          testing_support::proxy_get(urls_[first_only_.load() ? 0 : n % urls_.size()]);
      in_flight_.fetch_add(1);
      struct Done {
        std::atomic<int>& count;
        ~Done() { count.fetch_sub(1); }
      } done{in_flight_};
      try {
        if (!connection.valid() ||
            connection.write_all(request, 5s).status != proxy::IoStatus::ok) {
          connection = testing_support::send_request(port_, request);
        }
        const std::optional<HttpResponse> r = testing_support::read_response(connection, 10s);
        if (r && r->complete && r->status == 200) {
          answered_.fetch_add(1);
        } else if (r && r->status == 503) {
          refused_.fetch_add(1);
        } else {
          failed_.fetch_add(1);
        }
        if (!r || !r->complete || r->field("Connection") == "close") connection = proxy::Socket();
      } catch (const std::exception&) {
        failed_.fetch_add(1);
        connection = proxy::Socket();
        std::this_thread::sleep_for(5ms);  // no connection at all: back off a little
      }
    }
  }

  const std::uint16_t port_;
  const std::vector<std::string> urls_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> first_only_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<std::size_t> next_{0};
  std::atomic<long> answered_{0}, refused_{0}, failed_{0};
  std::vector<std::jthread> threads_;  // last: joined (by stop) before the fields above go
};

/// `seconds` in milliseconds, 2 or 3 significant digits; "nothing" for NaN (a gauge not read).
std::string millis_text(double seconds) {
  if (std::isnan(seconds)) return "nothing";
  std::ostringstream out;
  out.precision(seconds < 0.01 ? 2 : 3);
  out << seconds * 1000 << " ms";
  return out.str();
}

}  // namespace

RunOutcome check_origin_limit(const CheckSpec& spec, const StageInfo& stage,
                              const CheckContext& ctx) {
  Verdict v;
  expect_limit_holds(v, stage, ctx, spec.params.value("limit", 4), spec.params.value("burst", 24));
  expect_permits_come_back(v, stage, ctx);
  return {v.passed(), v.text(), {}};
}

// --origin-limit auto (the default) against one origin serving a fast path and a slow one alike,
// as bench/mixed-paths.sh does, with room for every request (no --capacity): the limit should
// stay out of the way. Its unloaded latency comes from probes (concurrency_limit.h): the limit
// drops to half, and the first requests sent under it are timed. A probe that times the first
// answers to come back times the fast path's (a slow request holds its place while fast ones
// come and go), every window after it then reads as queueing, and the limit falls to its floor:
// 190 answers/s instead of 16,000 in the run of docs/stage4-runs.md ("An eleventh run").
//
// The probe is set up so that which requests it times decides the outcome, and nothing else.
// A probe needs a full limit (re-measured only under load), which a closed-loop load seldom
// keeps: once the limit has grown past the clients the load pauses (after a moment of the fast
// path alone, below), and once the first probe is due (a second after the first window),
// requests that the origin holds for hold_ms fill the limit and past_the_limit (most of what the
// probe samples) slow-path requests queue behind them. The stage's next tick starts the probe (the
// limit halves in /metrics) and the load resumes behind that queue. When the held requests end,
// the queued slow ones are the first sent under the probe, and the mix's fast answers the first
// to come back. The judge is the stage's own state in /metrics afterwards: no speed threshold.
RunOutcome check_mixed_paths(const CheckSpec& spec, const StageInfo& stage,
                             const CheckContext& ctx) {
  Verdict v;
  const int clients = spec.params.value("clients", 64);
  const int slow_ms = spec.params.value("slow_ms", 20);
  const int hold_ms = spec.params.value("hold_ms", 300);
  const int past_the_limit = spec.params.value("past_the_limit", 8);
  const auto settle = std::chrono::milliseconds(spec.params.value("settle_ms", 1500));
  const double floor = std::max(4, clients / 4);
  harness::OriginServer origin(harness::OriginOptions{.threads = 2});
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  const std::string fast = "/no-store/5000";
  const std::string slow = "/delay/" + std::to_string(slow_ms) + "/no-store/10";
  const std::string held = "/delay/" + std::to_string(hold_ms) + "/no-store/10";
  Launched proxy = launch(stage, "release", {}, ctx, "mixed-paths");
  const std::uint16_t port = proxy.process->port();
  const auto gauge = [&](const char* family) { return origin_gauge(port, family, origin.port()); };

  MixedLoad load(clients, port, {base + fast, base + slow});
  double first_min = std::nan("");
  const bool windowed = eventually(
      [&] {
        first_min = gauge("proxy_origin_min_rtt_seconds");
        return first_min > 0;
      },
      10s);
  v.expect(windowed,
           std::to_string(clients) + " clients alternate a fast path (" + fast +
               ") and a slow one (" + slow +
               ") on one origin, through --origin-limit auto: /metrics shows the origin's first "
               "minimum latency (proxy_origin_min_rtt_seconds)",
           "read " + millis_text(first_min) + " within 10 s");
  if (!windowed) {
    load.stop();
    expect_clean_stop(v, proxy);
    return {v.passed(), v.text(), {}};
  }
  // The first probe is due a second after the first window. Until then the load fills the
  // limit only while it grows (a full limit then would start the probe under the mix itself, the
  // requests it times left to chance): once it has grown past the clients, the load pauses.
  const auto probe_due = CheckClock::now() + 1100ms;
  eventually([&] { return gauge("proxy_origin_limit") >= clients; }, 5s);
  // The rate of the mix before the probe, over a moment of it, for the report.
  const long answered_0 = load.answered();
  const auto before_0 = CheckClock::now();
  std::this_thread::sleep_for(300ms);
  const double rate_before =
      static_cast<double>(load.answered() - answered_0) / seconds_since(before_0);
  double limit_before = std::nan("");
  double limit_probing = std::nan("");
  double min_after = first_min;
  int tries = 0;
  int burst_sent = 0;
  int burst_answered = 0;
  bool probing = false;
  const auto give_up = CheckClock::now() + 8s;
  while (!probing && CheckClock::now() < give_up) {
    ++tries;
    // Three of the stage's 50 ms ticks of the fast path alone before the pause, so that the
    // last windows are not the slow answers a drain leaves (a client spends most of its time on
    // the slow path): they read as queueing and may halve the limit, and a probe at a quarter of
    // the clients leaves the mix too little room to answer first.
    load.first_only(true);
    std::this_thread::sleep_for(150ms);
    load.pause();
    eventually([&] { return load.in_flight() == 0; }, 10s);
    // A probe that ran under the mix anyway (the limit was full when it fell due) is judged as
    // it is.
    min_after = gauge("proxy_origin_min_rtt_seconds");
    if (min_after > 0 && min_after != first_min) {
      load.first_only(false);
      load.resume();
      probing = true;
      break;
    }
    // Until the probe is due, and at least three of the stage's 50 ms ticks: the window the
    // drain closed is judged before the limit is read (a cut after the read would leave held
    // requests waiting, to be the probe's first).
    std::this_thread::sleep_until(std::max(probe_due, CheckClock::now() + 150ms));
    limit_before = gauge("proxy_origin_limit");
    const double busy = gauge("proxy_origin_in_flight");
    const int limit = std::isnan(limit_before) ? clients : static_cast<int>(limit_before);
    const int room = std::max(0, limit - (std::isnan(busy) ? 0 : static_cast<int>(busy)));
    std::vector<proxy::Socket> burst;
    for (int i = 0; i < room + past_the_limit; ++i) {
      const std::string& path = i < room ? held : slow;
      try {
        burst.push_back(testing_support::send_request(
            port, testing_support::proxy_get(base + path + "?try=" + std::to_string(tries) + "." +
                                             std::to_string(i))));
      } catch (const std::exception&) {
        // Not sent: the rest still fill the limit.
      }
    }
    burst_sent += static_cast<int>(burst.size());
    // The probe halves the limit at the stage's next tick (50 ms), while the held requests
    // still fill it.
    double probe_limit = std::nan("");
    probing = eventually(
        [&] {
          probe_limit = gauge("proxy_origin_limit");
          return probe_limit < limit;
        },
        std::chrono::milliseconds(hold_ms / 2));
    if (probing) limit_probing = probe_limit;
    load.first_only(false);
    load.resume();
    for (const proxy::Socket& client : burst) {
      const std::optional<HttpResponse> r = testing_support::read_response(client, 10s);
      burst_answered += r && r->complete && r->status == 200;
    }
  }
  const bool probed = probing && eventually(
                                     [&] {
                                       min_after = gauge("proxy_origin_min_rtt_seconds");
                                       return min_after > 0 && min_after != first_min;
                                     },
                                     2s);
  v.expect(probed,
           "once the first probe is due, requests that fill the limit make it measure its "
           "minimum again: the limit halves, then proxy_origin_min_rtt_seconds changes (" +
               std::to_string(tries) + (tries == 1 ? " try)" : " tries)"),
           probing ? "the limit halved, but the minimum is still " + millis_text(min_after)
                   : "the limit never fell below " +
                         std::to_string(static_cast<long>(limit_before)) + " within 8 s");
  v.expect(burst_answered == burst_sent,
           "every request that filled the limit or queued past it is answered 200",
           std::to_string(burst_answered) + " of " + std::to_string(burst_sent));
  // How far the limit falls in the windows after the probe: from a minimum of the fast path's,
  // each window of the mix halves it, to the floor within a second.
  const long answered_1 = load.answered();
  const auto after_0 = CheckClock::now();
  std::this_thread::sleep_for(settle);
  const double rate_after =
      static_cast<double>(load.answered() - answered_1) / seconds_since(after_0);
  const double limit_after = gauge("proxy_origin_limit");
  const double min_now = gauge("proxy_origin_min_rtt_seconds");
  const double rtt_now = gauge("proxy_origin_rtt_seconds");
  load.stop();
  std::ostringstream numbers;
  numbers.precision(3);
  numbers << "  (before the probe: limit " << limit_before << " (";
  if (std::isnan(limit_probing)) {
    numbers << "not seen";
  } else {
    numbers << limit_probing;
  }
  numbers << " while it probed), minimum " << millis_text(first_min) << ", "
          << static_cast<long>(rate_before) << " answers/s; after it: limit " << limit_after
          << ", minimum " << millis_text(min_now) << ", last window " << millis_text(rtt_now)
          << ", " << static_cast<long>(rate_after) << " answers/s; " << load.refused() << " shed, "
          << load.failed() << " failed)";
  v.note(numbers.str());
  std::string why = "proxy_origin_limit read " +
                    (std::isnan(limit_after) ? std::string("nothing")
                                             : std::to_string(static_cast<long>(limit_after))) +
                    ", " + std::to_string(settle.count()) + " ms after the probe";
  if (min_now > 0 && min_now < slow_ms / 4000.0) {
    why += "; the minimum it measured, " + millis_text(min_now) +
           ", is below a quarter of the slow path's " + std::to_string(slow_ms) +
           " ms: the probe timed the fast path's answers, and every window of the mix since "
           "reads as queueing";
  }
  v.expect(limit_after >= floor,
           "the limit does not collapse after the probe: " + std::to_string(settle.count()) +
               " ms later the origin's limit is at least " +
               std::to_string(static_cast<int>(floor)) + " (a quarter of the " +
               std::to_string(clients) + " clients), the origin having room for every request",
           why);
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

}  // namespace grader
