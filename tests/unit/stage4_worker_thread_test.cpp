// prepare_worker_thread (stage4-tuned/machine_limits.h): what each of stage 4's worker threads
// does first — takes its name, and SCHED_BATCH unless it was started under a policy of its own.
// Each case runs on a thread of its own, since it changes the calling thread's policy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <fstream>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "launcher.h"
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
// That it is logged, once per process, is WorkerThreadLog's below: in a process of its own, as
// a repeated run (--gtest_repeat) or an earlier test would already have said it here.
TEST(WorkerThread, KeepsAPolicyItWasStartedUnder) {
  if (!runs_under_default_policy()) GTEST_SKIP() << "this test runs under chrt";
  const Seen seen = on_new_thread(true, SCHED_IDLE);
  const Seen again = on_new_thread(true, SCHED_IDLE);
  ASSERT_NE(seen.returned, -1) << "the thread could not take SCHED_IDLE to begin with";
  EXPECT_EQ(seen.returned, SCHED_IDLE);
  EXPECT_EQ(seen.policy, SCHED_IDLE) << "moved from the policy it was started under";
  EXPECT_EQ(seen.name, kWorkerThreadName);
  EXPECT_EQ(again.policy, SCHED_IDLE);
}

// The log lines prepare_worker_thread says once per process, seen on a death-test child's stderr:
// its statics start fresh there. Natively the child is a new run of this program ("threadsafe");
// under qemu-user, which cannot exec a target program, a fork ("fast"), which is fresh as long
// as nothing before the EXPECT_EXIT called prepare_worker_thread in this process (ctest runs each
// test in a process of its own).
class WorkerThreadLog : public ::testing::Test {
 protected:
  void SetUp() override {
    const bool emulated = !harness::emulator_for("/proc/self/exe").empty();
    GTEST_FLAG_SET(death_test_style, emulated ? "fast" : "threadsafe");
  }
};

// Matches a text that holds `part` exactly once.
::testing::Matcher<const std::string&> holds_once(const std::string& part) {
  return ::testing::Truly([part](const std::string& text) {
    const std::size_t first = text.find(part);
    return first != std::string::npos && text.find(part, first + 1) == std::string::npos;
  });
}

// In a death-test child: prepare_worker_thread(batch) on three new threads in turn, each first
// moved to `start_policy`; exits 0 when each returned `expected` and took its name, else 1.
[[noreturn]] void prepare_three_and_exit(bool batch, int start_policy, int expected) {
  bool as_expected = true;
  for (int i = 0; i < 3; ++i) {
    const Seen seen = on_new_thread(batch, start_policy);
    as_expected = as_expected && seen.returned == expected && seen.name == kWorkerThreadName;
  }
  ::_exit(as_expected ? 0 : 1);
}

// Makes each syscall in `numbers` fail with EPERM on the calling thread and the threads it starts
// afterwards, as a container's seccomp policy may (seccomp(2), SECCOMP_RET_ERRNO). The filter
// reads only the number: it is for this program's own native calls. False when refused.
bool refuse_syscalls(std::initializer_list<long> numbers) {
  std::vector<sock_filter> filter{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr))};
  for (const long number : numbers) {
    filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<__u32>(number), 0, 1));
    filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
  }
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  const sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// Whether this process may install a seccomp filter (qemu-user refuses: it needs every syscall).
bool seccomp_available() {
  return ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
}

// chrt --idle: every worker keeps it, and the log says so once, not once per worker.
TEST_F(WorkerThreadLog, SaysOnceThatWorkersKeepThePolicyTheyWereStartedUnder) {
  if (!runs_under_default_policy()) GTEST_SKIP() << "this test runs under chrt";
  EXPECT_EXIT(prepare_three_and_exit(true, SCHED_IDLE, SCHED_IDLE), ::testing::ExitedWithCode(0),
              holds_once("workers keep the scheduling policy they inherited (SCHED_IDLE)"));
}

// chrt --batch: the workers are where they would have been moved; nothing to say.
TEST_F(WorkerThreadLog, SaysNothingWhenStartedUnderSchedBatch) {
  if (!runs_under_default_policy()) GTEST_SKIP() << "this test runs under chrt";
  EXPECT_EXIT(prepare_three_and_exit(true, SCHED_BATCH, SCHED_BATCH), ::testing::ExitedWithCode(0),
              ::testing::Not(::testing::HasSubstr("policy")));
}

TEST_F(WorkerThreadLog, SaysOnceWhenSchedBatchIsRefused) {
  if (!runs_under_default_policy()) GTEST_SKIP() << "this test runs under chrt";
  if (!seccomp_available()) GTEST_SKIP() << "no seccomp here (qemu-user refuses filters)";
  EXPECT_EXIT(
      {
        if (!refuse_syscalls({SYS_sched_setscheduler})) ::_exit(2);
        prepare_three_and_exit(true, SCHED_OTHER, SCHED_OTHER);
      },
      ::testing::ExitedWithCode(0),
      holds_once("SCHED_BATCH for a worker: Operation not permitted; workers keep the policy"));
}

// No runs_under_default_policy() here: it would read the main thread's policy, which glibc then
// keeps and hands to each thread it starts, so theirs would be read without a syscall to refuse.
TEST_F(WorkerThreadLog, SaysOnceWhenItsPolicyCannotBeRead) {
  if (!seccomp_available()) GTEST_SKIP() << "no seccomp here (qemu-user refuses filters)";
  EXPECT_EXIT(
      {
        if (!refuse_syscalls({SYS_sched_getscheduler, SYS_sched_getparam})) ::_exit(2);
        prepare_three_and_exit(true, SCHED_OTHER, SCHED_OTHER);
      },
      ::testing::ExitedWithCode(0),
      holds_once("scheduling policy could not be read (pthread_getschedparam); workers keep"));
}

}  // namespace
}  // namespace proxy
