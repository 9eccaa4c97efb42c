#include "load_report.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "run_command.h"

namespace bench {
namespace {

std::string number_field(double value) {
  if (!std::isfinite(value)) return "";
  std::ostringstream out;
  out.precision(10);
  out << value;
  return out.str();
}

std::string text_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

double littles_law_bound(double in_flight, double delay_ms) {
  if (delay_ms <= 0) return std::numeric_limits<double>::infinity();
  return in_flight / (delay_ms / 1000.0);
}

int in_flight_limit(int workers, int connections, int origin_capacity) {
  int limit = std::min(workers, connections);
  if (origin_capacity > 0) limit = std::min(limit, origin_capacity);
  return limit;
}

std::uint64_t dropped(const harness::WrkErrors& errors) {
  return errors.connect + errors.read + errors.write + errors.timeout;
}

double apdex(const harness::WrkResult& result) {
  const double asked = static_cast<double>(result.requests + dropped(result.errors));
  if (result.apdex_t_ms <= 0 || asked == 0) return std::numeric_limits<double>::quiet_NaN();
  if (result.requests == 0) return 0;
  // Error statuses are fast and would otherwise look satisfied.
  const double good = static_cast<double>(result.requests - std::min(result.requests, result.errors.status));
  const double score = result.apdex_satisfied + result.apdex_tolerating / 2.0;
  return score * good / asked;
}

std::vector<std::string> csv_columns() {
  return {"scenario",        "server",          "workload",       "workers",
          "connections",     "body_bytes",      "origin_delay_ms", "origin_capacity",
          "duration_s",      "requests",        "requests_per_s", "ok_per_s",      "bound_rps",
          "latency_mean_ms", "latency_p50_ms",  "latency_p90_ms", "latency_p99_ms",
          "latency_max_ms",  "errors_connect",  "errors_read",    "errors_write",
          "errors_timeout",  "errors_status",   "apdex_t_ms",     "apdex",
          "peak_rss_kib",    "peak_vsz_kib",    "peak_threads",   "cpu_seconds"};
}

std::string csv_header() {
  std::string header;
  for (const auto& column : csv_columns()) header += (header.empty() ? "" : ",") + column;
  return header;
}

std::string csv_row(const LoadPoint& p) {
  const auto& w = p.wrk;
  std::vector<std::string> fields = {
      text_field(p.scenario),
      text_field(p.server),
      text_field(p.workload),
      std::to_string(p.workers),
      std::to_string(p.connections),
      std::to_string(p.body_bytes),
      std::to_string(p.origin_delay_ms),
      std::to_string(p.origin_capacity),
      number_field(w.duration_s),
      std::to_string(w.requests),
      number_field(w.requests_per_s),
      number_field(w.ok_per_s()),
      number_field(p.bound_rps),
      number_field(w.latency_ms.mean),
      number_field(w.latency_ms.p50),
      number_field(w.latency_ms.p90),
      number_field(w.latency_ms.p99),
      number_field(w.latency_ms.max),
      std::to_string(w.errors.connect),
      std::to_string(w.errors.read),
      std::to_string(w.errors.write),
      std::to_string(w.errors.timeout),
      std::to_string(w.errors.status),
      w.apdex_t_ms > 0 ? number_field(w.apdex_t_ms) : "",
      number_field(point_apdex(p)),
      std::to_string(p.process.peak_rss_kib),
      std::to_string(p.process.peak_vsz_kib),
      std::to_string(p.process.threads),
      number_field(p.process.cpu_seconds)};
  std::string line;
  for (std::size_t i = 0; i < fields.size(); ++i) line += (i == 0 ? "" : ",") + fields[i];
  return line;
}

double point_apdex(const LoadPoint& point) {
  return std::isnan(point.apdex_read) ? apdex(point.wrk) : point.apdex_read;
}

LoadPoint read_csv_row(std::string_view line) {
  const auto columns = csv_columns();
  const auto fields = split_csv_line(line);
  if (fields.size() != columns.size())
    throw std::runtime_error("CSV row has " + std::to_string(fields.size()) + " fields, expected " +
                             std::to_string(columns.size()) + ": " + std::string(line));
  auto at = [&](const char* name) -> const std::string& {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return fields[i];
    throw std::logic_error(std::string("no column ") + name);
  };
  auto real = [&](const char* name) {
    const std::string& text = at(name);
    return text.empty() ? std::numeric_limits<double>::quiet_NaN() : std::stod(text);
  };
  auto count = [&](const char* name) -> std::uint64_t {
    const std::string& text = at(name);
    return text.empty() ? 0 : std::stoull(text);
  };
  LoadPoint p;
  p.scenario = at("scenario");
  p.server = at("server");
  p.workload = at("workload");
  p.workers = static_cast<int>(count("workers"));
  p.connections = static_cast<int>(count("connections"));
  p.body_bytes = static_cast<int>(count("body_bytes"));
  p.origin_delay_ms = static_cast<int>(count("origin_delay_ms"));
  p.origin_capacity = static_cast<int>(count("origin_capacity"));
  p.bound_rps = at("bound_rps").empty() ? std::numeric_limits<double>::infinity() : real("bound_rps");
  p.wrk.duration_s = real("duration_s");
  p.wrk.requests = count("requests");
  p.wrk.requests_per_s = real("requests_per_s");
  p.wrk.latency_ms = {real("latency_mean_ms"), real("latency_p50_ms"), real("latency_p90_ms"),
                      real("latency_p99_ms"), real("latency_max_ms")};
  p.wrk.errors = {count("errors_connect"), count("errors_read"), count("errors_write"),
                  count("errors_timeout"), count("errors_status")};
  p.wrk.apdex_t_ms = at("apdex_t_ms").empty() ? 0 : real("apdex_t_ms");
  p.apdex_read = real("apdex");
  p.process.peak_rss_kib = static_cast<long>(count("peak_rss_kib"));
  p.process.peak_vsz_kib = static_cast<long>(count("peak_vsz_kib"));
  p.process.threads = static_cast<long>(count("peak_threads"));
  p.process.cpu_seconds = real("cpu_seconds");
  return p;
}

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else if (c != '\r' && c != '\n') {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return fields;
}

void run_gnuplot(const std::string& script_path) {
  const harness::CommandOutput run = harness::run_command("gnuplot '" + script_path + "' 2>&1");
  if (!run.started) throw std::runtime_error("cannot run gnuplot");
  const int status = run.status;
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("gnuplot " + script_path + " failed" +
                             (WIFEXITED(status) && WEXITSTATUS(status) == 127
                                  ? " (not installed? Debian package gnuplot-nox)"
                                  : "") +
                             ":\n" + run.text);
  }
}

std::string format_number(double value, int decimals) {
  if (std::isnan(value)) return "–";
  if (std::isinf(value)) return "∞";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace bench
