// Stage 4, black-box: what a slow origin or a slow client may not take from everyone else (hits
// and /metrics answered behind stuck requests, slow-loris clients, clients that hang up,
// tunnels), and the fast paths — hits answered on the poller, origin connections kept for the
// next request (RFC 9112 §9.3). The fixture is in tuned_stage.h; the suite is instantiated in
// stage4_tuned_test.cpp.
#include <signal.h>

#include <fstream>
#include <iterator>

#include "tuned_stage.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- Liveness: what a slow origin or a slow client may not take from everyone else ----
// The stuck requests below wait on an origin that holds them far longer (--origin-timeout-ms
// 60 s) than each check's deadline (5 s), so a proxy that waits them out fails the check.
constexpr auto kLive = 5s;

// Requests on a silent origin (/stall holds them unanswered) keep their workers busy; a hit and
// /metrics must still be answered: the sizer counts workers busy now, not only completed
// requests, and grows past the stuck ones.
void expect_hit_and_metrics_answered_behind_stuck_requests(TunedStage& test, int stuck) {
  ASSERT_EQ(fetch(test.port(), test.url("/bytes/100?hit")).status, 200);
  std::vector<proxy::Socket> stalled;
  for (int i = 0; i < stuck; ++i) {
    stalled.push_back(send_request(test.port(), proxy_get(test.url("/stall?" + std::to_string(i)))));
  }
  ASSERT_TRUE(test.origin().wait_for_requests("/stall", 2, kDeadline));
  proxy::Socket hit = send_request(test.port(), proxy_get(test.url("/bytes/100?hit"), {"Connection: close"}));
  std::optional<HttpResponse> answer = read_response(hit, kLive);
  ASSERT_TRUE(answer.has_value()) << "a hit waited behind " << stuck << " stuck requests";
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->field("X-Cache"), "HIT");
  proxy::Socket metrics = send_request(test.port(), "GET /metrics HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n");
  std::optional<HttpResponse> m = read_response(metrics, kLive);
  ASSERT_TRUE(m.has_value()) << "/metrics waited behind " << stuck << " stuck requests";
  EXPECT_EQ(m->status, 200);
  EXPECT_TRUE(test.origin().wait_for_requests("/stall", static_cast<std::uint64_t>(stuck), kDeadline))
      << "every stuck request reached the origin: the pool grew past them";
}

TEST_P(TunedStage, AnswersAHitAndMetricsWhileTwoRequestsAreStuckOnASilentOrigin) {
  start_stage({"--origin-timeout-ms", "60000", "--min-workers", "2"});
  expect_hit_and_metrics_answered_behind_stuck_requests(*this, 2);
}

// Without the origin's limit, so that all fifty hold workers and the pool must grow past them
// (with it, most would wait on the poller: stage4_origin_limit_test.cpp).
TEST_P(TunedStage, AnswersAHitAndMetricsWhileFiftyRequestsAreStuckOnASilentOrigin) {
  start_stage({"--origin-timeout-ms", "60000", "--min-workers", "2", "--origin-limit", "off"});
  expect_hit_and_metrics_answered_behind_stuck_requests(*this, 50);
}

// Slow-loris: clients that open a connection and send part of a head, then nothing. The poller
// reads heads itself, so they hold descriptors, never workers: a fixed pool of 2 still serves.
TEST_P(TunedStage, ServesANormalGetWhileTwoThousandSlowLorisClientsHoldPartialHeads) {
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  constexpr rlim_t kClients = 2000;
  if (files.rlim_cur < kClients + 500) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, kClients + 1000);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0);
  }
  ASSERT_GE(files.rlim_cur, kClients + 500) << "this test needs descriptors for 2,000 clients";
  // The stage inherits the raised limit: it needs a descriptor per client too.
  start_stage({"--workers", "2", "--client-timeout-ms", "60000", "--idle-timeout-ms", "60000"});
  std::vector<proxy::Socket> loris;
  loris.reserve(kClients);
  for (rlim_t i = 0; i < kClients; ++i) {
    loris.push_back(send_request(proxy_port(), "GET " + origin_url("/bytes/10") + " HTTP/1.1\r\nHost: "));
  }
  proxy::Socket normal = send_request(proxy_port(), proxy_get(origin_url("/bytes/10"), {"Connection: close"}));
  std::optional<HttpResponse> answer = read_response(normal, kDeadline);
  ASSERT_TRUE(answer.has_value()) << "a normal GET waited behind slow-loris clients";
  EXPECT_EQ(answer->status, 200);
  // And they are still open, waiting (not shed, not cut).
  pollfd first{loris.front().fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&first, 1, 0), 0);
}

