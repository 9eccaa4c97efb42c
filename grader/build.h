// Building a submission: its stages, out of tree, in the build types the checks need.
#pragma once

#include <string>
#include <vector>

#include "grader.h"

namespace grader {

/// "NAME-HASH" for a submission's canonical path: its folder's name, and a hash of the path.
std::string build_folder_name(const std::string& canonical_submission);

/// The compiler's complaints from a build log: each line naming an error with a little
/// context, at most `max_lines`.
std::string compiler_errors(const std::string& log, std::size_t max_lines = 80);

/// Stage directories of `root`: stage*-* holding a CMakeLists.txt, sorted.
std::vector<StageInfo> discover_stages(const std::string& root);

/// Configures `source` into `dir` for `build` (release, tsan, debug) and builds each stage's
/// target; fills in the binaries that built and the errors of those that did not. Never writes
/// into `source`.
void build_submission(const std::string& source, const std::string& dir, const std::string& build,
                      std::vector<StageInfo>& stages, int jobs);

/// Whether the stage binary's --help offers --workers (a worker pool).
bool offers_workers(const std::string& binary);

/// Whether a source file in `stage_dir` names the option "--workers" (quotes included): the
/// stage is a pool stage whether or not it compiles.
bool declares_workers(const std::string& stage_dir);

/// Makes `dir` a build folder CMake will configure from `source`: removes it when its
/// CMakeCache.txt was written for another source tree (CMake would refuse it). Only for the
/// grader's own folders.
void forget_other_source(const std::string& dir, const std::string& source);

}  // namespace grader
