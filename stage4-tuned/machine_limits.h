// What this machine allows stage 4: how many workers its threads and memory can carry, and how
// many connections its descriptor limit can. Read once at start-up.
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

}  // namespace proxy
