// harness::read_proc_stats and ProcSampler, read from this very test process and its children:
// threads started, memory touched and CPU used must show up in /proc as the benchmarks rely on.
#include "proc_stats.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <cstring>
#include <fstream>
#include <string>
#include <latch>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "net/socket.h"

extern char** environ;

namespace {

using namespace std::chrono_literals;

TEST(ProcStats, ReadsThisProcess) {
  harness::ProcStats stats = harness::read_proc_stats(::getpid());
  EXPECT_GT(stats.rss_kib, 0);
  EXPECT_GE(stats.vsz_kib, stats.rss_kib);
  EXPECT_GE(stats.peak_rss_kib, stats.rss_kib);
  EXPECT_GE(stats.peak_vsz_kib, stats.vsz_kib);
  EXPECT_GE(stats.threads, 1);
  EXPECT_GE(stats.cpu_seconds, 0.0);
}

TEST(ProcStats, SeesANewThread) {
  // Counted while it lives, gone once joined. Compared with the count while it lives, not with
  // one taken before it started: a thread joined earlier (ThreadSanitizer's helper, or any) can
  // still be counted for a moment, because join returns when the kernel clears its tid, before
  // the thread leaves its group (much later under qemu-user, docs/raspberry-pi.md).
  std::latch release(1);
  long during = 0;
  {
    std::jthread extra([&] { release.wait(); });
    during = harness::read_proc_stats(::getpid()).threads;
    release.count_down();
  }
  EXPECT_GE(during, 2) << "this thread and the extra one";
  long after = during;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (after >= during && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    after = harness::read_proc_stats(::getpid()).threads;
  }
  EXPECT_LT(after, during) << "the joined thread still counted after 10 s";
  EXPECT_GE(after, 1);
}

TEST(ProcStats, PeakResidentSetGrowsWithTouchedMemory) {
  const long before = harness::read_proc_stats(::getpid()).peak_rss_kib;
  constexpr std::size_t kBytes = std::size_t{48} << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // touched, so resident
  harness::ProcStats stats = harness::read_proc_stats(::getpid());
  EXPECT_GE(stats.peak_rss_kib - before, 44 * 1024) << "before " << before << " KiB";
  EXPECT_GE(stats.peak_vsz_kib, stats.peak_rss_kib);
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(ProcStats, CountsCpuTime) {
  // A child spins until it has used 0.3 s of CPU by its own clock, says so and waits to be
  // killed; /proc/PID/stat read from here must agree. Read from another process, as the
  // benchmarks read a stage: qemu-user (make cross-check) answers an emulated program's reads of
  // its own /proc/self/stat with zeros for utime and stime.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  proxy::Socket spun(fds[0]);
  proxy::Socket tell(fds[1]);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::clock_t start = std::clock();
    volatile unsigned long sink = 0;
    while (std::clock() - start < CLOCKS_PER_SEC * 3 / 10) sink = sink + 1;
    const char done = 'x';
    if (::write(tell.fd(), &done, 1) != 1) ::_exit(1);
    for (;;) ::pause();
  }
  tell = proxy::Socket();
  pollfd ready{spun.fd(), POLLIN, 0};
  // Generous: 0.3 s of CPU may take many seconds of wall time on a loaded machine.
  const int polled = ::poll(&ready, 1, 60'000);
  double cpu_seconds = -1;
  if (polled == 1) cpu_seconds = harness::read_proc_stats(child).cpu_seconds;
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(polled, 1) << "the child did not finish spinning within 60 s";
  EXPECT_GE(cpu_seconds, 0.25);
}

TEST(ProcStats, AProcessThatIsGoneIsAnError) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_THROW(harness::read_proc_stats(child), std::runtime_error);
}

TEST(ProcStats, DescendantsCoverChildrenButNotTheProcess) {
  // `cat` reading a pipe we hold open: a single-threaded child that lives until we close it
  // (spawned, not forked, so no sanitizer thread of ours comes along).
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, gate[0], STDIN_FILENO);
  ::posix_spawn_file_actions_addclose(&actions, gate[1]);
  char cat[] = "cat";
  char* argv[] = {cat, nullptr};
  pid_t child = -1;
  const int spawned = ::posix_spawnp(&child, "cat", &actions, nullptr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(gate[0]);
  ASSERT_EQ(spawned, 0);
  // Wait until the child runs cat (not a copy of us between fork and exec).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string comm;
  while (comm != "cat\n" && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in("/proc/" + std::to_string(child) + "/comm");
    std::getline(in, comm);
    comm += "\n";
    if (comm != "cat\n") std::this_thread::yield();
  }
  harness::ProcStats children = harness::read_proc_tree_stats(::getpid(), harness::ProcScope::descendants);
  ::close(gate[1]);  // cat sees end of file and exits
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(comm, "cat\n");
  EXPECT_EQ(children.threads, 1);
  EXPECT_GT(children.rss_kib, 0);
  EXPECT_EQ(harness::read_proc_tree_stats(::getpid(), harness::ProcScope::descendants).threads, 0);
}

TEST(ProcSampler, KeepsThePeakThreadCountAfterThreadsEnd) {
  const long before = harness::read_proc_stats(::getpid()).threads;
  harness::ProcSampler sampler(::getpid(), 5ms);  // adds its own thread
  {
    std::latch release(1);
    std::vector<std::jthread> extra;
    for (int i = 0; i < 4; ++i) extra.emplace_back([&] { release.wait(); });
    EXPECT_TRUE(sampler.wait_for_peak_threads(before + 5, 10s));
    release.count_down();
  }
  sampler.stop();
  EXPECT_GE(sampler.peak().threads, before + 5);
  EXPECT_LT(harness::read_proc_stats(::getpid()).threads, before + 5);
}

}  // namespace
