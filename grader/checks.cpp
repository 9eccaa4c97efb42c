// The checks' dispatch. Each check runs real stage processes against an in-process scripted
// origin and judges only what a client, the process table, ThreadSanitizer or Valgrind can
// see, so the same code grades the reference and a student's tree. Every wait has a deadline:
// a hung submission fails its check instead of hanging the grader. The checks themselves:
// checks_functional.cpp, checks_sanitizers.cpp, checks_throughput.cpp, checks_escapes.cpp,
// checks_origin_limit.cpp, checks_shedding.cpp, checks_post_once.cpp, checks_slow_reader.cpp.
#include "check_support.h"

namespace grader {

RunOutcome run_check_once(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
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

}  // namespace grader
