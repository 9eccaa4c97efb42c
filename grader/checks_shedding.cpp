// Stage 4's load shedding by queueing delay (CoDel, stage4-tuned/queue_delay.h), judged by what
// clients see and when. One worker is held by a slow origin while a burst queues behind it, so
// the stage's queue is first long but young, then standing, then drained. Three ways to get it
// wrong have a planted bug each (grader/mutants/): newcomers never refused while the queue
// stands (never-sheds), refused by the queue's length instead of its delay (sheds-by-length),
// and still refused after the queue drained, the verdict remembered (shedding-never-stops).
// Each fails its own line below, and traps.cpp names the trap from which line failed.
#include <poll.h>

#include <cerrno>

#include <algorithm>
#include <thread>

#include "check_support.h"
#include "origin_server.h"

namespace grader {

using namespace std::chrono_literals;
using testing_support::HttpResponse;

namespace {

/// Every request goes through the worker queue: no poller miss (--no-poller-misses, and each
/// request on a connection of its own with Connection: close, which the poller never answers
/// itself), no wait for the origin's limit (--origin-limit off).
std::string queued_get(const std::string& url) {
  return testing_support::proxy_get(url, {"Connection: close"});
}

/// Which of `clients` have something to read (an answer or a close) within `window`; the first
/// of those answers is read and described in `seen`.
std::vector<bool> answered_within(const std::vector<proxy::Socket>& clients,
                                  std::chrono::milliseconds window, std::string& seen) {
  std::vector<pollfd> fds;
  for (const proxy::Socket& c : clients) fds.push_back({c.fd(), POLLIN, 0});
  const auto end = CheckClock::now() + window;
  int ready = 0;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - CheckClock::now());
    if (left.count() <= 0) break;
    ready = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    // Any answer ends the wait: one is evidence enough, and reading it here would take it from
    // the caller; the others still queued stay unread.
    if (ready != 0) break;
  }
  std::vector<bool> answered(fds.size(), false);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    answered[i] = true;
    if (seen.empty()) {
      const std::optional<HttpResponse> r = testing_support::read_response(clients[i], 1s);
      seen = r ? describe(*r) : "a close without an answer";
    }
  }
  return answered;
}

}  // namespace

