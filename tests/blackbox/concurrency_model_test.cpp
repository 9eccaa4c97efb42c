// The concurrency model is real, and countable: while 50 slow requests are in flight, stage 3
// runs exactly its workers plus a fixed few threads, however many clients wait, while stage 2
// runs one thread per connection. Threads are counted from outside, in /proc/PID/task.
// Also: stage 2 answers 503 when it cannot start a thread, stage 3 answers 503 to the clients
// still queued when it stops, and stage 3's default pool overlaps slow origins on one CPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <sched.h>
#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "stage_fixture.h"
#include "../test_support.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define PROXY_TEST_SANITIZED 1
#endif
#if __has_feature(thread_sanitizer)
#define PROXY_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define PROXY_TEST_SANITIZED 1
#endif
#if defined(__SANITIZE_THREAD__)
#define PROXY_TEST_TSAN 1
#endif

namespace testing_support {
namespace {

using test_support::count_entries;
using test_support::eventually;
using test_support::fd_count;

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// Threads a stage runs besides its concurrency model: main (the accept loop) and the Shutdown
// watcher (signalfd). ThreadSanitizer starts one background thread of its own at the first
// pthread_create. Measured with `ls /proc/PID/task` on an idle stage1-sequential.
#if defined(PROXY_TEST_TSAN)
constexpr std::size_t kStageThreads = 3;
#else
constexpr std::size_t kStageThreads = 2;
#endif

/// Whether `stage` runs under an emulator (make cross-check: harness::emulator_for).
bool emulated(const std::string& stage) {
  return !harness::emulator_for(binary_path(stage)).empty();
}

/// kStageThreads, plus the thread qemu-user runs in every emulated process (its RCU thread;
/// `ls /proc/PID/task` on an idle stage under qemu-aarch64 shows three).
std::size_t other_threads(const std::string& stage) {
  return kStageThreads + (emulated(stage) ? 1 : 0);
}

constexpr int kClients = 50;
constexpr auto kDeadline = 60s;  // generous: a loaded 2-core machine under TSan

/// Waits up to kDeadline for the origin to have seen `count` requests on `path`, giving up as
/// soon as the stage has exited: a stage that died at its first client (a crash, or a lab's
/// unfinished TODO(student) stub) fails the test in a second instead of after kDeadline, which
/// is a minute of every such submission's grading (grader/README.md, "Minutes per submission").
bool origin_reached(harness::OriginServer& origin, harness::Process& stage,
                    std::string_view path, std::uint64_t count) {
  const auto end = std::chrono::steady_clock::now() + kDeadline;
  while (std::chrono::steady_clock::now() < end) {
    if (origin.wait_for_requests(path, count, 250ms)) return true;
    if (!stage.running()) return origin.wait_for_requests(path, count, 0ms);
  }
  return false;
}

// Slow enough that every client is still waiting while we count, fast enough to finish
// inside the 3 s shutdown grace.
std::string slow_path(int client) { return "/delay/2000/bytes/10?client=" + std::to_string(client); }

/// Threads of process `pid` right now.
std::size_t thread_count(pid_t pid) {
  return count_entries("/proc/" + std::to_string(pid) + "/task");
}

/// The value of `key=N` in a stats line, or -1.
long stat_value(const std::string& line, const std::string& key) {
  std::size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return -1;
  return std::stol(line.substr(at + key.size() + 2));
}

/// The stages in `wanted` that this tree builds (a lab starter may have fewer).
std::vector<std::string> built_among(std::initializer_list<std::string> wanted) {
  std::vector<std::string> found;
  for (const std::string& stage : built_stages()) {
    for (const std::string& name : wanted) {
      if (stage == name) found.push_back(stage);
    }
  }
  return found;
}

/// Stages with a fixed pool of workers and a --workers flag.
class PoolConcurrencyModel : public StageTest {
 protected:
  /// The stop scenario: one worker busy with a 2 s request, `waiting` more clients accepted
  /// behind it (in the queue, or held by an accept loop blocked on a full one), then SIGTERM.
  /// Returns each client's response, the busy one first, and the stage's exit status.
  std::vector<HttpResponse> stop_with_clients_waiting(int waiting, const std::string& queue,
                                                      harness::ExitStatus& status) {
    start_stage({"--workers", "1", "--queue", queue});
    const pid_t pid = stage_->pid();
    const std::size_t idle_fds = fd_count(pid);
    std::vector<proxy::Socket> clients;
    clients.push_back(send_request(proxy_port(), proxy_get(origin_url(slow_path(0)))));
    EXPECT_TRUE(origin_reached(*origin_, *stage_, "/delay/", 1));  // the worker is busy
    for (int i = 1; i <= waiting; ++i) {
      clients.push_back(send_request(proxy_port(), proxy_get(origin_url(slow_path(i)))));
    }
    // Wait until the stage holds every client (plus the worker's origin socket), so that the
    // waiting ones are inside it rather than in the kernel's backlog.
    EXPECT_TRUE(eventually([&] { return fd_count(pid) >= idle_fds + clients.size() + 1; },
                           kDeadline));
    status = stage_->stop(10s);
    std::vector<HttpResponse> responses;
    for (const proxy::Socket& client : clients) {
      std::optional<HttpResponse> r = read_response(client, kDeadline);
      if (r) responses.push_back(*r);
    }
    return responses;
  }
};
/// Stages with one thread per connection.
class PerThreadConcurrencyModel : public StageTest {};
/// Stage 3 as started with no pool flags.
class PoolDefaults : public StageTest {};

/// Pins the calling thread to one CPU it may run on, for its lifetime. A process spawned
/// meanwhile inherits that affinity (sched_setaffinity(2): a child inherits its parent's mask
/// across fork and execve), which is how a test runs a stage as if on a one-core machine.
class OnOneCpu {
 public:
  OnOneCpu() {
    if (::sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (::sched_setaffinity(0, sizeof one, &one) == 0) cpu_ = cpu;
        return;
      }
    }
  }
  ~OnOneCpu() {
    if (cpu_ >= 0) ::sched_setaffinity(0, sizeof saved_, &saved_);
  }
  OnOneCpu(const OnOneCpu&) = delete;
  OnOneCpu& operator=(const OnOneCpu&) = delete;
  /// The CPU, or -1 when the affinity could not be set.
  [[nodiscard]] int cpu() const { return cpu_; }

