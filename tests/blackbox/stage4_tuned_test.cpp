// Stage 4's own behaviour, black-box through the real binary: load shedding, the header-read
// deadline, keep-alive (many requests on one connection, the idle timeout, a pipelined pair,
// the connection cap), /metrics as Prometheus text whose counters add up, and --workers auto
// staying within its bounds. Every other black-box test runs against stage 4 too (StageTest).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "body_reader.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr auto kDeadline = 30s;  // generous: a loaded 2-core machine under TSan

/// Reads `count` responses from one connection, in order, each delimited by its framing
/// (Content-Length or chunked), as a keep-alive client must. Fewer when the connection ends or
/// `timeout` passes first.
std::vector<HttpResponse> read_framed(const proxy::Socket& socket, std::size_t count,
                                      std::chrono::milliseconds timeout) {
  std::vector<HttpResponse> responses;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string raw;
  std::array<char, 65536> chunk;
  while (responses.size() < count) {
    proxy::ResponseHead head;
    auto parsed = proxy::parse_response_head(raw, head);
    if (parsed.status == proxy::ParseStatus::complete) {
      auto framing = proxy::response_body_framing(head, "GET");
      if (framing && framing->kind != proxy::BodyKind::close_delimited) {
        proxy::BodyReader reader(*framing);
        HttpResponse r;
        auto fed = reader.feed(std::string_view(raw).substr(parsed.consumed), r.body);
        if (!fed.error && reader.done()) {
          r.status = head.status;
          r.fields = head.fields;
          r.complete = true;
          const std::size_t end = parsed.consumed + fed.consumed;
          r.raw = raw.substr(0, end);
          raw.erase(0, end);
          responses.push_back(std::move(r));
          continue;
        }
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto got = socket.read_some(chunk, left);
    if (got.status != proxy::IoStatus::ok) break;
    raw.append(chunk.data(), got.bytes);
  }
  return responses;
}

/// True once the peer has closed `socket` (EOF or reset) within `timeout`, discarding data.
bool closed_by_peer(const proxy::Socket& socket, std::chrono::milliseconds timeout) {
  std::array<char, 4096> buf;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    auto got = socket.read_some(buf, left);
    if (got.status == proxy::IoStatus::eof || got.status == proxy::IoStatus::error) return true;
    if (got.status != proxy::IoStatus::ok) return false;
  }
}

/// One parsed exposition: sample name (with labels) → value, and each family's TYPE.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::map<std::string, std::string> helps;
  double operator[](const std::string& name) const {
    auto it = samples.find(name);
    return it == samples.end() ? std::nan("") : it->second;
  }
};

/// Parses Prometheus text format 0.0.4 strictly enough to fail on anything malformed: every
/// line is a HELP, a TYPE or `name[{labels}] value`; every sample belongs to a family with
/// HELP and TYPE declared before it.
Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, rest;
      words >> name;
      std::getline(words, rest);
      EXPECT_FALSE(name.empty()) << line;
      EXPECT_FALSE(rest.empty()) << line;
      (line[2] == 'H' ? out.helps : out.types)[name] = rest.substr(rest.find_first_not_of(' '));
      continue;
    }
    EXPECT_NE(line[0], '#') << "unknown comment: " << line;
    const std::size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos) continue;
    const std::string name = line.substr(0, space);
    std::size_t used = 0;
    const double value = std::stod(line.substr(space + 1), &used);
    EXPECT_EQ(space + 1 + used, line.size()) << "trailing text: " << line;
    std::string family = name.substr(0, name.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (family.size() > s.size() && family.ends_with(s) &&
          out.types.count(family.substr(0, family.size() - s.size())) != 0) {
        family.resize(family.size() - s.size());
      }
    }
    EXPECT_EQ(out.types.count(family), 1u) << "no TYPE before " << line;
    EXPECT_EQ(out.helps.count(family), 1u) << "no HELP before " << line;
    out.samples[name] = value;
  }
  return out;
}

class TunedStage : public StageTest {
 public:
  // For the helpers the liveness tests share.
  std::uint16_t port() const { return proxy_port(); }
  std::string url(const std::string& path) const { return origin_url(path); }
  harness::OriginServer& origin() { return *origin_; }
  /// Polls /metrics until sample `name` is at least `value`, within kDeadline.
  bool wait_for_metric(const std::string& name, double value) {
    return metrics_until([&](const Exposition& m) { return m[name] >= value; },
                         [](const Exposition&) {}, kDeadline);
  }

