#include "load_runner.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "proc_stats.h"

namespace bench {

std::string own_bin_dir() {
  std::error_code error;
  auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw std::runtime_error("cannot read /proc/self/exe: " + error.message());
  return self.parent_path().string();
}

harness::Process start_origin(const std::string& bin_dir, int delay_ms, int capacity,
                              const std::string& log_path, const std::string& overload) {
  std::vector<std::string> argv = {bin_dir + "/origin",      "--port",     "0",     "--delay-ms",
                                   std::to_string(delay_ms), "--overload", overload};
  if (capacity > 0) {
    argv.push_back("--capacity");
    argv.push_back(std::to_string(capacity));
  }
  harness::ProcessOptions options;
  options.stderr_path = log_path;
  return harness::Process(argv, options);
}

namespace {

// The last non-empty line of a log file, or a note that there is none.
std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::string last = "(its log is empty)";
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

void measure(const ServerCommand& server, harness::WrkOptions wrk, const std::string& log_path,
             LoadPoint& point) {
  harness::ProcessOptions options;
  options.stderr_path = log_path;
  options.ready_timeout = std::chrono::seconds(30);  // squid takes a while on a loaded machine
  harness::Process process(server.argv, options);
  wrk.proxy_url = "http://" + process.address();
  try {
    harness::ProcSampler sampler(
        process.pid(), std::chrono::milliseconds(50),
        server.measure_children ? harness::ProcScope::descendants : harness::ProcScope::process);
    point.wrk = harness::run_wrk(wrk);
    sampler.stop();
    point.process = sampler.peak();
  } catch (const std::runtime_error& e) {
    // A server that died right after its listening line (a lab's stub, a crash) leaves only a
    // zombie for /proc: say that it died and where its own last words are.
    harness::ExitStatus died = process.stop();
    if (died.clean()) throw;
    throw std::runtime_error(server.name + " exited during the measurement (exit " +
                             std::to_string(died.exit_code) + ", signal " +
                             std::to_string(died.signal) + "): " + last_line(log_path) +
                             " (log: " + log_path + "; " + e.what() + ")");
  }
  harness::ExitStatus status = process.stop();
  if (!status.clean()) {
    std::cerr << "note: " << server.name << " did not exit cleanly after SIGTERM (exit "
              << status.exit_code << ", signal " << status.signal
              << (status.killed ? ", killed after 5 s" : "") << "); log: " << log_path << "\n";
  }
}

std::vector<int> parse_int_list(const std::string& text) {
  std::vector<int> values;
  std::string normalized = text;
  for (char& c : normalized)
    if (c == ',') c = ' ';
  std::istringstream in(normalized);
  std::string item;
  while (in >> item) {
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value <= 0)
      throw std::invalid_argument("not a positive whole number: '" + item + "' in '" + text + "'");
    values.push_back(value);
  }
  if (values.empty()) throw std::invalid_argument("empty list: '" + text + "'");
  return values;
}

std::string format_duration(std::chrono::seconds duration) {
  long total = duration.count() < 0 ? 0 : static_cast<long>(duration.count());
  std::ostringstream out;
  out << total / 60 << ":" << (total % 60 < 10 ? "0" : "") << total % 60;
  return out.str();
}

void print_progress(std::size_t done, std::size_t total, const LoadPoint& point,
                    std::chrono::steady_clock::time_point started) {
  using namespace std::chrono;
  auto elapsed = duration_cast<seconds>(steady_clock::now() - started);
  auto eta = done == 0 ? seconds(0)
                       : duration_cast<seconds>(elapsed * static_cast<double>(total - done) /
                                                static_cast<double>(done));
  const auto& w = point.wrk;
  std::ostringstream line;
  line << "[" << done << "/" << total << "] " << point.server << " " << point.scenario << " "
       << point.workload;
  if (point.workers > 0) line << " workers=" << point.workers;
  // Answered (2xx/3xx) first: a shedding stage's 503s are answers too, but not throughput, and
  // counted in they would seem to beat the bound.
  line << " c=" << point.connections << ": " << format_number(w.ok_per_s(), 0) << " ok/s";
  if (w.requests_per_s - w.ok_per_s() >= 0.5) {
    line << " of " << format_number(w.requests_per_s, 0) << " req/s";
  }
  if (std::isfinite(point.bound_rps)) line << " (bound " << format_number(point.bound_rps, 0) << ")";
  line << ", p99 " << format_number(w.latency_ms.p99, 1) << " ms, errors " << w.errors.total()
       << ", RSS " << format_number(static_cast<double>(point.process.peak_rss_kib) / 1024.0, 1)
       << " MiB, threads " << point.process.threads << " | " << format_duration(elapsed)
       << " elapsed, ETA " << format_duration(eta);
  std::cerr << line.str() << std::endl;
}

}  // namespace bench