 private:
  cpu_set_t saved_{};
  int cpu_ = -1;
};

/// The `Cpus_allowed_list` of process `pid` (/proc/PID/status), e.g. "0" or "0-1".
std::string allowed_cpus(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      return line.substr(line.find_first_not_of(" \t", sizeof "Cpus_allowed_list:" - 1));
    }
  }
  return "";
}

TEST_P(PoolConcurrencyModel, RunsExactlyItsWorkersWhileFiftySlowRequestsWait) {
  constexpr std::size_t kWorkers = 4;
  start_stage({"--workers", std::to_string(kWorkers), "--queue", "64"});
  const pid_t pid = stage_->pid();
  std::vector<proxy::Socket> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(send_request(proxy_port(), proxy_get(origin_url(slow_path(i)))));
  }
  ASSERT_TRUE(origin_reached(*origin_, *stage_, "/delay/", kWorkers));
  EXPECT_EQ(thread_count(pid), kWorkers + other_threads(GetParam()))
      << "a pool runs its workers, main and the shutdown watcher: no thread per client";
  EXPECT_EQ(origin_->request_count("/delay/"), kWorkers)
      << "four workers, four transactions at a time; the other clients wait in the queue";
}

// The busy client gets its response (2 s is inside the grace period); the queued ones never
// reach a worker, and are told so with a 503 and a clean close.
TEST_P(PoolConcurrencyModel, AnswersClientsStillQueuedAtStopWith503) {
  constexpr int kQueued = 4;
  harness::ExitStatus status;
  std::vector<HttpResponse> responses = stop_with_clients_waiting(kQueued, "8", status);
  EXPECT_TRUE(status.clean()) << stage_log();
  std::vector<int> statuses;
  for (const HttpResponse& r : responses) {
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(r.field("X-Cache"), "MISS");
    statuses.push_back(r.status);
  }
  EXPECT_THAT(statuses, ::testing::ElementsAre(200, 503, 503, 503, 503));
  EXPECT_EQ(origin_->request_count("/delay/"), 1u);
  EXPECT_EQ(stat_value(status.output, "errors"), kQueued) << status.output;
}

// The queue (2) is full and the accept loop is blocked handing it a third client when the stop
// comes: the stop must end that wait, so the held client and the queued ones all get a 503
// instead of waiting for the grace period to cut them off.
TEST_P(PoolConcurrencyModel, AnswersQueuedClientsWith503WhenTheQueueIsFullAtStop) {
  harness::ExitStatus status;
  std::vector<HttpResponse> responses = stop_with_clients_waiting(3, "2", status);
  EXPECT_TRUE(status.clean()) << stage_log();
  std::vector<int> statuses;
  for (const HttpResponse& r : responses) statuses.push_back(r.status);
  EXPECT_THAT(statuses, ::testing::ElementsAre(200, 503, 503, 503));
  EXPECT_EQ(origin_->request_count("/delay/"), 1u);
}

TEST_P(PerThreadConcurrencyModel, RunsAThreadPerConnectionWhileFiftySlowRequestsWait) {
  start_stage();
  const pid_t pid = stage_->pid();
  EXPECT_EQ(thread_count(pid), other_threads(GetParam()))
      << "idle: no connection, no connection thread";

  std::vector<proxy::Socket> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(send_request(proxy_port(), proxy_get(origin_url(slow_path(i)))));
  }
  ASSERT_TRUE(origin_reached(*origin_, *stage_, "/delay/", kClients))
      << "all 50 must reach the origin at once: each has a thread of its own";
  EXPECT_GE(thread_count(pid), kClients + other_threads(GetParam()));

  for (const proxy::Socket& client : clients) {
    std::optional<HttpResponse> r = read_response(client, kDeadline);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
  }
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean()) << stage_log();
  EXPECT_GE(stat_value(status.output, "peak_threads"), kClients) << status.output;
}

