#include "evidence.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <vector>

namespace grader {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool is_frame(const std::string& line) {
  const std::size_t at = line.find_first_not_of(' ');
  return at != std::string::npos && line[at] == '#' && at + 1 < line.size() &&
         std::isdigit(static_cast<unsigned char>(line[at + 1]));
}

// "#5  0x55d in proxy::Queue<int>::pop (this=0x1) at /src/q.h:101" -> "proxy::Queue<int>::pop
// (/src/q.h:101)"; a system frame keeps only its function.
std::string short_frame(const std::string& line) {
  std::string rest = line.substr(line.find('#'));
  rest = rest.substr(rest.find_first_of(' ') == std::string::npos ? rest.size()
                                                                   : rest.find_first_of(' '));
  rest = rest.substr(std::min(rest.size(), rest.find_first_not_of(' ')));
  if (std::size_t in = rest.find(" in "); rest.rfind("0x", 0) == 0 && in != std::string::npos) {
    rest = rest.substr(in + 4);
  }
  std::string where;
  if (std::size_t at = rest.rfind(" at "); at != std::string::npos) where = rest.substr(at + 4);
  std::string function = rest.substr(0, rest.find(" ("));
  if (system_frame(line) || where.empty()) return function;
  return function + " (" + where + ")";
}

}  // namespace

bool system_frame(const std::string& frame_line) {
  for (const char* marker : {"/usr/include/", "/usr/lib/", "/lib/x86_64", "/lib/aarch64", "./nptl/",
                             "../sysdeps/", "libtsan", "libstdc++", "libc.so", "tsan_",
                             "sanitizer_common", "vg_replace", "/include/c++/", " std::",
                             "in std::", "__gthread", "clone3", "start_thread"}) {
    if (frame_line.find(marker) != std::string::npos) return true;
  }
  return false;
}

std::string student_frames(const std::string& report) {
  std::string out;
  bool folded = false;
  for (const std::string& line : split_lines(report)) {
    if (is_frame(line) && system_frame(line)) {
      if (!folded) out += "    ...\n";
      folded = true;
      continue;
    }
    folded = false;
    out += line + "\n";
  }
  return out;
}

std::string condense_gdb_stacks(const std::string& gdb_output) {
  std::vector<std::pair<std::string, std::string>> threads;  // (thread id, folded stack)
  for (const std::string& line : split_lines(gdb_output)) {
    if (line.rfind("Thread ", 0) == 0) {
      threads.push_back({line.substr(7, line.find(' ', 7) - 7), ""});
    } else if (!threads.empty() && is_frame(line)) {
      threads.back().second += "    " + short_frame(line) + "\n";
    }
  }
  if (threads.empty()) return gdb_output;
  std::map<std::string, std::vector<std::string>> by_stack;
  std::vector<std::string> order;
  for (const auto& [id, stack] : threads) {
    if (by_stack[stack].empty()) order.push_back(stack);
    by_stack[stack].push_back(id);
  }
  std::string out;
  for (const std::string& stack : order) {
    const std::vector<std::string>& ids = by_stack[stack];
    std::string list;
    for (const std::string& id : ids) list += (list.empty() ? "" : ", ") + id;
    out += (ids.size() == 1 ? "  thread " : "  threads ") + list +
           (ids.size() == 1 ? "" : " (" + std::to_string(ids.size()) + " with this stack)") +
           ":\n" + stack;
  }
  return out;
}

}  // namespace grader
