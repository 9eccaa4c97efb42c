// Grading stages: every check of the rubric on every stage, each run in a process of its own
// with a time limit, and stage mode (the default: every stage of a submission).
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "grader.h"

namespace grader {

using Clock = std::chrono::steady_clock;

/// What one run of the grader was asked to do, once the command line is parsed. Read-only.
struct Session {
  std::string submission;  ///< canonical path of the tree graded
  std::string out_dir;     ///< canonical path: report.md, results.json, junit.xml, logs/
  std::string build_root;  ///< out-of-tree builds of the submission
  std::string prebuilt;    ///< grade these binaries instead of building ("" to build)
  std::string stages_arg;  ///< --stages: "1,3", or "" for every stage
  /// --reuse-build: a ninja build of the submission itself (a self-grade's build/release) whose
  /// up-to-date objects lab mode copies instead of compiling them again; "" for none.
  std::string reuse_build;
  int jobs = 1;            ///< parallel compile jobs
  bool expect_full = false;  ///< exit 1 unless every check passed or failed as expected
  Rubric rubric;
  CheckContext ctx;  ///< gdb, quick, the throughput block, shared by every check
  Clock::time_point start;
};

/// Grades `stages` with `checks`, printing progress to stderr; returns one result per (stage,
/// check). Throughput runs last and is judged across the stages of this run. With
/// `stop_at_first_failure`, stops after the first check that fails (the mutant runs).
std::vector<CheckResult> grade_stages(const std::vector<CheckSpec>& checks,
                                      std::vector<StageInfo>& stages, CheckContext ctx,
                                      const Rubric& rubric, const std::string& out_dir,
                                      Clock::time_point start, bool stop_at_first_failure = false);

/// Stage mode: builds (or takes --prebuilt) every stage of the submission and grades it with
/// `checks`; prints the table and writes the reports. Returns the exit status.
int grade_submission(const Session& session, const std::vector<CheckSpec>& checks);

/// 1 when `expect_full` and a result failed that the rubric does not expect to fail, else 0.
int exit_status(const std::vector<CheckResult>& results, bool expect_full);

}  // namespace grader
