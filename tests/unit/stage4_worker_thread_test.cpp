// prepare_worker_thread (stage4-tuned/machine_limits.h): what each of stage 4's worker threads
// does first — takes its name, and SCHED_BATCH unless it was started under a policy of its own.
// Each case runs on a thread of its own, since it changes the calling thread's policy.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "machine_limits.h"

namespace proxy {
namespace {

struct Seen {
  int returned = -1;  // what prepare_worker_thread said
  int policy = -1;    // what the kernel says afterwards
  std::string name;   // /proc/self/task/TID/comm afterwards
};

// Runs prepare_worker_thread(batch) on a new thread, first moved to `start_policy` (as chrt(1)
// would have started it), and reports what the thread then runs under.
Seen on_new_thread(bool batch, int start_policy) {
  Seen seen;
  std::thread([&] {
    if (start_policy != SCHED_OTHER) {
      sched_param zero{};
      if (::pthread_setschedparam(::pthread_self(), start_policy, &zero) != 0) return;
    }
    seen.returned = prepare_worker_thread(batch);
    sched_param param{};
    ::pthread_getschedparam(::pthread_self(), &seen.policy, &param);
    seen.policy &= ~SCHED_RESET_ON_FORK;
    std::ifstream comm("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
    std::getline(comm, seen.name);
  }).join();
  return seen;
}

// The cases below start from the default policy; a test run under chrt(1) cannot.
bool runs_under_default_policy() {
  int policy = -1;
  sched_param param{};
  ::pthread_getschedparam(::pthread_self(), &policy, &param);
  return (policy & ~SCHED_RESET_ON_FORK) == SCHED_OTHER;
}

TEST(WorkerThread, LeavesTheDefaultPolicyForSchedBatchOnlyWhenAskedAndIsNamedEitherWay) {
  if (!runs_under_default_policy()) GTEST_SKIP() << "this test runs under chrt";
  for (const bool batch : {true, false}) {
    const Seen seen = on_new_thread(batch, SCHED_OTHER);
    const int expected = batch ? SCHED_BATCH : SCHED_OTHER;
    EXPECT_EQ(seen.returned, expected) << "batch " << batch;
    EXPECT_EQ(seen.policy, expected) << "batch " << batch;
    EXPECT_EQ(seen.name, kWorkerThreadName) << "batch " << batch;
  }
}

// chrt --idle: a policy whoever started the proxy chose (SCHED_IDLE needs no privilege, unlike
// SCHED_FIFO, so a test can choose it; the rule is the same for all three).
// The first such thread in a process logs it, once: this is the only test here that starts one.
TEST(WorkerThread, KeepsAPolicyItWasStartedUnderAndSaysSo) {
  if (!runs_under_default_policy()) GTEST_SKIP() << "this test runs under chrt";
  ::testing::internal::CaptureStderr();
  const Seen seen = on_new_thread(true, SCHED_IDLE);
  const Seen again = on_new_thread(true, SCHED_IDLE);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(seen.returned, -1) << "the thread could not take SCHED_IDLE to begin with";
  EXPECT_EQ(seen.returned, SCHED_IDLE);
  EXPECT_EQ(seen.policy, SCHED_IDLE) << "moved from the policy it was started under";
  EXPECT_EQ(seen.name, kWorkerThreadName);
  EXPECT_EQ(again.policy, SCHED_IDLE);
  const std::string line = "workers keep the scheduling policy they inherited (SCHED_IDLE)";
  EXPECT_NE(log.find(line), std::string::npos) << log;
  EXPECT_EQ(log.find(line), log.rfind(line)) << "logged more than once: " << log;
}

}  // namespace
}  // namespace proxy
