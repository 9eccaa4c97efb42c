// The black-box fixture: every stage binary that exists, run as a real process on port 0 in
// front of a real (in-process) scripted origin, talked to through real sockets.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hang_watch.h"
#include "http_client.h"
#include "launcher.h"
#include "origin_server.h"
#include "run_command.h"

namespace testing_support {

/// The stage folders CMake found (PROXY_STAGES), e.g. {"stage1-sequential", ...}.
std::vector<std::string> built_stages();

/// Path of a built binary in this preset's bin/ folder.
std::string binary_path(const std::string& name);

/// What built binary `name` prints for `--help` (stdout) and its wait status, run through
/// harness::shell_command so that make cross-check runs it under its emulator.
harness::CommandOutput help_output(const std::string& name);

/// Parameterized over stage names. Each test owns its origin and its stage process; both stop
/// in TearDown (the Process destructor reaps the stage).
class StageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;
  /// Stops the stage (if a test has not) and fails the test when it did not exit cleanly or
  /// its log holds a sanitizer report: under `make tsan` that is how a race fails a test.
  void TearDown() override;

  /// Starts the stage with `--port 0` plus `flags`; stderr goes to a file shown on failure.
  /// The binary is this build's, or $PROXY_TEST_STAGE_DIR/STAGE when that is set.
  /// In lab 3's suites (StageTest, PoolConcurrencyModel, PoolDefaults) the pool stage is
  /// watched for the hang a lost wakeup leaves (hang_watch.h): seen, the test fails within
  /// seconds naming it, and the stage is killed.
  void start_stage(const std::vector<std::string>& flags = {});
  /// Waits until `condition` holds, up to `deadline`; false when it did not, and at once when
  /// the hang watch has seen the stage hang or the stage has exited. For steps that only the
  /// stage can complete.
  bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds deadline);
  /// wait_until the origin has seen `count` requests whose path starts with `path_prefix`.
  bool wait_for_origin(const std::string& path_prefix, std::uint64_t count,
                       std::chrono::milliseconds deadline);
  /// "http://127.0.0.1:ORIGIN_PORT" + path
  [[nodiscard]] std::string origin_url(const std::string& path) const;
  [[nodiscard]] std::uint16_t proxy_port() const { return stage_->port(); }
  [[nodiscard]] bool sequential() const { return GetParam() == "stage1-sequential"; }
  /// The stage's stderr so far (its log lines).
  [[nodiscard]] std::string stage_log() const;

  std::unique_ptr<harness::OriginServer> origin_;
  std::unique_ptr<harness::Process> stage_;
  std::string stderr_path_;
  std::unique_ptr<HangWatch> hang_watch_;  // pool stages only; stopped before the stage
};

/// gtest's parameter names may not contain '-'.
std::string stage_name(const ::testing::TestParamInfo<std::string>& info);

}  // namespace testing_support