// A client that hangs up while its request waits on the origin frees its worker at once: with
// a fixed pool of 2, twenty abandoned /stall requests do not delay the next GET. (To another
// origin: the stalled one still serves them, so its permits stay taken until it answers,
// stage4_origin_limit_test.cpp.)
TEST_P(TunedStage, AClientThatHangsUpFreesItsWorkerAtOnce) {
  start_stage({"--workers", "2", "--origin-timeout-ms", "60000"});
  harness::OriginServer other;
  {
    std::vector<proxy::Socket> abandoned;
    for (int i = 0; i < 20; ++i) {
      abandoned.push_back(send_request(proxy_port(), proxy_get(origin_url("/stall?" + std::to_string(i)))));
    }
    ASSERT_TRUE(origin_->wait_for_requests("/stall", 2, kDeadline));
  }  // every client hangs up
  proxy::Socket next = send_request(
      proxy_port(), proxy_get("http://127.0.0.1:" + std::to_string(other.port()) + "/bytes/10",
                              {"Connection: close"}));
  std::optional<HttpResponse> answer = read_response(next, kLive);
  ASSERT_TRUE(answer.has_value()) << "abandoned requests still held the workers";
  EXPECT_EQ(answer->status, 200);
  EXPECT_THAT(stage_log(), HasSubstr("origin request dropped"));
}

// A tunnel holds no worker: with a fixed pool of 2 and four tunnels open, a GET is served, and
// the tunnels still carry bytes (an HTTP exchange with the origin through one of them).
TEST_P(TunedStage, OpenTunnelsHoldNoWorker) {
  const std::string base = origin_url("");
  const std::string port = base.substr(base.rfind(':') + 1);
  start_stage({"--workers", "2", "--connect-ports", port});
  const std::string connect = "CONNECT 127.0.0.1:" + port + " HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\n\r\n";
  std::vector<proxy::Socket> tunnels;
  for (int i = 0; i < 4; ++i) {
    tunnels.push_back(send_request(proxy_port(), connect));
    std::string head;
    std::array<char, 1024> buf;
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (head.find("\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() < until) {
      auto got = tunnels.back().read_some(buf, 1s);
      if (got.status == proxy::IoStatus::ok) head.append(buf.data(), got.bytes);
      else if (got.status != proxy::IoStatus::timeout) break;
    }
    ASSERT_TRUE(head.starts_with("HTTP/1.1 200")) << "tunnel " << i << ": " << head;
  }
  proxy::Socket get = send_request(proxy_port(), proxy_get(origin_url("/bytes/10"), {"Connection: close"}));
  std::optional<HttpResponse> answer = read_response(get, kLive);
  ASSERT_TRUE(answer.has_value()) << "open tunnels held the workers";
  EXPECT_EQ(answer->status, 200);
  // Through the last tunnel, straight to the origin.
  ASSERT_EQ(tunnels.back().write_all("GET /bytes/7 HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n", 5s).status,
            proxy::IoStatus::ok);
  std::optional<HttpResponse> through = read_response(tunnels.back(), kDeadline);
  ASSERT_TRUE(through.has_value());
  EXPECT_EQ(through->status, 200);
  EXPECT_EQ(through->body, harness::deterministic_bytes(7));
  EXPECT_EQ(metrics()["proxy_tunnels_open"], 4);
}

// ---- Hits answered on the poller (serve_hit_now), without a worker ----

// The only worker is stuck on a silent origin and the queue holds one request: hits on a
// keep-alive connection are still answered, byte-exact, and counted as every hit is.
TEST_P(TunedStage, AnswersHitsWithoutAWorkerWhileTheOnlyWorkerIsStuck) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "60000"});
  ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/300")).status, 200);  // stored
  proxy::Socket stuck = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/bytes/300")));
  for (int i = 0; i < 5; ++i) {
    if (i > 0) {
      ASSERT_EQ(client.write_all(proxy_get(origin_url("/bytes/300")), 5s).status,
                proxy::IoStatus::ok);
    }
    std::vector<HttpResponse> r = read_framed(client, 1, kLive);
    ASSERT_EQ(r.size(), 1u) << "hit " << i << " waited for the stuck worker";
    EXPECT_EQ(r[0].status, 200);
    EXPECT_EQ(r[0].field("X-Cache"), "HIT");
    EXPECT_EQ(r[0].body, harness::deterministic_bytes(300));
    EXPECT_FALSE(r[0].field("Age").empty());
  }
  EXPECT_EQ(origin_->request_count("/bytes/300"), 1u);
}