 protected:
  Exposition metrics() {
    HttpResponse r = exchange(proxy_port(), "GET /metrics HTTP/1.1\r\nHost: proxy\r\n"
                                            "Connection: close\r\n\r\n");
    EXPECT_EQ(r.status, 200);
    EXPECT_THAT(r.field("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
    return parse_exposition(r.body);
  }

  /// Polls /metrics until `condition` holds for a snapshot, for at most `deadline`; every
  /// snapshot seen is also handed to `each` (bound checks).
  bool metrics_until(const std::function<bool(const Exposition&)>& condition,
                     const std::function<void(const Exposition&)>& each,
                     std::chrono::milliseconds deadline) {
    const auto until = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      Exposition m = metrics();
      each(m);
      if (condition(m)) return true;
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(20ms);  // polling another process's state: nothing to wait on
    }
  }
};

// The default shard count leaves every shard room for four of the largest objects: two objects
// the whole cache can hold are both kept, whichever shards their keys hash to. (With a shard per
// largest object, two 4 KB objects in a 10,000-byte cache evicted each other half the time.)
TEST_P(TunedStage, KeepsTwoObjectsTheCacheHasRoomForWhicheverShardsTheyHashTo) {
  start_stage({"--cache-bytes", "10000", "--max-object-bytes", "5000"});
  for (int pair = 0; pair < 8; ++pair) {
    const std::string a = origin_url("/bytes/4000?a=" + std::to_string(pair));
    const std::string b = origin_url("/bytes/4000?b=" + std::to_string(pair));
    ASSERT_EQ(fetch(proxy_port(), a).field("X-Cache"), "MISS");
    ASSERT_EQ(fetch(proxy_port(), b).field("X-Cache"), "MISS");
    HttpResponse again = fetch(proxy_port(), a);
    EXPECT_EQ(again.status, 200);
    EXPECT_EQ(again.field("X-Cache"), "HIT") << "pair " << pair << ": " << a << " was evicted by " << b;
  }
}

// Under overload a log line per refusal would be thousands of blocking writes a second from the
// poller; refusals are logged at most once a second, with the count of those left out.
TEST_P(TunedStage, LogsRefusalsAtMostOncePerSecondNotOncePerRefusal) {
  start_stage({"--max-connections", "1"});
  // One open keep-alive connection fills the cap: every other client is refused at accept.
  proxy::Socket holder = send_request(proxy_port(), proxy_get(origin_url("/bytes/1")));
  ASSERT_EQ(read_framed(holder, 1, kDeadline).size(), 1u);
  constexpr int kClients = 40;
  int refused = 0;
  for (int i = 0; i < kClients; ++i) {
    if (fetch(proxy_port(), origin_url("/bytes/1")).status == 503) ++refused;
  }
  ASSERT_EQ(refused, kClients);
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean());
  const std::string log = stage_log();
  int lines = 0;
  for (std::size_t at = log.find(": 503 "); at != std::string::npos; at = log.find(": 503 ", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1) << "the first refusal is logged";
  EXPECT_LT(lines, kClients / 2) << log;
}

// The hard bound on the queue (memory). Shedding by queueing delay is set out of reach here
// (--shed-delay-ms): this is about the bound alone, and the queued client must be served late.
TEST_P(TunedStage, ShedsWith503AndRetryAfterWhenTheQueueIsFullInsteadOfHanging) {
  start_stage({"--workers", "1", "--queue", "1", "--shed-delay-ms", "600000"});
  // The only worker is busy with a slow request...
  proxy::Socket busy = send_request(proxy_port(), proxy_get(origin_url("/delay/3000/bytes/10")));
  ASSERT_TRUE(origin_->wait_for_requests("/delay/", 1, kDeadline));
  // ...so of two more, one fills the queue and the other is refused at once.
  proxy::Socket second = send_request(proxy_port(), proxy_get(origin_url("/bytes/20?second")));
  proxy::Socket third = send_request(proxy_port(), proxy_get(origin_url("/bytes/20?third")));
  // The refusal comes at once; the queued one is answered only after the slow request.
  std::array<pollfd, 2> waiting{pollfd{second.fd(), POLLIN, 0}, pollfd{third.fd(), POLLIN, 0}};
  ASSERT_GE(::poll(waiting.data(), 2, static_cast<int>(std::chrono::milliseconds(kDeadline).count())), 1)
      << "neither client was answered: a hang, not a 503";
  pollfd slow_pending{busy.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&slow_pending, 1, 0), 0) << "the 503 must not wait for the busy worker";
  const proxy::Socket& first_answered = (waiting[0].revents & POLLIN) ? second : third;
  const proxy::Socket& other = (waiting[0].revents & POLLIN) ? third : second;
  std::optional<HttpResponse> refused = read_response(first_answered, kDeadline);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->field("Retry-After"), "1");
  EXPECT_EQ(refused->field("X-Cache"), "MISS");
  EXPECT_TRUE(refused->complete);
  auto slow = read_response(busy, kDeadline);
  ASSERT_TRUE(slow.has_value());
  EXPECT_EQ(slow->status, 200);
  auto queued = read_response(other, kDeadline);
  ASSERT_TRUE(queued.has_value());
  EXPECT_EQ(queued->status, 200) << "the queued client is served once the worker is free";
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean());
  EXPECT_THAT(status.output, HasSubstr(" shed=1 "));
}

