// Lab mode (--lab N): a student's lab graded with labs/manifest.json's test groups, checks and
// points, the reference's tests laid over the submission first.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grade.h"

namespace grader {

/// Grades `session.submission` as lab `lab_number` of the manifest at `manifest_path`; the tests
/// and build files of `reference` are laid over a copy of it. `only_checks` narrows the rubric
/// checks the lab names (empty: all). Prints the table; returns the exit status (2: the manifest
/// or rubric is wrong).
int grade_lab(const Session& session, int lab_number, const std::string& reference,
              const std::string& manifest_path, const std::set<std::string>& only_checks);

/// Lab mode for `make grade-mutants`: builds `session.submission` as lab `lab_number` in
/// `build_root` (src/, tests/, tsan/, debug/ inside; reused, so that only the files that differ
/// from the last submission built there compile again) and grades it `repeats` times, run K's
/// logs and reports in `session.out_dir`/runK. Every lab lays the same overlay over the same
/// tree, so one `build_root` may serve several labs. `reuse_source` is the tree
/// `session.reuse_build` is a build of (the unmutated tree, for a mutant of it). Returns each
/// run's results (the test groups, then the checks, each failed check's `trap` set), or nullopt
/// when the manifest or the rubric is wrong (said on stderr).
std::optional<std::vector<std::vector<CheckResult>>> grade_lab_runs(
    const Session& session, int lab_number, const std::string& reference,
    const std::string& manifest_path, const std::string& build_root,
    const std::string& reuse_source, int repeats);

}  // namespace grader