// The only worker is stuck and the queue is full, so a request for the origin is shed with 503;
// /metrics, asked for as a monitoring client does (keep-alive), is still answered, by the poller,
// and shows the overload it is asked about.
TEST_P(TunedStage, AnswersMetricsWhileTheOnlyWorkerIsStuckAndTheQueueIsFull) {
  start_stage({"--workers", "1", "--queue", "1", "--origin-timeout-ms", "60000"});
  proxy::Socket stuck = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
  proxy::Socket queued = send_request(proxy_port(), proxy_get(origin_url("/stall?queued")));
  // The queue holds one request: once it does, the next request for the origin is shed.
  bool shed = false;
  for (auto until = std::chrono::steady_clock::now() + kDeadline;
       !shed && std::chrono::steady_clock::now() < until;) {
    shed = fetch(proxy_port(), origin_url("/bytes/10")).status == 503;
  }
  ASSERT_TRUE(shed) << "the full queue never shed a request";
  const std::string ask = "GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n";
  proxy::Socket client = send_request(proxy_port(), ask);
  for (int i = 0; i < 2; ++i) {
    if (i > 0) {
      ASSERT_EQ(client.write_all(ask, 5s).status, proxy::IoStatus::ok);
    }
    std::vector<HttpResponse> r = read_framed(client, 1, kLive);
    ASSERT_EQ(r.size(), 1u) << "/metrics " << i << " waited for the stuck worker";
    ASSERT_EQ(r[0].status, 200);
    Exposition m = parse_exposition(r[0].body);
    EXPECT_EQ(m["proxy_workers_busy"], 1);
    EXPECT_EQ(m["proxy_queue_depth"], 1);
    EXPECT_GE(m["proxy_shed_total"], 1);
  }
}

