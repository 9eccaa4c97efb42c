// Evidence made short: the parts of a ThreadSanitizer report, a gdb backtrace or a Valgrind log
// that a student acts on, so that report.md stays a screenful per failed check. The full logs
// stay beside it (the check names their paths).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace grader {

/// A frame that is not the student's: its function is outside namespace proxy, a stage's
/// anonymous namespace and main (the standard library, libc, a sanitizer runtime).
bool system_frame(const std::string& frame_line);

/// The sanitizer's crash report in a stage's stderr ("ERROR: ThreadSanitizer: SEGV ..." up to
/// its SUMMARY line) cut to the student's frames, or "" when there is none.
std::string crash_report(const std::string& log);

/// One TSan report with each stack cut to the student's own frames (system frames between them
/// fold into "..."); the report's other lines (which access, which thread, the mutexes) stay.
std::string student_frames(const std::string& tsan_report);

/// gdb's "thread apply all bt" folded: each frame as "function (file:line)" without arguments,
/// system frames only by name, and threads with the same stack grouped ("threads 2, 3, 4: ...").
std::string condense_gdb_stacks(const std::string& gdb_output);

/// A test of a lab's test group that did not pass.
struct FailedTest {
  std::string name;    ///< gtest's full name
  std::string why;     ///< e.g. "FAILED", "KILLED after 180 s (a hang?)"
  std::string log;     ///< path of its whole output, which stays beside the report
  std::string output;  ///< that output
};

/// What a failed test printed between its "[ RUN      ]" line and its "[  FAILED  ]" verdict —
/// its assertions and messages, without gtest's banners — at most `max_lines` lines (the first
/// ones). When it never reached a verdict (a crash, a kill) the last `max_lines` lines after
/// "[ RUN      ]"; with no "[ RUN      ]" at all, the output's last lines.
std::string gtest_failure(const std::string& output, std::size_t max_lines = 30);

/// The failed tests of one group cut to a screenful: each distinct failure in full
/// (gtest_failure), at most `max_shown` of them; a test that failed the same way as one shown
/// (the same hang or crash verdict, or else the same text, numbers left out: a hung pool fails
/// thirty tests alike) as one line naming it; past `max_shown`, one line per test with its
/// first message. The folder of the full logs is named once when they share one, else each
/// test's log.
std::string condense_failures(const std::vector<FailedTest>& failed, std::size_t max_shown = 4);

}  // namespace grader