TEST_P(TunedStage, AnswersAClientSendingOneByteASecondWith408AndFreesItsWorker) {
  start_stage({"--workers", "1", "--client-timeout-ms", "1500"});
  auto connected = proxy::connect_tcp("127.0.0.1", proxy_port(), 5s);
  ASSERT_EQ(connected.error, proxy::ConnectError::none);
  const proxy::Socket& slow = connected.socket;
  const std::string request = proxy_get(origin_url("/bytes/10"));
  std::optional<HttpResponse> answer;
  for (char c : request) {
    if (slow.write_all(std::string_view(&c, 1), 5s).status != proxy::IoStatus::ok) break;
    pollfd p{slow.fd(), POLLIN, 0};
    if (::poll(&p, 1, 1000) == 1) break;  // one byte a second, until the proxy answers
  }
  answer = read_response(slow, kDeadline);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status, 408);
  EXPECT_EQ(answer->field("Connection"), "close");
  // The single worker is free again.
  HttpResponse next = fetch(proxy_port(), origin_url("/bytes/10"));
  EXPECT_EQ(next.status, 200);
}

TEST_P(TunedStage, ServesManyRequestsOnOneKeepAliveConnection) {
  start_stage({"--workers", "2"});
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/bytes/500")));
  constexpr int kRequests = 50;
  for (int i = 0; i < kRequests; ++i) {
    if (i > 0) {
      ASSERT_EQ(client.write_all(proxy_get(origin_url("/bytes/500")), 5s).status,
                proxy::IoStatus::ok);
    }
    std::vector<HttpResponse> r = read_framed(client, 1, kDeadline);
    ASSERT_EQ(r.size(), 1u) << "request " << i;
    EXPECT_EQ(r[0].status, 200);
    EXPECT_EQ(r[0].body, harness::deterministic_bytes(500));
    EXPECT_EQ(r[0].field("X-Cache"), i == 0 ? "MISS" : "HIT");
    EXPECT_EQ(r[0].field("Connection"), "") << "HTTP/1.1 persists unless it says close";
  }
  EXPECT_EQ(origin_->request_count("/bytes/500"), 1u);
  // Connection: close is honoured: the proxy answers, then closes.
  ASSERT_EQ(client.write_all(proxy_get(origin_url("/bytes/500"), {"Connection: close"}), 5s).status,
            proxy::IoStatus::ok);
  auto last = read_response(client, kDeadline);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->field("Connection"), "close");
  EXPECT_TRUE(closed_by_peer(client, kDeadline));
}

TEST_P(TunedStage, ClosesAnIdleKeepAliveConnectionAfterTheIdleTimeout) {
  start_stage({"--idle-timeout-ms", "300"});
  proxy::Socket client = send_request(proxy_port(), proxy_get(origin_url("/bytes/10")));
  std::vector<HttpResponse> r = read_framed(client, 1, kDeadline);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].field("Connection"), "");
  EXPECT_TRUE(closed_by_peer(client, kDeadline)) << "the idle connection was never closed";
  Exposition m = metrics();
  EXPECT_EQ(m["proxy_connections_idle_closed_total"], 1);
}