// A 60 KB hit to a client with a small receive window (the rest of a hit the socket does not
// take at once waits in epoll; serve_hit_now_test forces that case): byte-exact, and the
// connection carries the next request. Lookups count once each, whichever thread answered.
TEST_P(TunedStage, FinishesAHitTheClientReadsSlowlyAndCountsEachLookupOnce) {
  start_stage({"--workers", "2"});
  constexpr std::size_t kBody = 60'000;
  const std::string url = origin_url("/bytes/" + std::to_string(kBody));
  ASSERT_EQ(fetch(proxy_port(), url).status, 200);  // a miss, stored
  proxy::Socket client;
  {
    // A small receive window, so the proxy's send cannot take 60 KB at once.
    proxy::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    proxy::set_int_option(s, SOL_SOCKET, SO_RCVBUF, 4096);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(proxy_port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(s.fd(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    client = std::move(s);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(client.write_all(proxy_get(url), 5s).status, proxy::IoStatus::ok);
    std::vector<HttpResponse> r = read_framed(client, 1, kDeadline);
    ASSERT_EQ(r.size(), 1u) << "hit " << i;
    EXPECT_EQ(r[0].field("X-Cache"), "HIT");
    EXPECT_EQ(r[0].body, harness::deterministic_bytes(kBody)) << "hit " << i;
  }
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_cache_hits_total"], 3);
  EXPECT_EQ(m["proxy_cache_misses_total"], 1);
}

// A client reading pipelined 60 KB hits slowly, longer than the idle timeout in all: a response
// going out is not an idle connection, so it is neither reset nor cut.
TEST_P(TunedStage, KeepsSendingHitsToASlowReaderPastTheIdleTimeout) {
  start_stage({"--workers", "2", "--idle-timeout-ms", "200"});
  constexpr std::size_t kBody = 60'000;
  const std::string url = origin_url("/bytes/" + std::to_string(kBody));
  ASSERT_EQ(fetch(proxy_port(), url).status, 200);  // stored
  proxy::Socket client = send_request(proxy_port(), proxy_get(url) + proxy_get(url) + proxy_get(url));
  std::string raw;
  std::array<char, 8192> piece;
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  while (raw.size() < 3 * kBody && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);  // the slowness under test: ~0.8 MB/s, over 200 ms
    auto got = client.read_some(piece, 5s);
    ASSERT_EQ(got.status, proxy::IoStatus::ok) << "cut after " << raw.size() << " bytes";
    raw.append(piece.data(), got.bytes);
  }
  std::size_t bodies = 0;
  for (std::size_t at = raw.find("X-Cache: HIT"); at != std::string::npos;
       at = raw.find("X-Cache: HIT", at + 1)) {
    ++bodies;
  }
  EXPECT_EQ(bodies, 3u);
}

// A whole request head that arrives together with the client's FIN (here exactly one 16 KiB
// read, so the end of stream is seen by the next read) is still answered.
TEST_P(TunedStage, AnswersAWholeHeadThatArrivesWithTheClientsFin) {
  start_stage();
  const std::string url = origin_url("/bytes/10");
  ASSERT_EQ(fetch(proxy_port(), url).status, 200);  // stored: a hit needs no origin
  std::string request = proxy_get(url, {"X-Pad: "});
  request.insert(request.find("X-Pad: ") + 7, 16384 - request.size(), 'p');
  ASSERT_EQ(request.size(), 16384u);
  proxy::Socket client = send_request(proxy_port(), request);
  client.shutdown_write();
  std::optional<HttpResponse> r = read_response(client, kDeadline);
  ASSERT_TRUE(r.has_value()) << "the head before the FIN was thrown away";
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, harness::deterministic_bytes(10));
}

// With a descriptor limit far below --max-connections, clients past what the limit allows get a
// 503 from the connection cap at once, instead of waiting unanswered in the listen backlog while
// accept fails with EMFILE.
TEST_P(TunedStage, KeepsTheConnectionCapWithinTheDescriptorLimit) {
  harness::ProcessOptions options;
  options.max_open_files = 128;  // soft and hard: the stage cannot raise it
  stderr_path_ = ::testing::TempDir() + "stage4-nofile-" + std::to_string(::getpid()) + ".log";
  options.stderr_path = stderr_path_;
  options.ready_timeout = 30s;
  harness::Process stage({binary_path(GetParam()), "--port", "0", "--max-connections", "10000"},
                         options);
  constexpr int kClients = 100;  // past the cap (64), and past the limit if the cap were 10000
  std::vector<proxy::Socket> clients;
  int served = 0;
  int refused = 0;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(send_request(stage.port(), proxy_get(origin_url("/bytes/10"))));
    std::vector<HttpResponse> r = read_framed(clients.back(), 1, kDeadline);
    ASSERT_EQ(r.size(), 1u) << "client " << i << " got no answer";
    if (r[0].status == 200) {
      ++served;  // and its connection stays open, counted against the cap
    } else {
      EXPECT_EQ(r[0].status, 503) << r[0].body;
      ++refused;
    }
  }
  EXPECT_EQ(served, 64);
  EXPECT_EQ(refused, kClients - 64);
  clients.clear();
  EXPECT_TRUE(stage.stop(10s).clean());
  EXPECT_THAT(stage_log(), HasSubstr("RLIMIT_NOFILE (128 descriptors)"));
}

// ---- Persistent origin connections (RFC 9112 §9.3), on by default in stage 4 ----

// Distinct URLs (misses), one after another: the origin sees far fewer connections than
// requests, and /metrics counts the reuse. With --no-origin-reuse, one connection per request.
TEST_P(TunedStage, ReusesOriginConnectionsForMissesAndCountsThem) {
  start_stage({"--workers", "2"});
  constexpr int kRequests = 20;
  for (int i = 0; i < kRequests; ++i) {
    HttpResponse r = fetch(proxy_port(), origin_url("/bytes/64?reuse=" + std::to_string(i)));
    ASSERT_EQ(r.status, 200) << "request " << i;
    EXPECT_EQ(r.body, harness::deterministic_bytes(64));
  }
  EXPECT_EQ(origin_->request_count("/bytes/64"), static_cast<std::uint64_t>(kRequests));
  const std::uint64_t connections = origin_->connections_accepted();
  EXPECT_LT(connections, kRequests / 2) << "the origin saw one connection per request or so";
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_origin_connections_opened_total"], static_cast<double>(connections));
  EXPECT_EQ(m["proxy_origin_connections_opened_total"] +
                m["proxy_origin_connections_reused_total"],
            kRequests);
  EXPECT_EQ(m["proxy_origin_requests_retried_total"], 0);
}

