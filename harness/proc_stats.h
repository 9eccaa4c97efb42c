// What a server process costs, read from Linux's /proc/PID/status and /proc/PID/stat
// (proc(5)): memory, threads and CPU time. The sweep and the bench sample a proxy with it while
// wrk drives it, to compare the memory of the concurrency models (the audioserve study found
// a pool used about half the memory of a thread per task).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace harness {

/// One reading of a process. Memory in KiB, as the kernel reports it.
struct ProcStats {
  long rss_kib = 0;        ///< resident set now (VmRSS)
  long vsz_kib = 0;        ///< virtual size now (VmSize)
  long peak_rss_kib = 0;   ///< highest resident set since start (VmHWM)
  long peak_vsz_kib = 0;   ///< highest virtual size since start (VmPeak)
  long threads = 0;        ///< threads now (Threads)
  double cpu_seconds = 0;  ///< user + system CPU time since start, seconds (stat utime+stime)
};

/// Reads /proc/PID/status and /proc/PID/stat. Throws std::runtime_error when the process does
/// not exist (or is a zombie whose memory is gone) or the files cannot be parsed.
/// Thread-safe.
ProcStats read_proc_stats(pid_t pid);

/// Which processes a reading covers.
enum class ProcScope {
  process,      ///< the process alone (a stage)
  descendants,  ///< its children, their children and so on, without the process itself: the
                ///< daemons a launcher script started (squid, nginx's master and workers)
};

/// Sums read_proc_stats over the processes `scope` names under `root` (found through the
/// parent ids in /proc/*/stat). Peaks are the sum of each process's own peak, so an upper
/// bound of the simultaneous peak. Processes that vanish while being read are skipped. Throws
/// std::runtime_error when `root` itself does not exist. Thread-safe.
ProcStats read_proc_tree_stats(pid_t root, ProcScope scope);

/// Samples a process every `interval` on a thread of its own while a load runs, keeping the
/// highest thread count seen (the kernel keeps peak memory itself, but not peak threads) and
/// the last reading. Stops at destruction or stop(); a process that has exited ends sampling
/// and keeps the last reading.
/// Thread-safety: all members may be called from any thread.
class ProcSampler {
 public:
  /// Takes a first reading at once (throws like read_proc_stats if the process is gone), then
  /// samples every `interval`.
  explicit ProcSampler(pid_t pid,
                       std::chrono::milliseconds interval = std::chrono::milliseconds(100),
                       ProcScope scope = ProcScope::process);
  ~ProcSampler();
  ProcSampler(const ProcSampler&) = delete;
  ProcSampler& operator=(const ProcSampler&) = delete;

  /// Takes a last reading if the process still runs and stops sampling. Idempotent.
  void stop();
  /// The last reading, with `threads` replaced by the highest count seen.
  [[nodiscard]] ProcStats peak() const;
  /// Waits until a sample has seen at least `threads` threads, at most `timeout`; true when
  /// one has.
  bool wait_for_peak_threads(long threads, std::chrono::milliseconds timeout) const;

 private:
  void sample_once();

  pid_t pid_;
  std::chrono::milliseconds interval_;
  ProcScope scope_;

  mutable std::mutex mutex_;  // guards last_, peak_threads_, stopping_
  mutable std::condition_variable wake_;  // stop() and every sample notify it
  ProcStats last_;
  long peak_threads_ = 0;
  bool stopping_ = false;

  std::jthread thread_;  // last: joins before the fields it uses go away
};

}  // namespace harness
