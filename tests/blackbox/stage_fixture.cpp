#include "stage_fixture.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace testing_support {

std::vector<std::string> built_stages() {
  std::vector<std::string> stages;
  std::stringstream list(PROXY_STAGES);
  for (std::string name; std::getline(list, name, ',');) {
    if (!name.empty()) stages.push_back(name);
  }
  return stages;
}

std::string binary_path(const std::string& name) { return std::string(PROXY_BIN_DIR) + "/" + name; }

harness::CommandOutput help_output(const std::string& name) {
  return harness::run_command(harness::shell_command(binary_path(name)) + " --help");
}

void StageTest::SetUp() { origin_ = std::make_unique<harness::OriginServer>(); }

void StageTest::TearDown() {
  if (!stage_) return;
  if (hang_watch_) {
    hang_watch_->stop();
    if (hang_watch_->hung()) ADD_FAILURE() << hang_watch_->hang();
  }
  harness::ExitStatus status = stage_->stop(std::chrono::seconds(10));
  std::string log = stage_log();
  EXPECT_TRUE(status.clean()) << GetParam() << " exited with " << status.exit_code << ", signal "
                              << status.signal << (status.killed ? " (killed)" : "") << "\n"
                              << log;
  for (const char* report : {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer",
                             "runtime error:", "ERROR: LeakSanitizer"}) {
    EXPECT_EQ(log.find(report), std::string::npos) << "sanitizer report in the stage's log:\n"
                                                  << log;
  }
  // Labs (labs/README.md): a test that fails against a lab starter names the TODO(student) stub the
  // stage ran into, whatever the stage did next (answered, closed, or carried on).
  if (HasFailure() && log.find("TODO(student)") != std::string::npos) {
    std::string todo_lines;
    std::stringstream lines(log);
    for (std::string line; std::getline(lines, line) && todo_lines.size() < 2000;) {
      if (line.find("TODO(student)") != std::string::npos) todo_lines += line + "\n";
    }
    ADD_FAILURE() << GetParam() << " ran into an unfinished lab stub:\n" << todo_lines;
  }
}

void StageTest::start_stage(const std::vector<std::string>& flags) {
  // PROXY_TEST_STAGE_DIR runs the fixture's tests against stage binaries built elsewhere: the
  // grader's self-test points it at a planted bug (grader/CMakeLists.txt).
  const char* stage_dir = std::getenv("PROXY_TEST_STAGE_DIR");
  std::vector<std::string> argv{
      stage_dir && *stage_dir ? std::string(stage_dir) + "/" + GetParam() : binary_path(GetParam()),
      "--port", "0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& c : test_name) {
    if (c == '/') c = '_';
  }
  stderr_path_ = ::testing::TempDir() + "stage-" + std::to_string(::getpid()) + "-" + test_name +
                 ".log";
  harness::ProcessOptions options;
  options.stderr_path = stderr_path_;
  // Sanitizer builds start slowly on a loaded 2-core machine; a hang still fails.
  options.ready_timeout = std::chrono::seconds(30);
  stage_ = std::make_unique<harness::Process>(argv, options);
  // Lab 3's black-box suites (labs/manifest.json) on the pool stage. Not the other suites
  // built on this fixture: a slow-client attack may hold every worker on clients that send
  // nothing, while another client's request waits unread -- a correct pool's state there.
  const std::string suite =
      ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
  const std::string fixture = suite.substr(suite.rfind('/') + 1);
  if (GetParam() == "stage3-pool" &&
      (fixture == "StageTest" || fixture == "PoolConcurrencyModel" || fixture == "PoolDefaults")) {
    hang_watch_ = std::make_unique<HangWatch>(stage_->pid(), stage_->port(), origin_->port(),
                                              GetParam());
  }
}

bool StageTest::wait_until(const std::function<bool()>& condition,
                           std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!condition()) {
    if (hang_watch_ && hang_watch_->hung()) return false;
    // A stage that died (a crash, a lab's unfinished TODO(student) stub) can complete nothing:
    // fail in a second rather than after the deadline, a minute of every such grading.
    if (stage_ && !stage_->running()) return condition();
    if (std::chrono::steady_clock::now() > until) return false;
    // Polling, bounded: the condition is another process's state (the origin's counts, the
    // stage's threads), which offers nothing to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool StageTest::wait_for_origin(const std::string& path_prefix, std::uint64_t count,
                                std::chrono::milliseconds deadline) {
  return wait_until([&] { return origin_->request_count(path_prefix) >= count; }, deadline);
}

std::string StageTest::origin_url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(origin_->port()) + path;
}

std::string StageTest::stage_log() const {
  std::ifstream in(stderr_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string stage_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

}  // namespace testing_support