TEST_P(TunedStage, AnswersAPipelinedPairInOrder) {
  start_stage();
  proxy::Socket client = send_request(
      proxy_port(), proxy_get(origin_url("/delay/200/bytes/7")) + proxy_get(origin_url("/bytes/3")));
  std::vector<HttpResponse> r = read_framed(client, 2, kDeadline);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, harness::deterministic_bytes(7)) << "the first request's answer first";
  EXPECT_EQ(r[1].body, harness::deterministic_bytes(3));
}

TEST_P(TunedStage, RefusesConnectionsPastTheCapWith503) {
  start_stage({"--max-connections", "2"});
  proxy::Socket a = send_request(proxy_port(), proxy_get(origin_url("/bytes/1")));
  proxy::Socket b = send_request(proxy_port(), proxy_get(origin_url("/bytes/1")));
  ASSERT_EQ(read_framed(a, 1, kDeadline).size(), 1u);
  ASSERT_EQ(read_framed(b, 1, kDeadline).size(), 1u);  // both stay open, idle
  HttpResponse refused = fetch(proxy_port(), origin_url("/bytes/1"));
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.field("Retry-After"), "1");
}

TEST_P(TunedStage, ReportsMetricsAsPrometheusTextWhoseCountersAddUp) {
  start_stage({"--workers", "3"});
  for (const char* path : {"/bytes/100?a", "/bytes/200?b", "/bytes/300?c"}) {
    ASSERT_EQ(fetch(proxy_port(), origin_url(path)).status, 200);  // 3 misses
  }
  for (const char* path : {"/bytes/100?a", "/bytes/300?c"}) {
    ASSERT_EQ(fetch(proxy_port(), origin_url(path)).field("X-Cache"), "HIT");  // 2 hits
  }
  // A worker records a request's latency just after its last byte went out, so the client
  // may ask for /metrics a moment before the last one is counted: poll until the histogram
  // holds every finished request — all but the /metrics request being served. Each earlier
  // client's close also makes its parked connection readable, and the poller hands it to a
  // worker to read the EOF: wait until those have passed through the queue too.
  Exposition m;
  ASSERT_TRUE(metrics_until(
      [&](const Exposition& snapshot) {
        m = snapshot;
        return snapshot["proxy_request_duration_seconds_count"] ==
                   snapshot["proxy_requests_total"] - 1 &&
               snapshot["proxy_queue_depth"] == 0;
      },
      [](const Exposition&) {}, kDeadline));
  EXPECT_EQ(m["proxy_cache_hits_total"], 2);
  EXPECT_EQ(m["proxy_cache_misses_total"], 3);
  // Five proxied requests, plus /metrics requests, which count as requests but not lookups.
  const double metrics_requests = m["proxy_requests_total"] - 5;
  EXPECT_GE(metrics_requests, 1);
  EXPECT_EQ(m["proxy_cache_entries"], 3);
  EXPECT_GT(m["proxy_cache_bytes"], 600);
  EXPECT_EQ(m["proxy_cache_evictions_total"], 0);
  EXPECT_EQ(m["proxy_shed_total"], 0);
  EXPECT_EQ(m["proxy_workers_total"], 3);
  EXPECT_GE(m["proxy_workers_busy"], 1) << "this request is being served";
  EXPECT_LE(m["proxy_workers_busy"], m["proxy_workers_total"]);
  EXPECT_EQ(m["proxy_queue_depth"], 0);
  EXPECT_EQ(m.types.at("proxy_request_duration_seconds"), "histogram");
  // Buckets are cumulative and the +Inf bucket equals the count.
  EXPECT_EQ(m["proxy_request_duration_seconds_count"], 5 + metrics_requests - 1);
  EXPECT_EQ(m["proxy_request_duration_seconds_bucket{le=\"+Inf\"}"],
            m["proxy_request_duration_seconds_count"]);
  EXPECT_GT(m["proxy_request_duration_seconds_sum"], 0);
  double previous = 0;
  int buckets = 0;
  for (const auto& sample : m.samples) {
    if (sample.first.rfind("proxy_request_duration_seconds_bucket", 0) == 0) ++buckets;
  }
  EXPECT_GE(buckets, 5);
  for (const char* le : {"0.0005", "0.001", "0.01", "0.1", "1", "10", "+Inf"}) {
    double value = m[std::string("proxy_request_duration_seconds_bucket{le=\"") + le + "\"}"];
    EXPECT_GE(value, previous) << le;
    previous = value;
  }
  for (const auto& [family, type] : m.types) {
    if (type == "counter") {
      EXPECT_TRUE(family.ends_with("_total")) << family;
    }
  }
}

