#include "wrk.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "spawn_setup.h"

#ifndef PROXY_SOURCE_DIR
#error "PROXY_SOURCE_DIR must name the source tree (set in harness/CMakeLists.txt)"
#endif

extern char** environ;

namespace harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Variables proxy.lua reads; ours replace any inherited value.
constexpr const char* kScriptVariables[] = {"TARGET", "WORKLOAD", "CLOSE", "JSON", "APDEX_T_MS"};
// How long wrk may outlive its -d before we call it hung: it waits up to --timeout for the
// last responses and its threads' start-up can take a while on a loaded machine.
constexpr auto kOverrun = std::chrono::seconds(30);

const json& field(const json& object, const char* name, const char* where) {
  auto it = object.find(name);
  if (it == object.end())
    throw std::runtime_error(std::string("wrk JSON: missing \"") + where + name + "\"");
  return *it;
}

std::uint64_t count_field(const json& object, const char* name, const char* where = "") {
  const json& value = field(object, name, where);
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  // wrk's counters are integers, but a float that is one is accepted.
  if (value.is_number_float() && value.get<double>() >= 0 &&
      value.get<double>() == std::floor(value.get<double>()))
    return static_cast<std::uint64_t>(value.get<double>());
  throw std::runtime_error(std::string("wrk JSON: \"") + where + name +
                           "\" is not a non-negative integer: " + value.dump());
}

double real_field(const json& object, const char* name, const char* where = "") {
  const json& value = field(object, name, where);
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!value.is_number())
    throw std::runtime_error(std::string("wrk JSON: \"") + where + name +
                             "\" is not a number: " + value.dump());
  return value.get<double>();
}

const json& object_field(const json& object, const char* name) {
  const json& value = field(object, name, "");
  if (!value.is_object())
    throw std::runtime_error(std::string("wrk JSON: \"") + name + "\" is not an object");
  return value;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A private directory for wrk's JSON, stdout and stderr; removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/proxy-wrk-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }

 private:
  fs::path path_;
};

// Waits for `pid` until `deadline`; kills it with SIGKILL after that. Returns the wait status
// and whether it had to be killed. A pidfd lets poll() carry the deadline without a sleep loop.
std::pair<int, bool> wait_with_deadline(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  bool killed = false;
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) {
        ::kill(pid, SIGKILL);
        killed = true;
        break;
      }
      pollfd fd{pidfd, POLLIN, 0};
      int ready = ::poll(&fd, 1, static_cast<int>(std::min<long long>(left, 60'000)));
      if (ready > 0) break;
      if (ready < 0 && errno != EINTR) break;
    }
    ::close(pidfd);
  }
  // Without pidfd (kernels before 5.3) this waits for wrk's own -d to end it.
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {status, killed};
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

std::string default_wrk_script() { return std::string(PROXY_SOURCE_DIR) + "/bench/wrk/proxy.lua"; }

WrkResult parse_wrk_json(std::string_view text) {
  json root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    throw std::runtime_error("wrk JSON: not valid JSON: " +
                             std::string(text.substr(0, std::min<std::size_t>(text.size(), 200))));
  }
  if (!root.is_object()) throw std::runtime_error("wrk JSON: not an object");
  WrkResult result;
  result.requests = count_field(root, "requests");
  result.duration_s = real_field(root, "duration_s");
  result.requests_per_s = real_field(root, "requests_per_s");
  result.bytes = count_field(root, "bytes");
  const json& latency = object_field(root, "latency_ms");
  result.latency_ms.mean = real_field(latency, "mean", "latency_ms.");
  result.latency_ms.p50 = real_field(latency, "p50", "latency_ms.");
  result.latency_ms.p90 = real_field(latency, "p90", "latency_ms.");
  result.latency_ms.p99 = real_field(latency, "p99", "latency_ms.");
  result.latency_ms.max = real_field(latency, "max", "latency_ms.");
  const json& errors = object_field(root, "errors");
  result.errors.connect = count_field(errors, "connect", "errors.");
  result.errors.read = count_field(errors, "read", "errors.");
  result.errors.write = count_field(errors, "write", "errors.");
  result.errors.timeout = count_field(errors, "timeout", "errors.");
  result.errors.status = count_field(errors, "status", "errors.");
  // null when the script could not read wrk's command line.
  const json& connections = field(root, "connections", "");
  result.connections = connections.is_null() ? 0 : static_cast<int>(count_field(root, "connections"));
  const json& threads = field(root, "threads", "");
  result.threads = threads.is_null() ? 0 : static_cast<int>(count_field(root, "threads"));
  if (auto apdex = root.find("apdex"); apdex != root.end() && !apdex->is_null()) {
    const json& object = object_field(root, "apdex");
    result.apdex_t_ms = real_field(object, "t_ms", "apdex.");
    result.apdex_satisfied = real_field(object, "satisfied", "apdex.");
    result.apdex_tolerating = real_field(object, "tolerating", "apdex.");
  }
  return result;
}