RunOutcome check_shedding(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  const int delay_ms = spec.params.value("shed_delay_ms", 250);
  const int interval_ms = spec.params.value("shed_interval_ms", 500);
  const int hold_ms = spec.params.value("hold_ms", 4000);
  const int burst = spec.params.value("burst", 6);
  const int after = spec.params.value("after_drain", 3);
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  // A queue far deeper than the burst: nothing here is refused for a full queue, only by delay.
  Launched proxy = launch(stage, "release",
                          {"--workers", "1", "--queue", "64", "--shed-delay-ms",
                           std::to_string(delay_ms), "--shed-interval-ms", std::to_string(interval_ms),
                           "--no-poller-misses", "--origin-limit", "off"},
                          ctx, "shedding");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  v.note("--workers 1 --queue 64 --shed-delay-ms " + std::to_string(delay_ms) +
         " --shed-interval-ms " + std::to_string(interval_ms) +
         " --no-poller-misses: every request below goes through the worker queue");

  // The one worker is held by a slow origin for hold_ms; everything after it queues.
  proxy::Socket held = testing_support::send_request(
      port, queued_get(base + "/delay/" + std::to_string(hold_ms) + "/bytes/100?hold"));
  const bool holding = origin.wait_for_requests("/delay/", 1, 10s);
  v.expect(holding, "the one worker (--workers 1) is busy with a slow origin");
  if (!holding) {
    expect_clean_stop(v, proxy);
    return {false, v.text(), {}};
  }

  // 1. A long queue that is young: `burst` requests wait, none of them yet for --shed-delay-ms,
  // so CoDel has nothing to shed. Watched until half an interval past the delay target, which
  // the queue cannot have stood for yet: any answer by then is a refusal by length.
  const auto burst_start = CheckClock::now();
  std::vector<proxy::Socket> queued;
  for (int i = 0; i < burst; ++i) {
    queued.push_back(testing_support::send_request(
        port, queued_get(base + "/bytes/100?young=" + std::to_string(i))));
  }
  std::string refused;
  const std::vector<bool> early_answer = answered_within(
      queued, std::chrono::milliseconds(delay_ms + interval_ms / 2) -
                  std::chrono::duration_cast<std::chrono::milliseconds>(CheckClock::now() - burst_start),
      refused);
  const auto early = std::count(early_answer.begin(), early_answer.end(), true);
  v.expect(early == 0,
           "a long queue that is young is not shed: " + std::to_string(burst) +
               " requests waiting behind the busy worker for less than --shed-delay-ms all stay queued",
           std::to_string(early) + " of " + std::to_string(burst) + " answered within " +
               std::to_string(delay_ms + interval_ms / 2) + " ms (" + refused +
               "), before any of them had waited --shed-delay-ms: refused for the queue's "
               "length, not its delay");

  // 2. The same queue, now standing: its oldest request has waited past --shed-delay-ms for
  // more than --shed-interval-ms. A newcomer must be refused at once, not queued behind it.
  const auto standing_at = burst_start + std::chrono::milliseconds(delay_ms + interval_ms + 300);
  std::this_thread::sleep_until(standing_at);  // the stage's own clock: the queue's age is the condition
  const auto sent = CheckClock::now();
  proxy::Socket newcomer =
      testing_support::send_request(port, queued_get(base + "/bytes/100?newcomer"));
  const std::optional<HttpResponse> late = testing_support::read_response(newcomer, 10s);
  const double waited = seconds_since(sent);
  const double hold_left =
      hold_ms / 1000.0 - std::chrono::duration<double>(sent - burst_start).count();
  v.expect(late && late->status == 503 && waited < 1.0,
           "a standing queue sheds a newcomer at once: 503 well before the busy worker is free",
           (late ? describe(*late) : std::string("no answer within 10 s")) + " after " +
               std::to_string(static_cast<int>(waited * 1000)) + " ms; the worker was busy for " +
               std::to_string(static_cast<int>(hold_left * 1000)) +
               " ms more, and the queue had stood past --shed-delay-ms for " +
               std::to_string(interval_ms + 300) +
               " ms: the newcomer was queued behind it instead of refused");
  if (late && late->status == 503) {
    v.expect(late->field("Retry-After") == "1", "the 503 says Retry-After: 1",
             "Retry-After: '" + late->field("Retry-After") + "'");
  }

  // 3. The worker is freed and the queue drains (each queued request served, or refused where
  // it waited too long). Once it is empty its delay is 0: the queue no longer stands, and new
  // requests are served again.
  const std::optional<HttpResponse> first = testing_support::read_response(held, 15s);
  int answered = first ? 1 : 0;
  for (std::size_t i = 0; i < queued.size(); ++i) {
    // The early answers were counted above; one of them was read there.
    if (early_answer[i] || testing_support::read_response(queued[i], 10s)) ++answered;
  }
  v.expect(answered == burst + 1,
           "the queue drains: the slow request and every queued one are answered (served or 503)",
           std::to_string(answered) + " of " + std::to_string(burst + 1) + " answered");
  // A few of the stage's ticks for its shedder to see the empty queue.
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max(300, interval_ms / 2)));
  int served = 0;
  std::string refusal;
  for (int i = 0; i < after; ++i) {
    std::string err;
    const auto r = try_fetch(port, base + "/bytes/100?after=" + std::to_string(i), err, 10s,
                             {"Connection: close"});
    if (r && r->status == 200 && r->body == harness::deterministic_bytes(100)) {
      ++served;
    } else if (refusal.empty()) {
      refusal = r ? describe(*r) : err;
    }
  }
  v.expect(served == after,
           "a drained queue stops shedding: " + std::to_string(after) +
               " requests sent one at a time after it emptied are served (200, byte-exact)",
           std::to_string(served) + " of " + std::to_string(after) + " served; the first other: " +
               refusal + ". Nothing was queued any more, yet requests were refused");
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

}  // namespace grader