TEST_P(TunedStage, AutoSizedPoolGrowsUnderLoadAndShrinksBackWithinItsBounds) {
  start_stage({"--workers", "auto", "--min-workers", "2", "--max-workers", "5",
               "--auto-interval-ms", "50"});
  auto within_bounds = [](const Exposition& m) {
    EXPECT_GE(m["proxy_workers_total"], 2);
    EXPECT_LE(m["proxy_workers_total"], 5);
    EXPECT_EQ(m["proxy_workers_min"], 2);
    EXPECT_EQ(m["proxy_workers_max"], 5);
  };
  within_bounds(metrics());
  {
    // Twelve clients waiting on a 100 ms origin keep any pool of at most 5 busy.
    std::vector<std::jthread> clients;
    for (int c = 0; c < 12; ++c) {
      clients.emplace_back([this, c](std::stop_token stop) {
        for (int i = 0; !stop.stop_requested(); ++i) {
          try {
            fetch(proxy_port(),
                  origin_url("/delay/100/bytes/10?c=" + std::to_string(c) + "&i=" + std::to_string(i)),
                  10s);
          } catch (const std::exception&) {
          }
        }
      });
    }
    EXPECT_TRUE(metrics_until([](const Exposition& m) { return m["proxy_workers_total"] == 5; },
                              within_bounds, kDeadline))
        << "the pool never grew to its maximum under load";
  }  // the load stops
  EXPECT_TRUE(metrics_until([](const Exposition& m) { return m["proxy_workers_total"] == 2; },
                            within_bounds, kDeadline))
      << "the pool never shrank back to its minimum when idle";
}

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

TEST_P(TunedStage, AnswersAHitAndMetricsWhileFiftyRequestsAreStuckOnASilentOrigin) {
  start_stage({"--origin-timeout-ms", "60000", "--min-workers", "2"});
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
// a fixed pool of 2, twenty abandoned /stall requests do not delay the next GET.
TEST_P(TunedStage, AClientThatHangsUpFreesItsWorkerAtOnce) {
  start_stage({"--workers", "2", "--origin-timeout-ms", "60000"});
  {
    std::vector<proxy::Socket> abandoned;
    for (int i = 0; i < 20; ++i) {
      abandoned.push_back(send_request(proxy_port(), proxy_get(origin_url("/stall?" + std::to_string(i)))));
    }
    ASSERT_TRUE(origin_->wait_for_requests("/stall", 2, kDeadline));
  }  // every client hangs up
  proxy::Socket next = send_request(proxy_port(), proxy_get(origin_url("/bytes/10"), {"Connection: close"}));
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

TEST(Stage4Help, DocumentsEveryFlagWithItsUnit) {
  for (const std::string& stage : built_stages()) {
    if (stage != "stage4-tuned") continue;
    FILE* pipe = ::popen((harness::shell_command(binary_path(stage)) + " --help").c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string text;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) text.append(buf, n);
    EXPECT_EQ(::pclose(pipe), 0);
    for (const char* flag : {"--workers", "--min-workers", "--max-workers", "--auto-interval-ms",
                             "--queue", "--max-connections", "--idle-timeout-ms",
                             "--cache-shards", "--client-timeout-ms", "--connect-timeout-ms",
                             "--origin-timeout-ms"}) {
      EXPECT_THAT(text, HasSubstr(flag));
    }
    for (const char* unit : {"in ms", "(threads)", "(connections)", "bytes"}) {
      EXPECT_THAT(text, HasSubstr(unit));
    }
  }
}

std::vector<std::string> tuned_stages() {
  std::vector<std::string> found;
  for (const std::string& stage : built_stages()) {
    if (stage == "stage4-tuned") found.push_back(stage);
  }
  return found;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TunedStage);
INSTANTIATE_TEST_SUITE_P(Tuned, TunedStage, ::testing::ValuesIn(tuned_stages()), stage_name);

}  // namespace
}  // namespace testing_support
