#include "proc_stats.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>
#include <sstream>
#include <stdexcept>
#include <string>

namespace harness {
namespace {

std::string read_proc_file(pid_t pid, const char* name) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path + " (has the process exited?)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The number after "Name:" in /proc/PID/status ("VmRSS:\t  1234 kB"); -1 if absent.
long status_value(const std::string& status, const std::string& name) {
  auto at = status.find("\n" + name + ":");
  if (at == std::string::npos) {
    if (status.rfind(name + ":", 0) != 0) return -1;
    at = 0;
  } else {
    at += 1;
  }
  std::istringstream line(status.substr(at + name.size() + 1, 64));
  long value = -1;
  line >> value;
  return line ? value : -1;
}

}  // namespace

ProcStats read_proc_stats(pid_t pid) {
  const std::string status = read_proc_file(pid, "status");
  const std::string stat = read_proc_file(pid, "stat");
  ProcStats stats;
  stats.rss_kib = status_value(status, "VmRSS");
  stats.vsz_kib = status_value(status, "VmSize");
  stats.peak_rss_kib = status_value(status, "VmHWM");
  stats.peak_vsz_kib = status_value(status, "VmPeak");
  stats.threads = status_value(status, "Threads");
  // A zombie has released its memory: the Vm* lines are gone.
  if (stats.rss_kib < 0 || stats.vsz_kib < 0 || stats.peak_rss_kib < 0 ||
      stats.peak_vsz_kib < 0 || stats.threads < 0) {
    throw std::runtime_error("/proc/" + std::to_string(pid) +
                             "/status has no memory lines (a zombie or kernel thread?)");
  }
  // Fields after the command name, which may itself hold spaces and parentheses: proc(5)
  // numbers them from 1 with pid; utime and stime are fields 14 and 15, in clock ticks.
  auto close = stat.rfind(')');
  if (close == std::string::npos) throw std::runtime_error("cannot parse /proc/PID/stat: " + stat);
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) utime = std::stoull(field);
    if (index == 15) stime = std::stoull(field);
  }
  if (!fields) throw std::runtime_error("cannot parse /proc/PID/stat: " + stat);
  static const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  stats.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(ticks_per_second);
  return stats;
}

ProcStats read_proc_tree_stats(pid_t root, ProcScope scope) {
  if (scope == ProcScope::process) return read_proc_stats(root);
  if (!std::filesystem::exists("/proc/" + std::to_string(root)))
    throw std::runtime_error("no process " + std::to_string(root));
  // Parent id of every process: field 4 of /proc/PID/stat, after the command name.
  std::multimap<pid_t, pid_t> children;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state;
    long parent = 0;
    if (fields >> state >> parent) children.emplace(static_cast<pid_t>(parent), std::stoi(name));
  }
  ProcStats total;
  std::vector<pid_t> pending = {root};
  while (!pending.empty()) {
    pid_t parent = pending.back();
    pending.pop_back();
    auto [first, last] = children.equal_range(parent);
    for (auto it = first; it != last; ++it) {
      pending.push_back(it->second);
      try {
        ProcStats one = read_proc_stats(it->second);
        total.rss_kib += one.rss_kib;
        total.vsz_kib += one.vsz_kib;
        total.peak_rss_kib += one.peak_rss_kib;
        total.peak_vsz_kib += one.peak_vsz_kib;
        total.threads += one.threads;
        total.cpu_seconds += one.cpu_seconds;
      } catch (const std::runtime_error&) {
        // exited meanwhile
      }
    }
  }
  return total;
}

ProcSampler::ProcSampler(pid_t pid, std::chrono::milliseconds interval, ProcScope scope)
    : pid_(pid), interval_(interval), scope_(scope) {
  last_ = read_proc_tree_stats(pid_, scope_);
  peak_threads_ = last_.threads;
  thread_ = std::jthread([this](const std::stop_token&) {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      // Woken early by stop(); otherwise one sample per interval.
      if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) break;
      lock.unlock();
      try {
        sample_once();
      } catch (const std::runtime_error&) {
        return;  // the process ended: keep the last reading
      }
      lock.lock();
    }
  });
}

ProcSampler::~ProcSampler() { stop(); }

void ProcSampler::sample_once() {
  ProcStats now = read_proc_tree_stats(pid_, scope_);
  std::lock_guard lock(mutex_);
  last_ = now;
  peak_threads_ = std::max(peak_threads_, now.threads);
  wake_.notify_all();
}

bool ProcSampler::wait_for_peak_threads(long threads, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return wake_.wait_for(lock, timeout, [&] { return peak_threads_ >= threads; });
}

void ProcSampler::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  try {
    sample_once();
  } catch (const std::runtime_error&) {
  }
}

ProcStats ProcSampler::peak() const {
  std::lock_guard lock(mutex_);
  ProcStats stats = last_;
  stats.threads = peak_threads_;
  return stats;
}

}  // namespace harness
