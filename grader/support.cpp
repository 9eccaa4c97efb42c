#include "support.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "run_command.h"

namespace grader {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string run_capture(const std::string& command, std::size_t limit) {
  harness::CommandOutput out = harness::run_command(command + " 2>&1", limit);
  return out.started ? out.text : "(cannot run: " + command + ")";
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  }
  return buf;
}

std::string tail(const std::string& text, std::size_t max) {
  return text.size() <= max ? text : "...\n" + text.substr(text.size() - max);
}

std::string safe_name(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return s;
}

std::set<std::string> parse_list(const std::string& list) {
  std::set<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.insert(item);
  }
  return items;
}

std::set<int> parse_stage_numbers(const std::string& list) {
  std::set<int> numbers;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) numbers.insert(std::atoi(item.c_str()));
  }
  return numbers;
}

/// Makes `to` a copy of the source tree `from`, leaving out build products and version control.
/// Files whose content is already there are left alone, so their mtimes stay and a rerun rebuilds
/// incrementally; files in `to` that `from` does not have are removed, so that a file a
/// resubmission dropped cannot linger, and a test file a student adds under an overlaid folder
/// (tests/) cannot pad the lab's test groups.
void copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  std::vector<fs::path> extra;
  for (auto it = fs::recursive_directory_iterator(to); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path relative = fs::relative(it->path(), to);
    const std::string top = relative.begin()->string();
    if (top == "build" || top == "results" || top == ".git" || !fs::exists(from / relative)) {
      if (it->is_directory()) it.disable_recursion_pending();
      if (!fs::exists(from / relative)) extra.push_back(it->path());
    }
  }
  for (const fs::path& path : extra) fs::remove_all(path);
  for (auto it = fs::recursive_directory_iterator(from); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path relative = fs::relative(it->path(), from);
    const std::string top = relative.begin()->string();
    if (top == "build" || top == "results" || top == ".git") {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    const fs::path target = to / relative;
    if (it->is_directory()) {
      fs::create_directories(target);
    } else if (it->is_regular_file()) {
      if (fs::exists(target) && slurp(target.string()) == slurp(it->path().string())) continue;
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing);
    }
  }
}

/// Copies `from` (a file or a tree) over `to`, replacing what is there.
void overlay(const fs::path& from, const fs::path& to) {
  if (fs::is_directory(from)) {
    copy_tree(from, to);
  } else if (fs::exists(from)) {
    fs::create_directories(to.parent_path());
    if (!fs::exists(to) || slurp(to.string()) != slurp(from.string())) {
      fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace grader
