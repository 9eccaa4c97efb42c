// Small helpers every part of the grader uses: files and trees, shell commands, text.
#pragma once

#include <cstddef>
#include <filesystem>
#include <set>
#include <string>

namespace grader {

/// `s` quoted for /bin/sh (single quotes, embedded ones escaped).
std::string shell_quote(const std::string& s);

/// The whole file at `path`, or "" when it cannot be read.
std::string slurp(const std::string& path);

/// Runs `command` under /bin/sh and returns its stdout and stderr together, keeping at most
/// `limit` bytes. Blocks until the command ends: give it a `timeout` prefix when it may hang.
std::string run_capture(const std::string& command, std::size_t limit = 200'000);

/// "42s" or "3m07s".
std::string format_duration(double seconds);

/// The last `max` bytes of `text`, after "...\n" when it was cut.
std::string tail(const std::string& text, std::size_t max);

/// `s` with every character but letters, digits, '-' and '_' replaced by '_' (a file name).
std::string safe_name(std::string s);

/// The items of a comma list ("a,b,,c" -> a, b, c).
std::set<std::string> parse_list(const std::string& list);

/// The numbers of a comma list ("1,3" -> 1, 3).
std::set<int> parse_stage_numbers(const std::string& list);

/// Makes `to` a copy of the source tree `from`, leaving out build products and version control.
void copy_tree(const std::filesystem::path& from, const std::filesystem::path& to);

/// Copies `from` (a file or a tree) over `to`, replacing what is there.
void overlay(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace grader
