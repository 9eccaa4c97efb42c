// Mutant mode (--mutants): planted-bug variants of a stage (stage 3's, and stage 4's origin
// limit), each graded by the check that must catch it; proof that the checks can fail.
#pragma once

#include <set>
#include <string>

#include "grade.h"

namespace grader {

/// Plants each mutant of the rubric named in `wanted` ("all" for every one) in a copy of the
/// submission, builds it and grades it with its check. Prints mutant -> check -> caught and
/// writes OUT/mutants/report.md. Returns 0 when every one was caught, 1 when one escaped, 2
/// when a patch does not apply.
int grade_mutants(const Session& session, const std::set<std::string>& wanted);

/// Checks, without building anything, that every mutant of the rubric applies exactly (no fuzz)
/// to `session.submission` and names a check of the rubric. Prints one line per mutant, naming
/// the mutant and the file of each hunk that drifted. Returns 0 when all apply, else 1.
int check_mutants_apply(const Session& session);

}  // namespace grader
