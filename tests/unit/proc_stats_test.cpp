// harness::read_proc_stats and ProcSampler, read from this very test process: threads started
// and memory touched here must show up in /proc the way the benchmarks rely on.
#include "proc_stats.h"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <latch>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

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
  // A first thread may bring helpers of its own (ThreadSanitizer starts a background thread
  // with the first pthread_create), so one is started and joined before counting.
  std::jthread([] {}).join();
  const long before = harness::read_proc_stats(::getpid()).threads;
  std::latch release(1);
  long during = 0;
  {
    std::jthread extra([&] { release.wait(); });
    during = harness::read_proc_stats(::getpid()).threads;
    release.count_down();
  }
  EXPECT_EQ(during, before + 1);
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
  const double before = harness::read_proc_stats(::getpid()).cpu_seconds;
  // Spin until the process has used 0.3 s of CPU by its own clock.
  const std::clock_t start = std::clock();
  volatile unsigned long sink = 0;
  while (std::clock() - start < CLOCKS_PER_SEC * 3 / 10) sink = sink + 1;
  EXPECT_GE(harness::read_proc_stats(::getpid()).cpu_seconds - before, 0.25);
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