namespace {

// Throws std::invalid_argument naming the first option run_wrk cannot use.
void check_options(const WrkOptions& options, const std::string& script) {
  if (options.proxy_url.empty()) throw std::invalid_argument("run_wrk: proxy_url is empty");
  if (options.target.rfind("http://", 0) != 0)
    throw std::invalid_argument("run_wrk: target must be an absolute http:// URL: " + options.target);
  if (options.connections < 1) throw std::invalid_argument("run_wrk: connections must be >= 1");
  if (options.threads < 1) throw std::invalid_argument("run_wrk: threads must be >= 1");
  if (options.duration.count() < 1) throw std::invalid_argument("run_wrk: duration must be >= 1 s");
  if (options.workload != "hit" && options.workload != "miss")
    throw std::invalid_argument("run_wrk: workload must be 'hit' or 'miss': " + options.workload);
  if (options.timeout.count() < 1) throw std::invalid_argument("run_wrk: timeout must be >= 1 s");
  if (!(options.apdex_t_ms >= 0)) throw std::invalid_argument("run_wrk: apdex_t_ms must be >= 0");
  if (!fs::exists(script)) throw std::invalid_argument("run_wrk: no wrk script at " + script);
}

// wrk's command line.
std::vector<std::string> wrk_arguments(const WrkOptions& options, const std::string& script) {
  // wrk refuses fewer connections than threads.
  const int threads = std::min(options.threads, options.connections);
  return {options.wrk_binary,
          "-t",
          std::to_string(threads),
          "-c",
          std::to_string(options.connections),
          "-d",
          std::to_string(options.duration.count()) + "s",
          "--timeout",
          std::to_string(options.timeout.count()) + "s",
          "--latency",
          "-s",
          script,
          options.proxy_url};
}

// wrk's environment: ours, less any variable of the script's, plus the script's settings
// (bench/wrk/proxy.lua reads them) and where it writes its JSON summary.
std::vector<std::string> wrk_environment(const WrkOptions& options, const fs::path& json_path) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    bool ours = false;
    for (const char* name : kScriptVariables) {
      std::string prefix = std::string(name) + "=";
      if (kv.rfind(prefix, 0) == 0) ours = true;
    }
    if (!ours) env.emplace_back(kv);
  }
  env.push_back("TARGET=" + options.target);
  env.push_back("WORKLOAD=" + options.workload);
  env.push_back(std::string("CLOSE=") + (options.close ? "1" : "0"));
  env.push_back("JSON=" + json_path.string());
  if (options.apdex_t_ms > 0) {
    std::ostringstream t;
    t << options.apdex_t_ms;
    env.push_back("APDEX_T_MS=" + t.str());
  }
  return env;
}

// Starts wrk with `argv` and `env`, stdin from /dev/null and its output in `out_path` and
// `err_path`. Returns its pid; throws when it cannot start.
pid_t spawn_wrk(std::vector<std::string> argv, std::vector<std::string> env,
                const fs::path& out_path, const fs::path& err_path) {
  SpawnSetup spawn;
  ::posix_spawn_file_actions_addopen(&spawn.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_addopen(&spawn.actions, STDOUT_FILENO, out_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::posix_spawn_file_actions_addopen(&spawn.actions, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  spawn.close_inherited_and_reset_signals();

  std::vector<char*> args;
  for (auto& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  if (int rc = ::posix_spawnp(&pid, argv[0].c_str(), &spawn.actions, &spawn.attr, args.data(),
                              envp.data());
      rc != 0) {
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc) +
                             " (Debian package: wrk; scripts/install-deps bench)");
  }
  return pid;
}

}  // namespace

WrkResult run_wrk(const WrkOptions& options) {
  const std::string script = options.script.empty() ? default_wrk_script() : options.script;
  check_options(options, script);

  TempDir dir;
  const fs::path json_path = dir.path() / "summary.json";
  const fs::path out_path = dir.path() / "stdout.txt";
  const fs::path err_path = dir.path() / "stderr.txt";
  const std::vector<std::string> argv = wrk_arguments(options, script);
  const pid_t pid = spawn_wrk(argv, wrk_environment(options, json_path), out_path, err_path);
  const auto deadline = std::chrono::steady_clock::now() + options.duration + options.timeout + kOverrun;
  auto [status, killed] = wait_with_deadline(pid, deadline);

  std::string command;
  for (const auto& arg : argv) command += (command.empty() ? "" : " ") + arg;
  const std::string stderr_text = read_file(err_path);
  if (killed || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(
        "wrk " + std::string(killed ? "hung past its duration and was killed" : describe(status)) +
        " (" + command + "); stderr:\n" + stderr_text + "stdout:\n" + read_file(out_path));
  }
  if (!fs::exists(json_path)) {
    throw std::runtime_error("wrk wrote no JSON summary (is " + script +
                             " proxy.lua?) (" + command + "); stderr:\n" + stderr_text);
  }
  WrkResult result = parse_wrk_json(read_file(json_path));
  result.report = read_file(out_path);
  if (!stderr_text.empty()) result.report += stderr_text;
  return result;
}

}  // namespace harness
