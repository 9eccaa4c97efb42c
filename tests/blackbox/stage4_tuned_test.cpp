// Stage 4's own behaviour, black-box through the real binary: load shedding, the header-read
// deadline, keep-alive (many requests on one connection, the idle timeout, a pipelined pair,
// the connection cap), /metrics as Prometheus text whose counters add up, and --workers auto
// staying within its bounds. What a slow origin or client may not take from everyone else, and
// the fast paths, are in stage4_paths_test.cpp; the fixture in tuned_stage.h. Every other
// black-box test runs against stage 4 too (StageTest).
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tuned_stage.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

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

// A hit answered on the poller with part of the next head behind it, in one write: the rest of
// that head is the poller's to wait for (step 1), with its own client timeout, not a worker's.
// Handed to the one worker, the part pinned it until the client timeout: a request only a
// worker serves (a POST) was answered after the 408, not before it.
TEST_P(TunedStage, APipelinedHeadCutShortBehindAHitHoldsNoWorker) {
  start_stage({"--workers", "1", "--client-timeout-ms", "6000"});
  HttpResponse stored = fetch(proxy_port(), origin_url("/bytes/300"));
  ASSERT_EQ(stored.status, 200);
  const std::string next = proxy_get(origin_url("/bytes/5"));
  proxy::Socket held =
      send_request(proxy_port(), proxy_get(origin_url("/bytes/300")) + next.substr(0, 20));
  std::vector<HttpResponse> hit = read_framed(held, 1, kDeadline);
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0].field("X-Cache"), "HIT");
  HttpResponse posted = exchange(
      proxy_port(),
      proxy_get(origin_url("/echo"), {"Content-Length: 3", "Connection: close"}, 1, "POST") + "abc");
  EXPECT_EQ(posted.status, 200);
  EXPECT_EQ(posted.body, "abc");
  pollfd answered{held.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&answered, 1, 0), 0)
      << "the held head was answered before the POST: the one worker waited for its rest";
  std::optional<HttpResponse> timed_out = read_response(held, kDeadline);
  ASSERT_TRUE(timed_out.has_value());
  EXPECT_EQ(timed_out->status, 408);
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
  // Asked with Connection: close, so a worker answers it (and counts itself busy).
  metrics_by_worker_ = true;
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

// The scheduling policy of each thread of process `pid` (field 41 of /proc/PID/task/TID/stat,
// proc(5)), by thread id; a thread that ended while being read is left out.
std::map<pid_t, int> thread_policies(pid_t pid) {
  std::map<pid_t, int> policies;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(tasks)) {
    std::ifstream file(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const std::size_t comm_end = stat.rfind(')');  // the name may hold spaces and parentheses
    if (comm_end == std::string::npos) continue;
    std::istringstream fields(stat.substr(comm_end + 2));  // from field 3, the state
    std::string field;
    for (int i = 3; i <= 41 && fields >> field; ++i) {
      if (i == 41) policies[std::stoi(entry.path().filename().string())] = std::stoi(field);
    }
  }
  return policies;
}

// The name of each thread of process `pid` (/proc/PID/task/TID/comm), by thread id.
std::map<pid_t, std::string> thread_names(pid_t pid) {
  std::map<pid_t, std::string> names;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(tasks)) {
    std::ifstream file(entry.path() / "comm");
    std::string name;
    if (std::getline(file, name)) names[std::stoi(entry.path().filename().string())] = name;
  }
  return names;
}

// The name the kernel gives process `stage` when the fixture starts it: its program file's
// name (the emulator's under make cross-check), cut to 15 bytes (proc(5), /proc/PID/comm).
std::string process_name(const std::string& stage) {
  const std::vector<std::string> emulator = harness::emulator_for(binary_path(stage));
  const std::string program = emulator.empty() ? stage : emulator.front();
  return std::filesystem::path(program).filename().string().substr(0, 15);
}

TEST_P(TunedStage, RunsItsWorkersUnderSchedBatchAndThePollerUnderTheDefaultPolicy) {
  // The stage inherits this process's policy; one chosen with chrt(1) it keeps, by design.
  if ((::sched_getscheduler(0) & ~SCHED_RESET_ON_FORK) != SCHED_OTHER) {
    GTEST_SKIP() << "these tests run under chrt: the stage keeps that policy";
  }
  auto batch_threads = [](const std::map<pid_t, int>& policies) {
    return std::count_if(policies.begin(), policies.end(),
                         [&](const auto& entry) { return entry.second == SCHED_BATCH; });
  };
  auto relay_named = [](const std::map<pid_t, std::string>& names) {
    return std::count_if(names.begin(), names.end(),
                         [](const auto& entry) { return entry.second == "s4-tunnels"; }) == 1;
  };
  start_stage({"--workers", "3"});
  const pid_t pid = stage_->pid();
  // The relay names its own thread when it first runs, which may come after the workers'.
  EXPECT_TRUE(wait_until(
      [&] { return batch_threads(thread_policies(pid)) == 3 && relay_named(thread_names(pid)); },
      kDeadline))
      << "not every worker runs under SCHED_BATCH, or the tunnel relay's thread is unnamed";
  std::map<pid_t, int> policies = thread_policies(pid);
  ASSERT_TRUE(policies.count(pid));
  EXPECT_EQ(policies[pid], SCHED_OTHER) << "the poller (the main thread) keeps the default policy";
  // Named for top -H and ps -L: the workers are the SCHED_BATCH threads, and no other thread
  // (the poller least of all: pgrep and killall match its name) takes their name.
  const std::map<pid_t, std::string> names = thread_names(pid);
  ASSERT_TRUE(names.count(pid));
  EXPECT_EQ(names.at(pid), process_name(GetParam()))
      << "the poller took a name of its own: pgrep -x and killall match the program's";
  for (const auto& [tid, policy] : policies) {
    if (!names.count(tid)) continue;  // ended between the two reads
    EXPECT_EQ(names.at(tid) == "s4-worker", policy == SCHED_BATCH)
        << "thread " << tid << " is named " << names.at(tid) << " under policy " << policy;
  }
  EXPECT_TRUE(relay_named(names)) << "the tunnel relay's thread";
  EXPECT_EQ(fetch(proxy_port(), origin_url("/bytes/10"), kDeadline).status, 200);
  stage_.reset();

  start_stage({"--workers", "3", "--no-batch-workers"});
  ASSERT_EQ(fetch(proxy_port(), origin_url("/bytes/11"), kDeadline).status, 200);  // a worker ran
  policies = thread_policies(stage_->pid());
  EXPECT_EQ(batch_threads(policies), 0) << "--no-batch-workers left a thread under SCHED_BATCH";
  EXPECT_GE(policies.size(), 4u) << "the poller and three workers";
}

TEST(Stage4Help, DocumentsEveryFlagWithItsUnit) {
  for (const std::string& stage : built_stages()) {
    if (stage != "stage4-tuned") continue;
    const harness::CommandOutput help = help_output(stage);
    ASSERT_TRUE(help.started);
    EXPECT_EQ(help.status, 0);
    const std::string& text = help.text;
    for (const char* flag : {"--workers", "--min-workers", "--max-workers", "--auto-interval-ms",
                             "--queue", "--max-connections", "--idle-timeout-ms",
                             "--cache-shards", "--client-timeout-ms", "--connect-timeout-ms",
                             "--origin-timeout-ms", "--no-batch-workers",
                             "--no-poller-misses"}) {
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
