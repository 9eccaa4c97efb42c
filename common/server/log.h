// One-line diagnostics on stderr, safe to call from any thread.
#pragma once

#include <string_view>

namespace proxy {

/// Writes `line` plus a newline to stderr with a single write(2), so lines from concurrent
/// threads never interleave. Thread-safe; never throws; output errors are ignored.
void log_line(std::string_view line) noexcept;

/// Sets the program name prefixed to every log line ("stage1-sequential: ..."). Call once at
/// start-up, before other threads run.
void set_log_prefix(std::string_view prefix);

}  // namespace proxy
