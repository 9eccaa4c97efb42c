#include "stage_fixture.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

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

void StageTest::SetUp() { origin_ = std::make_unique<harness::OriginServer>(); }

void StageTest::TearDown() {
  if (!stage_) return;
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
  std::vector<std::string> argv{binary_path(GetParam()), "--port", "0"};
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