TEST_P(PerThreadConcurrencyModel, AnswersWith503WhenNoThreadCanStartAndKeepsAccepting) {
#if defined(PROXY_TEST_SANITIZED)
  GTEST_SKIP() << "sanitizer runtimes reserve vast address space, so an address-space limit "
                  "would starve the runtime rather than the thread";
#else
  if (emulated(GetParam())) {
    // This test is then emulated too, and qemu-user drops the RLIMIT_AS of a guest's prlimit().
    GTEST_SKIP() << "under qemu-user an address-space limit set by the test never reaches the "
                    "stage (qemu drops RLIMIT_AS: it would bound the emulator's own memory)";
  }
  start_stage();
  const pid_t pid = stage_->pid();
  // An address-space limit just above what the idle stage maps leaves room for an accept and a
  // reply, but not for a new thread's stack (megabytes): pthread_create fails with EAGAIN.
  long vm_kib = -1;
  {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stol(line.substr(7));
    }
  }
  ASSERT_GT(vm_kib, 0);
  rlimit old_limit{};
  rlimit tight{static_cast<rlim_t>(vm_kib + 1024) * 1024, RLIM_INFINITY};
  ASSERT_EQ(::prlimit(pid, RLIMIT_AS, nullptr, &old_limit), 0);
  tight.rlim_max = old_limit.rlim_max;
  ASSERT_EQ(::prlimit(pid, RLIMIT_AS, &tight, nullptr), 0);

  HttpResponse refused = fetch(proxy_port(), origin_url("/bytes/10"));
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.field("X-Cache"), "MISS");
  EXPECT_EQ(refused.field("Retry-After"), "1");
  EXPECT_TRUE(refused.complete);
  EXPECT_EQ(origin_->request_count("/bytes/"), 0u);

  ASSERT_EQ(::prlimit(pid, RLIMIT_AS, &old_limit, nullptr), 0);
  HttpResponse served = fetch(proxy_port(), origin_url("/bytes/10"));
  EXPECT_EQ(served.status, 200) << "the accept loop must survive a failed thread start";
  EXPECT_THAT(stage_log(), HasSubstr("503 cannot start a thread"));
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean()) << stage_log();
  EXPECT_EQ(stat_value(status.output, "errors"), 1) << status.output;
#endif
}

// A one-core VM or grading container: with its defaults, stage 3 still overlaps slow origins
// (CS:APP Proxy Lab's concurrency test, three times over). Three clients wait on origins that
// never answer; a fourth is served meanwhile. With a pool of one worker per core it would wait
// behind them until the origin timeout.
TEST_P(PoolDefaults, ServesAClientWhileThreeWaitOnStalledOriginsOnOneCpu) {
  {
    OnOneCpu pinned;
    ASSERT_GE(pinned.cpu(), 0) << "cannot set this thread's CPU affinity";
    start_stage({"--origin-timeout-ms", "60000"});
    ASSERT_EQ(allowed_cpus(stage_->pid()), std::to_string(pinned.cpu()));
  }
  std::vector<proxy::Socket> stalled;
  for (int i = 0; i < 3; ++i) {
    stalled.push_back(
        send_request(proxy_port(), proxy_get(origin_url("/stall?client=" + std::to_string(i)))));
  }
  ASSERT_TRUE(origin_reached(*origin_, *stage_, "/stall", 3))
      << "three workers must each hold a stalled request";
  HttpResponse served = fetch(proxy_port(), origin_url("/bytes/10"), kDeadline);
  EXPECT_EQ(served.status, 200);
  for (const proxy::Socket& client : stalled) {
    pollfd p{client.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "a stalled request must still be in flight";
  }
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean()) << stage_log();
  EXPECT_GE(stat_value(status.output, "workers"), 4) << status.output;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PoolConcurrencyModel);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PoolDefaults);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PerThreadConcurrencyModel);
INSTANTIATE_TEST_SUITE_P(Concurrency, PoolConcurrencyModel,
                         ::testing::ValuesIn(built_among({"stage3-pool"})), stage_name);
INSTANTIATE_TEST_SUITE_P(Concurrency, PoolDefaults,
                         ::testing::ValuesIn(built_among({"stage3-pool"})), stage_name);
INSTANTIATE_TEST_SUITE_P(Concurrency, PerThreadConcurrencyModel,
                         ::testing::ValuesIn(built_among({"stage2-per-thread"})), stage_name);

}  // namespace
}  // namespace testing_support
