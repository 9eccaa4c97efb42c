// What this machine allows stage 4: threads and memory for workers, descriptors for
// connections (machine_limits.h).
#include "machine_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>

namespace proxy {
namespace {

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

}  // namespace proxy
