// What this machine allows stage 4: threads and memory for workers, descriptors for
// connections, and how a worker thread is scheduled (machine_limits.h).
#include "machine_limits.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>

#include "server/log.h"

namespace proxy {
namespace {

std::string policy_name(int policy) {
  switch (policy) {
    case SCHED_FIFO: return "SCHED_FIFO";
    case SCHED_RR: return "SCHED_RR";
    case SCHED_IDLE: return "SCHED_IDLE";
    default: return "policy " + std::to_string(policy);
  }
}

// A number from the first line of a /proc file, or `fallback`.
std::uint64_t read_proc_number(const char* path, const char* key, std::uint64_t fallback) {
  std::ifstream in(path);
  std::string word;
  while (in >> word) {
    if (key == nullptr || word == key) {
      std::uint64_t value = 0;
      if (key == nullptr) {
        try {
          return std::stoull(word);
        } catch (...) {
          return fallback;
        }
      }
      if (in >> value) return value;
      return fallback;
    }
  }
  return fallback;
}

}  // namespace

std::size_t default_max_workers() {
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t limit = kNone;
  rlimit nproc{};
  if (::getrlimit(RLIMIT_NPROC, &nproc) == 0 && nproc.rlim_cur != RLIM_INFINITY) {
    limit = std::min<std::uint64_t>(limit, nproc.rlim_cur / 4);
  }
  const std::uint64_t threads_max = read_proc_number("/proc/sys/kernel/threads-max", nullptr, kNone);
  if (threads_max != kNone) limit = std::min(limit, threads_max / 4);
  const std::uint64_t available_kib = read_proc_number("/proc/meminfo", "MemAvailable:", kNone);
  if (available_kib != kNone) limit = std::min(limit, available_kib / 2 / 256);
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(limit, 16, 1024));
}

std::optional<DescriptorBudget> descriptor_budget() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) return std::nullopt;
  if (files.rlim_cur < files.rlim_max) {
    rlimit raised = files;
    raised.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) files = raised;
  }
  if (files.rlim_cur == RLIM_INFINITY) return std::nullopt;
  DescriptorBudget budget;
  budget.limit = files.rlim_cur;
  budget.max_connections = std::max<std::size_t>(1, static_cast<std::size_t>(files.rlim_cur / 2));
  budget.origin_idle = std::max<std::size_t>(1, static_cast<std::size_t>(files.rlim_cur / 8));
  return budget;
}

// A worker sleeps until its origin answers; under the default policy (SCHED_OTHER) the thread
// woken may preempt the one running, so when hundreds of answers arrive together (every client
// waiting on one slow origin) each woken worker cuts into whatever runs: the poller in the
// middle of its batch of ready connections, the origin and the clients on the same machine in
// theirs. SCHED_BATCH keeps a worker's share of the CPU — its weight is its nice value's, as
// before — but it preempts no one on waking: it runs when the running thread's slice ends.
// A policy other than the default was chosen by whoever started the proxy (chrt), and a
// real-time one moved down to SCHED_BATCH would be a silent surprise: it stays.
int prepare_worker_thread(bool batch) noexcept {
  ::pthread_setname_np(::pthread_self(), kWorkerThreadName);
  int policy = SCHED_OTHER;
  sched_param param{};
  static std::once_flag failure_logged;  // shared: a failure is said once per process
  if (::pthread_getschedparam(::pthread_self(), &policy, &param) != 0) {
    // Unread, the policy may be one chosen with chrt: it stays, and the log says why the
    // workers are not under SCHED_BATCH (glibc's result here is not an errno).
    if (batch) {
      std::call_once(failure_logged, [] {
        log_line(
            "a worker's scheduling policy could not be read (pthread_getschedparam); "
            "workers keep the policy they inherited");
      });
    }
    return SCHED_OTHER;
  }
  policy &= ~SCHED_RESET_ON_FORK;  // a flag the kernel may report with the policy
  if (!batch || policy != SCHED_OTHER) {
    if (batch && policy != SCHED_BATCH) {
      static std::once_flag kept;
      std::call_once(kept, [policy] {
        log_line("workers keep the scheduling policy they inherited (" + policy_name(policy) +
                 "), not SCHED_BATCH");
      });
    }
    return policy;
  }
  sched_param batch_param{};  // SCHED_BATCH takes static priority 0
  const int error = ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &batch_param);
  if (error == 0) return SCHED_BATCH;
  std::call_once(failure_logged, [error] {
    log_line(std::string("SCHED_BATCH for a worker: ") + std::strerror(error) +
             "; workers keep the policy they inherited");
  });
  return policy;
}

}  // namespace proxy
