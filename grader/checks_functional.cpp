// The functional checks: what a client sees of correctness, concurrency, the cache, shutdown,
// and a worker surviving an exception. Each runs a real stage process against an in-process
// scripted origin; every wait has a deadline.
#include <unistd.h>

#include <memory>
#include <stdexcept>

#include "check_support.h"
#include "origin_server.h"
#include "support.h"

namespace grader {

using namespace std::chrono_literals;
using Clock = CheckClock;
using testing_support::HttpResponse;
using json = nlohmann::json;

// ---- correctness ---------------------------------------------------------------------------

namespace {

// Text, binary (under and over the cache's object limit) and chunked bodies arrive byte-exact.
void expect_bodies(Verdict& v, std::uint16_t port, const std::string& origin) {
  auto url = [&](const std::string& path) { return origin + path; };
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
}

// What the origin receives: Host names it, Connection: close (or none, for stage 4's kept origin
// connections), end-to-end fields kept and hop-by-hop ones dropped; and the client's response
// carries X-Cache.
void expect_header_rewriting(Verdict& v, const StageInfo& stage, std::uint16_t port,
                             std::uint16_t origin_port) {
  const std::string origin = "http://127.0.0.1:" + std::to_string(origin_port);
  auto url = [&](const std::string& path) { return origin + path; };
  std::string err;
  if (auto r = try_fetch(port, url("/headers"), err, 10s,
                         {"User-Agent: grader/1", "Proxy-Connection: keep-alive",
                          "Keep-Alive: 300", "Connection: keep-alive", "X-End-To-End: kept"})) {
    const std::string& sent = r->body;
    const std::string host = "Host: 127.0.0.1:" + std::to_string(origin_port) + "\r\n";
    v.expect(sent.find(host) != std::string::npos, "header rewriting: Host names the origin",
             "the origin received:\n" + sent);
    // Stages 1-3 use an origin connection once and say so; stage 4 may keep its origin
    // connections, which HTTP/1.1 does by saying nothing (RFC 9112 §9.3). Either way the
    // client's own Connection field (keep-alive) is not forwarded.
    const bool says_close = sent.find("Connection: close\r\n") != std::string::npos;
    if (stage.number == 4) {
      v.expect((says_close || sent.find("Connection:") == std::string::npos) &&
                   sent.find("keep-alive") == std::string::npos,
               "header rewriting: Connection: close, or none for a kept origin connection",
               "the origin received:\n" + sent);
    } else {
      v.expect(says_close, "header rewriting: Connection: close to the origin",
               "the origin received:\n" + sent);
    }
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
}

// Malformed, unsupported, unreachable and silent origins get 400, 501, 502 and 504, and the
// stage serves on after them.
void expect_error_statuses(Verdict& v, std::uint16_t port, const std::string& origin) {
  auto url = [&](const std::string& path) { return origin + path; };
  std::string err;
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
}

}  // namespace

RunOutcome check_correctness(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {"--origin-timeout-ms", "1500"}, ctx, "correctness");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  expect_bodies(v, port, base);
  expect_header_rewriting(v, stage, port, origin.port());
  expect_error_statuses(v, port, base);
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
    std::optional<HttpResponse> r;
    std::string got = "no response";
    try {
      r = testing_support::read_response(clients[i], 10s);
    } catch (const std::exception& e) {
      got = std::string("a bare close: ") + e.what();  // e.g. closed before any response head
    }
    bool ok = false;
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

}  // namespace grader