TEST_P(TunedStage, OpensAnOriginConnectionPerRequestWithNoOriginReuse) {
  start_stage({"--workers", "2", "--no-origin-reuse"});
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/8?fresh=" + std::to_string(i))).status, 200);
  }
  EXPECT_EQ(origin_->connections_accepted(), 5u);
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_origin_connections_reused_total"], 0);
  EXPECT_EQ(m["proxy_origin_connections_idle"], 0);
}

// Leaves one kept connection in the pool whose next request the origin drops unanswered (as
// an origin does that timed the connection out just as the request arrived).
void keep_a_connection_the_origin_will_drop(TunedStage& t) {
  ASSERT_EQ(fetch(t.port(), t.url("/drop-next")).status, 200);
  // The worker gives the connection back after the response's last byte went out: wait for it,
  // so the next request is sure to take it.
  ASSERT_TRUE(t.wait_for_metric("proxy_origin_connections_idle", 1));
}

TEST_P(TunedStage, RetriesAGetOnceWhenAKeptOriginConnectionClosesUnanswered) {
  start_stage({"--workers", "1"});
  keep_a_connection_the_origin_will_drop(*this);
  HttpResponse r = fetch(proxy_port(), origin_url("/bytes/11"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, harness::deterministic_bytes(11));
  EXPECT_EQ(origin_->request_count("/bytes/11"), 2u) << "dropped once, then answered";
  EXPECT_EQ(origin_->connections_accepted(), 2u);
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_origin_requests_retried_total"], 1);
  EXPECT_EQ(m["proxy_origin_connections_reused_total"], 1);
}

// A POST may not be sent twice (RFC 9112 §9.3.1), so it never goes out on a kept connection,
// which the origin may be closing just then: it takes a new one, and the kept one is left alone.
TEST_P(TunedStage, SendsAPostOnANewConnectionNeverOnAKeptOne) {
  start_stage({"--workers", "1"});
  keep_a_connection_the_origin_will_drop(*this);
  HttpResponse r = exchange(proxy_port(),
                            "POST " + origin_url("/echo") + " HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 5\r\nConnection: close\r\n\r\nhello");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
  EXPECT_EQ(origin_->request_count("/echo"), 1u);
  EXPECT_EQ(origin_->connections_accepted(), 2u);
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_origin_requests_retried_total"], 0);
  EXPECT_EQ(m["proxy_origin_connections_reused_total"], 0);
}

// A body cut short, or one that ends at the close, leaves nothing to reuse: each request after
// such a response opens a connection of its own.
TEST_P(TunedStage, KeepsNoOriginConnectionAfterACutOrCloseDelimitedBody) {
  start_stage({"--workers", "1"});
  (void)fetch(proxy_port(), origin_url("/truncate/1000"));  // cut: its status is beside the point
  EXPECT_EQ(origin_->connections_accepted(), 1u);
  HttpResponse closed = fetch(proxy_port(), origin_url("/close/100"));
  EXPECT_EQ(closed.status, 200);
  EXPECT_EQ(closed.body, harness::deterministic_bytes(100));
  EXPECT_EQ(metrics()["proxy_origin_connections_idle"], 0);
  ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/5")).status, 200);
  EXPECT_EQ(origin_->connections_accepted(), 3u) << "a connection was reused after a cut body";
  EXPECT_EQ(metrics()["proxy_origin_connections_reused_total"], 0);
}

// A HEAD response declares a body it does not send; an origin that sent it late would have it
// read as the next response on a kept connection (RFC 9112 §6.3): such a connection is not kept.
TEST_P(TunedStage, KeepsNoOriginConnectionAfterAHeadResponseThatDeclaresABody) {
  start_stage({"--workers", "1"});
  HttpResponse head = exchange(proxy_port(), "HEAD " + origin_url("/bytes/10") +
                                                 " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/5")).status, 200);
  EXPECT_EQ(origin_->connections_accepted(), 2u);
}

// ---- Misses served by the poller, on a kept origin connection (start_miss_now) ----

// One kept origin connection, left by a worker's miss: the next misses to that origin are the
// poller's.
void keep_an_origin_connection(TunedStage& t) {
  ASSERT_EQ(fetch(t.port(), t.url("/bytes/10?warm")).status, 200);
  ASSERT_TRUE(t.wait_for_metric("proxy_origin_connections_idle", 1));
}

