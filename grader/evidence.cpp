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
  // The function a frame names: after "#N ", and after gdb's "0xADDR in ".
  std::string rest = frame_line.substr(std::min(frame_line.size(), frame_line.find('#')));
  rest = rest.substr(std::min(rest.size(), rest.find(' ')));
  rest = rest.substr(std::min(rest.size(), rest.find_first_not_of(' ')));
  if (std::size_t in = rest.find(" in "); rest.rfind("0x", 0) == 0 && in != std::string::npos) {
    rest = rest.substr(in + 4);
  }
  // The student's code lives in namespace proxy, in a stage's anonymous namespace, or is main;
  // everything else (std:: wrappers, libc, the sanitizer runtime) is folded away.
  for (const char* own : {"proxy::", "(anonymous namespace)::", "main", "run_pool"}) {
    if (rest.rfind(own, 0) == 0) return false;
  }
  return true;
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

std::string crash_report(const std::string& log) {
  std::size_t at = log.find("ERROR: ThreadSanitizer: ");
  if (at == std::string::npos) at = log.find("ERROR: AddressSanitizer: ");
  if (at == std::string::npos) return "";
  std::size_t end = log.find("SUMMARY:", at);
  end = end == std::string::npos ? log.size() : std::min(log.size(), log.find('\n', end));
  return student_frames(log.substr(at, end - at)) + "\n";
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

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// `text` with every run of digits as "#": two tests that failed alike differ in byte counts,
/// milliseconds and line numbers of one source.
std::string without_numbers(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += text[i];
    }
  }
  return out;
}

/// The line of a failure that says most: a hang's or a crash's verdict, else the first line
/// that is not a "file:line: Failure" header.
std::string first_message(const std::string& failure) {
  const std::vector<std::string> lines = split_lines(failure);
  for (const std::string& line : lines) {
    if (starts_with(line, "HUNG:") || starts_with(line, "CRASHED")) return line;
  }
  for (const std::string& line : lines) {
    if (line.empty() || line == "Failed" || line.find(": Failure") != std::string::npos) continue;
    return line;
  }
  return lines.empty() ? std::string() : lines.front();
}

}  // namespace

std::string gtest_failure(const std::string& output, std::size_t max_lines) {
  std::vector<std::string> lines = split_lines(output);
  const auto run = std::find_if(lines.begin(), lines.end(),
                                [](const std::string& l) { return starts_with(l, "[ RUN      ]"); });
  std::vector<std::string> body;
  bool verdict = false;
  for (auto it = run == lines.end() ? lines.begin() : run + 1; it != lines.end(); ++it) {
    if (starts_with(*it, "[  FAILED  ]") || starts_with(*it, "[       OK ]") ||
        starts_with(*it, "[  SKIPPED ]")) {
      verdict = true;
      if (starts_with(*it, "[  SKIPPED ]")) body.push_back(*it);
      break;
    }
    body.push_back(*it);
  }
  while (!body.empty() && body.back().empty()) body.pop_back();
  std::string out;
  if (body.size() <= max_lines) {
    for (const std::string& line : body) out += line + "\n";
  } else if (verdict) {
    for (std::size_t i = 0; i < max_lines; ++i) out += body[i] + "\n";
    out += "[... " + std::to_string(body.size() - max_lines) + " more lines in the full log]\n";
  } else {
    out += "[... " + std::to_string(body.size() - max_lines) + " lines before these in the full log]\n";
    for (std::size_t i = body.size() - max_lines; i < body.size(); ++i) out += body[i] + "\n";
  }
  return out;
}

std::string condense_failures(const std::vector<FailedTest>& failed, std::size_t max_shown) {
  // One folder for every log (the grader's way): named once, not on every line.
  std::string folder = failed.empty() ? "" : failed.front().log.substr(0, failed.front().log.rfind('/') + 1);
  for (const FailedTest& t : failed) {
    if (t.log.rfind(folder, 0) != 0 || t.log.find('/', folder.size()) != std::string::npos) folder.clear();
  }
  auto where = [&](const FailedTest& t) { return folder.empty() ? " (full log: " + t.log + ")" : ""; };
  std::string out;
  if (!folder.empty()) out += "Each test's whole output is in " + folder + " (one file per test).\n";
  std::map<std::string, std::string> shown;  // what the failure says -> the test that showed it
  std::size_t listed = 0;
  for (const FailedTest& t : failed) {
    const std::string failure = gtest_failure(t.output);
    // A hang or a crash is the failure, whichever assertion met it first and whatever the
    // stage logged; otherwise the whole text. Numbers aside: bytes, milliseconds, ports.
    std::string verdict = first_message(failure);
    const bool hang_or_crash = starts_with(verdict, "HUNG:") || starts_with(verdict, "CRASHED");
    const std::string key = t.why + "\n" + without_numbers(hang_or_crash ? verdict : failure);
    const std::string head = "--- " + t.name + ": " + t.why;
    if (auto same = shown.find(key); same != shown.end()) {
      out += head + ", the same " +
             (!hang_or_crash ? "failure" : starts_with(verdict, "HUNG:") ? "hang" : "crash") + " as " +
             same->second + where(t) + "\n";
    } else if (shown.size() < max_shown) {
      shown.emplace(key, t.name);
      out += head + where(t) + "\n" + failure + "\n";
    } else {
      if (listed++ == 0) out += "More failures, each with its first message:\n";
      out += head + ": " + verdict + where(t) + "\n";
    }
  }
  return out;
}

}  // namespace grader
