// Small helpers every test binary shares (unit, black-box, e2e): reading a file whole, waiting for
// a condition only the kernel can report, counting another process's descriptors.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace test_support {

/// The whole file's bytes, binary; "" when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

/// Entries in a directory (e.g. /proc/PID/fd, /proc/PID/task) right now.
inline std::size_t count_entries(const std::filesystem::path& directory) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory)) ++n;
  return n;
}

/// Open file descriptors of process `pid` right now (entries in /proc/PID/fd).
inline std::size_t fd_count(pid_t pid) {
  return count_entries("/proc/" + std::to_string(pid) + "/fd");
}

/// Waits until `condition` holds, checking every `poll`, for at most `deadline`; true once it
/// holds. For state no line or socket announces (another process's descriptors, a pool's
/// threads); the deadline is generous so that a hang fails instead of freezing the run.
inline bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds deadline,
                       std::chrono::milliseconds poll = std::chrono::milliseconds{10}) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace test_support
