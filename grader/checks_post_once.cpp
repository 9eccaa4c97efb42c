// A request that is not idempotent reaches the origin at most once (RFC 9110 §9.2.2, RFC 9112
// §9.3.1), whatever the origin does to a kept connection. Stage 4 keeps origin connections and
// resends an idempotent request once on a new connection when a kept one closes unanswered (the
// origin timed it out just as the request arrived); a POST resent that way is charged twice, or
// its order placed twice. The planted bug post-resent (grader/mutants/) treats POST as
// retryable; the origin, not the proxy's own counters, says how often it came.
#include <sstream>

#include "check_support.h"
#include "origin_server.h"

namespace grader {

using namespace std::chrono_literals;
using testing_support::HttpResponse;

namespace {

/// The stage's own gauge `name` from its /metrics (asked in origin-form, which the stage
/// answers itself), or -1 when it has none or does not answer.
double metric(std::uint16_t port, const std::string& name) {
  try {
    const HttpResponse r =
        testing_support::exchange(port, "GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n", 5s);
    std::istringstream lines(r.body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
    }
  } catch (const std::exception&) {
    // No answer, or no number: the caller's wait goes on to its deadline.
  }
  return -1;
}

}  // namespace

RunOutcome check_post_once(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {"--workers", "1"}, ctx, "post-once");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  // An origin connection kept in the stage's pool whose next request the origin reads, counts
  // and drops unanswered with a close.
  std::string err;
  const auto kept = try_fetch(port, base + "/drop-next", err, 10s, {"Connection: close"});
  v.expect(kept && kept->status == 200, "a first request leaves a kept origin connection",
           kept ? describe(*kept) : err);
  const bool idle = eventually([&] { return metric(port, "proxy_origin_connections_idle") >= 1; }, 5s);
  v.note(idle ? "  (the stage's /metrics: one origin connection idle in its pool)"
              : "  (the stage's /metrics shows no idle origin connection; the POST goes on anyway)");

  const std::string body = "order=1&item=42";
  std::optional<HttpResponse> posted;
  try {
    posted = testing_support::exchange(
        port, "POST " + base + "/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
              "application/x-www-form-urlencoded\r\nContent-Length: " + std::to_string(body.size()) +
              "\r\nConnection: close\r\n\r\n" + body, 10s);
  } catch (const std::exception& e) {
    err = e.what();
  }
  const std::uint64_t seen = origin.request_count("/echo");
  v.expect(seen <= 1,
           "a POST reaches the origin at most once, even when the origin drops the kept "
           "connection it could have taken",
           "the origin received the POST " + std::to_string(seen) +
               " times: it was sent on the kept connection, dropped unanswered, and sent again "
               "on a new one. A request that is not idempotent must not be resent");
  v.expect(posted && posted->status == 200 && posted->body == body,
           "the POST is answered: 200 with the origin's echo of its body",
           posted ? describe(*posted) : err);
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

}  // namespace grader
