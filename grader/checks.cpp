// The checks' dispatch. Each check runs real stage processes against an in-process scripted
// origin and judges only what a client, the process table, ThreadSanitizer or Valgrind can
// see, so the same code grades the reference and a student's tree. Every wait has a deadline:
// a hung submission fails its check instead of hanging the grader. The checks themselves:
// checks_functional.cpp, checks_sanitizers.cpp, checks_throughput.cpp, checks_escapes.cpp,
// checks_origin_limit.cpp, checks_shedding.cpp, checks_post_once.cpp, checks_slow_reader.cpp.
#include <filesystem>
#include <fstream>

#include "check_support.h"

namespace grader {
namespace {

// A failed check says what a client saw; a lab starter's stub says TODO(student) in the
// stage's stderr log. Quoted beside the failure, with the log's path, so that a stub reads as
// unfinished work, not as a mystery (a lab handout's "Grade yourself").
std::string stubs_reached(const std::string& work_dir) {
  std::string said;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(work_dir, ec)) {
    if (entry.path().extension() != ".stderr") continue;
    std::ifstream in(entry.path());
    std::string todos;
    int count = 0;
    for (std::string line; std::getline(in, line) && count < 3;) {
      if (line.find("TODO(student)") == std::string::npos) continue;
      todos += "\n    " + line;
      ++count;
    }
    if (count > 0)
      said += "\n  the stage reached unfinished code (" + entry.path().string() + "):" + todos;
  }
  return said;
}

RunOutcome run_check(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  const int index = ctx.run;
  try {
    if (spec.id == "correctness") return check_correctness(spec, stage, ctx);
    if (spec.id == "concurrency") return check_concurrency(spec, stage, ctx);
    if (spec.id == "cache") return check_cache(spec, stage, ctx);
    if (spec.id == "shutdown") return check_shutdown(spec, stage, ctx);
    if (spec.id == "races") return check_races(spec, stage, ctx, index);
    if (spec.id == "queue-races") return check_queue_races(spec, stage, ctx, index);
    if (spec.id == "deadlock") return check_deadlock(spec, stage, ctx, index);
    if (spec.id == "memory") return check_memory(spec, stage, ctx, index);
    if (spec.id == "worker-exception") return check_worker_exception(spec, stage, ctx);
    if (spec.id == "throughput") return measure_throughput(spec, stage, ctx);
    if (spec.id == "cut-off") return check_cut_off(spec, stage, ctx);
    if (spec.id == "queue-bound") return check_queue_bound(spec, stage, ctx);
    if (spec.id == "origin-limit") return check_origin_limit(spec, stage, ctx);
    if (spec.id == "mixed-paths") return check_mixed_paths(spec, stage, ctx);
    if (spec.id == "shedding") return check_shedding(spec, stage, ctx);
    if (spec.id == "post-once") return check_post_once(spec, stage, ctx);
    if (spec.id == "slow-reader") return check_slow_reader(spec, stage, ctx);
    return {false, "the grader has no check named '" + spec.id + "'", {}};
  } catch (const std::exception& e) {
    return {false, std::string("the check could not run: ") + e.what(), {}};
  }
}

}  // namespace

RunOutcome run_check_once(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  RunOutcome outcome = run_check(spec, stage, ctx);
  if (!outcome.passed) outcome.output += stubs_reached(ctx.work_dir);
  return outcome;
}

}  // namespace grader
