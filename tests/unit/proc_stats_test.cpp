// harness::read_proc_stats and ProcSampler, read from this very test process: threads started
// and memory touched here must show up in /proc the way the benchmarks rely on.
#include "proc_stats.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <latch>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

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
  constexpr std::size_t kBytes = std::size_t{96} << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // touched, so resident
  harness::ProcStats stats = harness::read_proc_stats(::getpid());
  EXPECT_GE(stats.peak_rss_kib - before, 90 * 1024) << "before " << before << " KiB";
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
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(gate[1]);
    char byte;
    [[maybe_unused]] auto got = ::read(gate[0], &byte, 1);  // until the parent closes
    ::_exit(0);
  }
  ::close(gate[0]);
  harness::ProcStats children = harness::read_proc_tree_stats(::getpid(), harness::ProcScope::descendants);
  harness::ProcStats self = harness::read_proc_tree_stats(::getpid(), harness::ProcScope::process);
  ::close(gate[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(children.threads, 1);  // the child: one thread
  EXPECT_GT(children.rss_kib, 0);
  EXPECT_GE(self.threads, 1);
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