// Content-Length and chunked bodies, small and past one socket buffer: each arrives byte-exact
// as a MISS, is stored (the same URL is then a HIT), and is counted as the poller's.
TEST_P(TunedStage, RelaysMissesFromThePollerByteExactAndStoresThem) {
  start_stage({"--workers", "1"});
  keep_an_origin_connection(*this);
  const std::vector<std::pair<std::string, std::size_t>> misses = {
      {"/bytes/1", 1}, {"/bytes/1500", 1500}, {"/bytes/70000", 70'000}, {"/stream-bytes/5000", 5000}};
  for (const auto& [path, size] : misses) {
    HttpResponse miss = fetch(proxy_port(), origin_url(path));
    EXPECT_EQ(miss.status, 200) << path;
    EXPECT_EQ(miss.field("X-Cache"), "MISS") << path;
    EXPECT_EQ(miss.body, harness::deterministic_bytes(size)) << path;
    HttpResponse hit = fetch(proxy_port(), origin_url(path));
    EXPECT_EQ(hit.field("X-Cache"), "HIT") << path;
    EXPECT_EQ(hit.body, harness::deterministic_bytes(size)) << path;
  }
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_poller_misses_total"], static_cast<double>(misses.size()));
  EXPECT_EQ(m["proxy_origin_connections_opened_total"], 1) << "every miss reused the one kept";
}

// The only worker is stuck on a request to a silent origin (a POST: never sent on a kept
// connection), yet a miss on the kept connection is answered: no worker waits on the origin.
TEST_P(TunedStage, AnswersAMissWithoutAWorkerWhileTheOnlyWorkerIsStuck) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "60000"});
  keep_an_origin_connection(*this);
  proxy::Socket stuck = send_request(
      proxy_port(), proxy_get(origin_url("/stall"), {"Content-Length: 0"}, 1, "POST"));
  ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/bytes/123")));
  std::optional<HttpResponse> answer = read_response(client, kLive);
  ASSERT_TRUE(answer.has_value()) << "a miss waited for the stuck worker";
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, harness::deterministic_bytes(123));
}

// Two pipelined misses, both the poller's: answered in order, the second after the first.
TEST_P(TunedStage, AnswersAPipelinedPairOfPollerMissesInOrder) {
  start_stage({"--workers", "1"});
  keep_an_origin_connection(*this);
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/delay/200/bytes/7")) +
                                                        proxy_get(origin_url("/bytes/3")));
  std::vector<HttpResponse> r = read_framed(client, 2, kDeadline);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, harness::deterministic_bytes(7)) << "the first request's answer first";
  EXPECT_EQ(r[1].body, harness::deterministic_bytes(3));
  EXPECT_EQ(metrics()["proxy_poller_misses_total"], 2);
}

// A client that hangs up while the poller waits on its origin: nothing waits on its behalf any
// more (its answer is thrown away when it comes, nothing stored), it is said so, and its origin
// connection is not kept.
TEST_P(TunedStage, DropsAPollerMissWhoseClientHangsUp) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "60000"});
  keep_an_origin_connection(*this);
  {
    proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/stall")));
    ASSERT_TRUE(origin_->wait_for_requests("/stall", 1, kDeadline));
    ASSERT_TRUE(wait_for_metric("proxy_poller_misses_waiting", 1));
  }  // hangs up
  EXPECT_TRUE(metrics_until([](const Exposition& m) { return m["proxy_poller_misses_waiting"] == 0; },
                            [](const Exposition&) {}, kLive))
      << "the poller still waits on the origin for a client that is gone";
  EXPECT_EQ(metrics()["proxy_origin_connections_idle"], 0);
  EXPECT_THAT(stage_log(), HasSubstr("hung up before the origin answered"));
}

// No byte from the origin for --origin-timeout-ms: 504, as a worker's own wait ends.
TEST_P(TunedStage, AnswersAPollerMiss504AfterTheOriginTimeout) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "300"});
  keep_an_origin_connection(*this);
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  std::optional<HttpResponse> answer = read_response(client, kDeadline);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 504);
  EXPECT_THAT(answer->body, HasSubstr("origin did not answer within 300 ms"));
  EXPECT_TRUE(closed_by_peer(client, kDeadline));
}

