// Mutant mode (--mutants): planted-bug variants of a stage (stage 3's and stage 4's), each graded
// by the check that must catch it and as a lab submission; proof that the checks can fail.
#pragma once

#include <set>
#include <string>

#include "grade.h"

namespace grader {

/// Plants each mutant of the rubric named in `wanted` ("all" for every one) in a copy of the
/// submission and grades it `repeats` times in stage mode (its check, `also` and `watch`) and as
/// the submission of every lab of the manifest at `manifest_path` that grades it (a lab whose
/// graded_files its patch changes, or whose trap_hints word its trap; the reference's tests
/// from `reference` laid over it, as `make grade LAB=N` does). The unmutated submission is
/// graded first the same way: it must pass every check the mutants are judged by, and each
/// mutant must score fewer lab points than it. Prints mutant -> check -> verdict with each
/// run's score and writes OUT/mutants/report.md. Returns 0 when every mutant was caught with
/// the hint it names and every tree scored alike in each run, 1 otherwise, 2 when a patch does
/// not apply or the manifest or rubric is wrong.
int grade_mutants(const Session& session, const std::set<std::string>& wanted,
                  const std::string& reference, const std::string& manifest_path, int repeats);

/// Checks, without building anything, that every mutant of the rubric applies exactly (no fuzz)
/// to `session.submission` and names a check of the rubric. Prints one line per mutant, naming
/// the mutant and the file of each hunk that drifted, and the labs that grade it (from the
/// manifest at `manifest_path`, when it can be read). Returns 0 when all apply, else 1.
int check_mutants_apply(const Session& session, const std::string& manifest_path);

}  // namespace grader
