// What this machine allows stage 4: how many workers its threads and memory can carry, how
// many connections its descriptor limit can, and how a worker thread is scheduled. Read (and
// set) once at start-up and once per worker thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace proxy {

/// The most workers `--workers auto` may start when --max-workers is not given: what this
/// machine allows, from the threads this user may start (RLIMIT_NPROC) and the system may hold
/// (/proc/sys/kernel/threads-max), a quarter of each, and the memory available (MemAvailable in
/// /proc/meminfo, half of it at 256 KiB a worker: its buffers and the stack it touches), the
/// smallest of these, clamped to 16..1024.
std::size_t default_max_workers();

/// How the open-file limit is shared out.
struct DescriptorBudget {
  std::uint64_t limit = 0;          ///< RLIMIT_NOFILE's soft limit, once raised (descriptors)
  std::size_t max_connections = 0;  ///< half of it: each client may bring an origin or tunnel end
  std::size_t origin_idle = 0;      ///< an eighth of it, for idle origin connections
};

/// Raises RLIMIT_NOFILE's soft limit to the hard one (as nginx's worker_rlimit_nofile does: the
/// usual soft limit of 1024 is far below a server's needs), then shares it out. nullopt when the
/// limit is unknown or unlimited. Changes the process's limit: call once, at start-up.
std::optional<DescriptorBudget> descriptor_budget();

/// The name every worker thread takes (top -H, ps -L, perf show it; the poller, the main thread,
/// keeps the program's name, which pgrep and killall match). 15 bytes at most (pthread_setname_np).
inline constexpr const char* kWorkerThreadName = "s4-worker";

/// Runs first on each worker thread (ElasticPool's on_start): names it kWorkerThreadName and,
/// when `batch`, moves it from the default policy (SCHED_OTHER) to SCHED_BATCH (sched(7);
/// stage4-tuned/README.md, step 11). A thread started under a policy of its own choosing
/// (chrt(1): SCHED_FIFO, SCHED_RR, SCHED_IDLE) keeps it; under chrt -R (SCHED_RESET_ON_FORK)
/// the kernel starts each new thread under SCHED_OTHER, so the workers take SCHED_BATCH. Never
/// throws: a failure to read or set the policy (EPERM under a seccomp or container policy) is
/// logged once per process and the thread keeps its policy. Returns the policy the thread runs
/// under afterwards (SCHED_OTHER, SCHED_BATCH, ...; SCHED_OTHER when it could not be read).
int prepare_worker_thread(bool batch) noexcept;

}  // namespace proxy