// An origin the test scripts step by step on one kept connection: the proxy's connection to it
// is accepted, then each request head read and each answer written when the test says so.
class ScriptedOrigin {
 public:
  ScriptedOrigin() : listener_(proxy::listen_tcp("127.0.0.1", 0)) {}
  [[nodiscard]] std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(proxy::local_port(listener_)) + path;
  }
  /// Accepts the proxy's connection, within kDeadline.
  bool accept() {
    pollfd ready{listener_.fd(), POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(kDeadline / std::chrono::milliseconds(1))) != 1) {
      return false;
    }
    std::optional<proxy::Socket> socket = proxy::accept_client(listener_, -1);
    if (!socket) return false;
    connection_ = std::move(*socket);
    return true;
  }
  /// The next request head on the connection (empty when none came within kDeadline).
  std::string next_head() {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    std::array<char, 4096> chunk;
    for (;;) {
      if (const std::size_t end = buffer_.find("\r\n\r\n"); end != std::string::npos) {
        std::string head = buffer_.substr(0, end + 4);
        buffer_.erase(0, end + 4);
        return head;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto got = connection_.read_some(chunk, std::max(left, std::chrono::milliseconds(0)));
      if (got.status != proxy::IoStatus::ok) return {};
      buffer_.append(chunk.data(), got.bytes);
    }
  }
  /// Sends `bytes` as they are: part of an answer.
  bool send(const std::string& bytes) {
    return connection_.write_all(bytes, kDeadline).status == proxy::IoStatus::ok;
  }
  /// Answers 200 with `body`, not to be stored (each test request is a miss).
  bool answer(const std::string& body) {
    const std::string response = "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body;
    return connection_.write_all(response, kDeadline).status == proxy::IoStatus::ok;
  }

 private:
  proxy::Socket listener_;
  proxy::Socket connection_;
  std::string buffer_;
};

// Whether process `pid` is stopped (SIGSTOP), from /proc/PID/stat's state field.
bool process_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t name_end = text.rfind(')');
  return name_end != std::string::npos && name_end + 2 < text.size() && text[name_end + 2] == 'T';
}

// One epoll_wait can return an event for a descriptor that an earlier event in the same batch
// closed, and that accept(2) has since handed to a new client (the lowest free number). Here,
// with the stage stopped, three things happen in order: the origin answers client 1's poller
// miss, client 2 connects and sends a miss, client 1 hangs up. Resumed, the poller relays
// client 1's answer and closes it, accepts client 2 on the same number and sends its miss on
// the kept connection; client 1's hang-up, still in the batch, must not drop client 2's miss.
TEST_P(TunedStage, KeepsAPollerMissWhenAnEventOfItsDescriptorsLastOwnerComesLate) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "60000"});
  ScriptedOrigin origin;
  // /metrics on one connection kept open: no descriptor of the stage's is freed meanwhile, so
  // client 1's is the lowest free one when client 2 arrives.
  proxy::Socket monitor = send_request(proxy_port(), "");
  auto metric = [&](const std::string& name) {
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n";
    EXPECT_EQ(monitor.write_all(request, kDeadline).status, proxy::IoStatus::ok);
    std::vector<HttpResponse> r = read_framed(monitor, 1, kDeadline);
    return r.empty() ? std::nan("") : parse_exposition(r[0].body)[name];
  };
  // A worker's miss leaves the origin connection kept.
  proxy::Socket warm = send_request(proxy_port(), proxy_get(origin.url("/warm")));
  ASSERT_TRUE(origin.accept());
  ASSERT_THAT(origin.next_head(), HasSubstr("GET /warm "));
  ASSERT_TRUE(origin.answer("ok"));
  ASSERT_EQ(read_framed(warm, 1, kDeadline).size(), 1u);
  ASSERT_TRUE(wait_until([&] { return metric("proxy_origin_connections_idle") >= 1; }, kDeadline));
  // Client 1's miss, sent by the poller on it.
  proxy::Socket first = send_request(proxy_port(), proxy_get(origin.url("/one")));
  ASSERT_THAT(origin.next_head(), HasSubstr("GET /one "));
  ASSERT_EQ(metric("proxy_poller_misses_waiting"), 1);

  stage_->send_signal(SIGSTOP);
  struct Resume {
    harness::Process& stage;
    ~Resume() { stage.send_signal(SIGCONT); }
  } resume{*stage_};
  ASSERT_TRUE(wait_until([&] { return process_stopped(stage_->pid()); }, kDeadline));
  ASSERT_TRUE(origin.answer("one"));
  proxy::Socket second = send_request(proxy_port(), proxy_get(origin.url("/two")));
  first.close();
  stage_->send_signal(SIGCONT);

  ASSERT_THAT(origin.next_head(), HasSubstr("GET /two "));
  ASSERT_TRUE(origin.answer("two"));
  std::vector<HttpResponse> answer = read_framed(second, 1, kDeadline);
  ASSERT_EQ(answer.size(), 1u) << "client 2's miss was dropped for client 1's hang-up";
  EXPECT_EQ(answer[0].status, 200);
  EXPECT_EQ(answer[0].body, "two");
  EXPECT_THAT(stage_log(), Not(HasSubstr("GET " + origin.url("/two") + ": client hung up")));
}

