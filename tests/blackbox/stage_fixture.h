// The black-box fixture: every stage binary that exists, run as a real process on port 0 in
// front of a real (in-process) scripted origin, talked to through real sockets.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "http_client.h"
#include "launcher.h"
#include "origin_server.h"

namespace testing_support {

/// The stage folders CMake found (PROXY_STAGES), e.g. {"stage1-sequential", ...}.
std::vector<std::string> built_stages();

/// Path of a built binary in this preset's bin/ folder.
std::string binary_path(const std::string& name);

/// Parameterized over stage names. Each test owns its origin and its stage process; both stop
/// in TearDown (the Process destructor reaps the stage).
class StageTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;
  /// Stops the stage (if a test has not) and fails the test when it did not exit cleanly or
  /// its log holds a sanitizer report: under `make tsan` that is how a race fails a test.
  void TearDown() override;

  /// Starts the stage with `--port 0` plus `flags`; stderr goes to a file shown on failure.
  void start_stage(const std::vector<std::string>& flags = {});
  /// "http://127.0.0.1:ORIGIN_PORT" + path
  [[nodiscard]] std::string origin_url(const std::string& path) const;
  [[nodiscard]] std::uint16_t proxy_port() const { return stage_->port(); }
  [[nodiscard]] bool sequential() const { return GetParam() == "stage1-sequential"; }
  /// The stage's stderr so far (its log lines).
  [[nodiscard]] std::string stage_log() const;

  std::unique_ptr<harness::OriginServer> origin_;
  std::unique_ptr<harness::Process> stage_;
  std::string stderr_path_;
};

/// gtest's parameter names may not contain '-'.
std::string stage_name(const ::testing::TestParamInfo<std::string>& info);

}  // namespace testing_support
