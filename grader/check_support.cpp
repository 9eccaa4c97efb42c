#include "check_support.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support.h"

namespace grader {

using namespace std::chrono_literals;
using Clock = CheckClock;
using testing_support::HttpResponse;
using json = nlohmann::json;

std::string Launched::log() const { return slurp(stderr_path); }

void Verdict::expect(bool ok, const std::string& what, const std::string& detail) {
  lines_ += std::string(ok ? "  [pass] " : "  [FAIL] ") + what;
  if (!ok && !detail.empty()) lines_ += "\n         " + detail;
  lines_ += "\n";
  if (!ok) passed_ = false;
}

double seconds_since(CheckClock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Every thread's stack of a live process, from gdb (the hang watchdog's evidence).
std::string thread_stacks(pid_t pid, const std::string& gdb) {
  std::string out = run_capture("timeout 90 " + gdb + " -p " + std::to_string(pid) +
                                " -batch -ex 'set pagination off' -ex 'thread apply all bt' "
                                "</dev/null");
  // Keep the stacks; drop gdb's chatter about loading symbols.
  std::stringstream in(out);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[New LWP", 0) == 0 || line.rfind("[Thread debugging", 0) == 0 ||
        line.rfind("Using host libthread_db", 0) == 0 || line.find("No such file or directory") !=
                                                              std::string::npos) {
      continue;
    }
    kept += line + "\n";
  }
  return kept;
}

std::size_t fd_count(pid_t pid) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);  // polling a condition with a deadline, not a fixed wait
  }
  return condition();
}

/// A port nothing listens on: bound, then closed.
std::uint16_t dead_port() {
  proxy::Socket s = proxy::listen_tcp("127.0.0.1", 0);
  std::uint16_t port = proxy::local_port(s);
  s.close();
  return port;
}

/// The stage's flags for a run: pool stages get the rubric's --workers / --queue.
std::vector<std::string> pool_flags(const StageInfo& stage, const json& params) {
  std::vector<std::string> flags;
  if (!stage.pool) return flags;
  if (params.contains("workers")) {
    flags.insert(flags.end(), {"--workers", std::to_string(params["workers"].get<int>())});
  }
  if (params.contains("queue")) {
    flags.insert(flags.end(), {"--queue", std::to_string(params["queue"].get<int>())});
  }
  return flags;
}

Launched launch(const StageInfo& stage, const std::string& build,
                const std::vector<std::string>& flags, const CheckContext& ctx,
                const std::string& tag, const std::vector<std::string>& prefix) {
  auto binary = stage.binaries.find(build);
  if (binary == stage.binaries.end()) throw std::runtime_error("no " + build + " binary");
  Launched launched;
  launched.stderr_path = ctx.work_dir + "/" + tag + ".stderr";
  std::vector<std::string> argv = prefix;
  if (build == "debug") {
    launched.valgrind_log = ctx.work_dir + "/" + tag + ".valgrind";
    argv.insert(argv.end(),
                {"valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite",
                 "--errors-for-leak-kinds=definite", "--track-fds=yes", "--num-callers=30",
                 "--log-file=" + launched.valgrind_log});
  }
  argv.push_back(binary->second);
  argv.insert(argv.end(), {"--port", "0"});
  argv.insert(argv.end(), flags.begin(), flags.end());
  if (build == "tsan") {
    // Keep going after the first report so one run shows them all; a second stack for
    // lock-order inversions shows where each mutex was taken.
    ::setenv("TSAN_OPTIONS", "halt_on_error=0 second_deadlock_stack=1 report_signal_unsafe=0",
             1);
  }
  harness::ProcessOptions options;
  options.stderr_path = launched.stderr_path;
  options.ready_timeout = build == "release" ? 15s : 90s;
  launched.process = std::make_unique<harness::Process>(argv, options);
  return launched;
}

std::string describe(const HttpResponse& r) {
  return "got status " + std::to_string(r.status) + ", " + std::to_string(r.body.size()) +
         " body bytes, X-Cache '" + r.field("X-Cache") + "'" + (r.complete ? "" : ", incomplete");
}

std::optional<HttpResponse> try_fetch(std::uint16_t port, const std::string& url,
                                      std::string& error,
                                      std::chrono::milliseconds timeout,
                                      const std::vector<std::string>& extra,
                                      const std::string& method) {
  try {
    return testing_support::exchange(port, testing_support::proxy_get(url, extra, 1, method),
                                     timeout);
  } catch (const std::exception& e) {
    error = e.what();
    return std::nullopt;
  }
}

std::string exit_text(const harness::ExitStatus& s) {
  if (s.killed) return "did not exit within the grace period and was killed";
  if (s.signal != 0) return "was killed by signal " + std::to_string(s.signal) + " (" +
                            ::strsignal(s.signal) + ")";
  return "exited with status " + std::to_string(s.exit_code);
}

harness::ExitStatus expect_clean_stop(Verdict& v, Launched& stage) {
  harness::ExitStatus s = stage.process->stop(10s);
  v.expect(s.clean(), "SIGTERM: the stage stops and exits 0", "it " + exit_text(s) + "\n" +
                                                                  stage.log().substr(0, 4000));
  return s;
}

}  // namespace grader
