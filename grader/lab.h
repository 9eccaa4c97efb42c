// Lab mode (--lab N): a student's lab graded with labs/manifest.json's test groups, checks and
// points, the reference's tests laid over the submission first.
#pragma once

#include <set>
#include <string>

#include "grade.h"

namespace grader {

/// Grades `session.submission` as lab `lab_number` of the manifest at `manifest_path`; the tests
/// and build files of `reference` are laid over a copy of it. `only_checks` narrows the rubric
/// checks the lab names (empty: all). Prints the table; returns the exit status (2: the manifest
/// or rubric is wrong).
int grade_lab(const Session& session, int lab_number, const std::string& reference,
              const std::string& manifest_path, const std::set<std::string>& only_checks);

}  // namespace grader