// A poller miss whose answer has begun but is still arriving (a stream, here chunked) reaches
// the client as it comes, as a worker's does: the poller holds only answers that arrive whole.
TEST_P(TunedStage, RelaysAPollerMissWhoseBodyIsStillArrivingAsItComes) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "60000"});
  ScriptedOrigin origin;
  proxy::Socket warm = send_request(proxy_port(), proxy_get(origin.url("/warm")));
  ASSERT_TRUE(origin.accept());
  ASSERT_THAT(origin.next_head(), HasSubstr("GET /warm "));
  ASSERT_TRUE(origin.answer("ok"));
  ASSERT_EQ(read_framed(warm, 1, kDeadline).size(), 1u);
  ASSERT_TRUE(wait_for_metric("proxy_origin_connections_idle", 1));
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin.url("/events")));
  ASSERT_THAT(origin.next_head(), HasSubstr("GET /events "));
  ASSERT_EQ(metrics()["proxy_poller_misses_waiting"], 1) << "not the poller's miss";
  ASSERT_TRUE(origin.send("HTTP/1.1 200 OK\r\nCache-Control: no-store\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n"));
  // The first event, while the origin sends nothing more.
  std::string seen;
  std::array<char, 4096> chunk;
  const auto until = std::chrono::steady_clock::now() + kLive;
  while (seen.find("first\n") == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    auto got = client.read_some(chunk, std::max(left, std::chrono::milliseconds(0)));
    if (got.status != proxy::IoStatus::ok) break;
    seen.append(chunk.data(), got.bytes);
  }
  ASSERT_THAT(seen, HasSubstr("first\n")) << "the stream's first event was held back";
  EXPECT_THAT(seen, HasSubstr("HTTP/1.1 200 OK"));
  ASSERT_TRUE(origin.send("7\r\nsecond\n\r\n0\r\n\r\n"));
  while (seen.find("0\r\n\r\n") == std::string::npos) {
    auto got = client.read_some(chunk, kDeadline);
    if (got.status != proxy::IoStatus::ok) break;
    seen.append(chunk.data(), got.bytes);
  }
  EXPECT_THAT(seen, HasSubstr("second\n")) << seen;
  EXPECT_THAT(seen, HasSubstr("0\r\n\r\n")) << seen;
}

// A poller miss a worker finishes (here the 504 after the origin timeout) is counted in
// proxy_request_duration_seconds from when the poller sent it, not from the worker's part.
TEST_P(TunedStage, TimesAPollerMissAWorkerFinishesFromWhenItWasSent) {
  start_stage({"--workers", "1", "--origin-timeout-ms", "300"});
  keep_an_origin_connection(*this);
  const double before = metrics()["proxy_request_duration_seconds_sum"];
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/stall")));
  std::optional<HttpResponse> answer = read_response(client, kDeadline);
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ(answer->status, 504);
  // Observed once the worker is done, which may be just after the client has the 504.
  double grew = 0;
  EXPECT_TRUE(metrics_until(
      [&](const Exposition& m) {
        grew = m["proxy_request_duration_seconds_sum"] - before;
        return grew >= 0.3;
      },
      [](const Exposition&) {}, kLive))
      << "the 504 after a 300 ms wait counted " << grew << " s";
}

TEST_P(TunedStage, ServesEveryMissOnAWorkerWithNoPollerMisses) {
  start_stage({"--workers", "1", "--no-poller-misses"});
  keep_an_origin_connection(*this);
  for (int i = 0; i < 3; ++i) {
    HttpResponse r = fetch(proxy_port(), origin_url("/bytes/9?worker=" + std::to_string(i)));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, harness::deterministic_bytes(9));
  }
  EXPECT_EQ(metrics()["proxy_poller_misses_total"], 0);
}

}  // namespace
}  // namespace testing_support
