// run_command: run a shell command and read all it prints, for the grader (a debugger's
// stacks, patch, --help, --gtest_list_tests) and the benchmarks (gnuplot).
#pragma once

#include <cstddef>
#include <limits>
#include <string>

namespace harness {

/// What a finished shell command printed on stdout, and how it ended.
struct CommandOutput {
  bool started = false;  ///< false when popen(3) could not start /bin/sh (then text is "")
  std::string text;      ///< its stdout, cut once `limit` bytes were kept
  int status = -1;       ///< pclose(3)'s wait status (WIFEXITED, WEXITSTATUS); -1 if unknown
};

/// Runs `command` under /bin/sh (popen) and reads its stdout to the end, keeping at most about
/// `limit` bytes (whole 4 KiB reads while under it; the rest is read and dropped, so the
/// command never blocks on a full pipe). Redirect stderr in `command` itself ("2>&1",
/// "2>/dev/null"). Blocks until the command ends: give it a `timeout` prefix when it may hang.
/// Thread-safe (each call its own pipe and child).
CommandOutput run_command(const std::string& command,
                          std::size_t limit = std::numeric_limits<std::size_t>::max());

}  // namespace harness
