// Evidence made short: the parts of a ThreadSanitizer report, a gdb backtrace or a Valgrind log
// that a student acts on, so that report.md stays a screenful per failed check. The full logs
// stay beside it (the check names their paths).
#pragma once

#include <string>

namespace grader {

/// A frame of the standard library, the C library or a sanitizer runtime: not the student's.
bool system_frame(const std::string& frame_line);

/// One TSan report with each stack cut to the student's own frames (system frames between them
/// fold into "..."); the report's other lines (which access, which thread, the mutexes) stay.
std::string student_frames(const std::string& tsan_report);

/// gdb's "thread apply all bt" folded: each frame as "function (file:line)" without arguments,
/// system frames only by name, and threads with the same stack grouped ("threads 2, 3, 4: ...").
std::string condense_gdb_stacks(const std::string& gdb_output);

}  // namespace grader
