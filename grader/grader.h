// The autograder's shared types: the rubric an instructor edits (grader/rubric.json), what it
// knows about each stage of a submission, and what a check reports back.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace grader {

/// One check of the rubric, as loaded from rubric.json. Plain data; copy freely.
struct CheckSpec {
  std::string id;          ///< stable key: "correctness", "races", ... (checks.cpp dispatches on it)
  std::string name;        ///< one line shown to students
  double points = 0;       ///< max score per stage
  std::string visibility = "visible";  ///< Gradescope: visible, hidden, after_due_date, ...
  int repeats = 1;         ///< runs per stage; every run must pass (races are intermittent)
  int time_limit_s = 60;   ///< wall-clock limit per run; past it the run is killed and fails
  double estimate_s = 10;  ///< typical run time on the reference, for the progress ETA
  std::string build = "release";  ///< which build of the submission: release, tsan or debug
  bool pool_only = false;  ///< only for stages that take --workers (a worker pool)
  /// The stage numbers it grades (the N of stageN-...); empty: every stage. On another stage it
  /// is listed as not run there, out of the totals: neither a pass nor a failure.
  std::vector<int> stages;
  /// Stage directory -> why failing this check is the expected lesson (e.g. stage 1 and the
  /// concurrency check). The points are still lost; the report explains.
  std::map<std::string, std::string> expected_to_fail;
  nlohmann::json params;  ///< check-specific knobs (loads, sizes); see rubric.json
};

/// A planted-bug variant of one stage and the check that must catch it.
struct MutantSpec {
  std::string name;         ///< e.g. "wait-if"
  std::string patch;        ///< path of the patch, relative to the rubric's directory
  std::string check;        ///< id of the stage check meant to catch it; "" when `lab_test` is set
  /// Set instead of `check` for a bug no stage check can see (the stage's own code keeps the
  /// black-box load from reaching it): the lab's unit test that catches it, e.g.
  /// "lab 3: WorkerPool.AWorkerSurvivesAHandlerThatThrows". grade-mutants only checks that its
  /// patch applies and says where it is graded; the unit test's own self-test shows the catch.
  std::string lab_test;
  std::string description;  ///< the bug in one line
  /// The trap id (grader/traps.h) the check's hint must name; "" when no hint should fire.
  std::string trap;
  /// Further checks that must fail on it too, with no hint naming another trap (e.g. races and
  /// memory on a pool that serves nothing).
  std::vector<std::string> also;
  /// Checks run on it too, where a failure may be right or wrong but a hint, if any, must name
  /// `trap` (lab 3's checks: no check blames another trap).
  std::vector<std::string> watch;
  /// The stage whose binary is built from the mutant tree and graded (the N of stageN-...).
  int stage = 3;
};

/// The whole rubric. Loaded once; read-only afterwards.
struct Rubric {
  std::vector<CheckSpec> checks;
  std::vector<MutantSpec> mutants;
  nlohmann::json throughput;  ///< wrk settings and the ratio thresholds between stages
  nlohmann::json quick;       ///< overrides applied by --quick (repeats, durations)
  std::string directory;      ///< where rubric.json lives (patch paths are relative to it)
};

/// Reads and validates `path`. Throws std::runtime_error naming the field that is wrong.
Rubric load_rubric(const std::string& path, bool quick);

/// A stage of the submission: a stage*-* directory with a CMakeLists.txt.
struct StageInfo {
  std::string dir;      ///< e.g. "stage3-pool"
  int number = 0;       ///< the N of stageN-..., 0 when it has none
  bool pool = false;    ///< a worker pool: its source names "--workers" or its --help offers it
  std::map<std::string, std::string> binaries;     ///< build -> binary path, when it built
  std::map<std::string, std::string> build_errors; ///< build -> compiler errors, when it failed
};

/// What one check found on one stage (all repeats folded in).
struct CheckResult {
  std::string stage;
  std::string check_id;
  std::string name;
  double score = 0;
  double max_score = 0;
  bool passed = false;
  std::string visibility = "visible";
  std::string output;    ///< what a student needs to see: failed assertions, stacks, reports
  double seconds = 0;    ///< wall-clock time spent
  bool expected_failure = false;  ///< failed, and the rubric says that is the lesson
  /// Could not run here (a handout's hidden tests, graded on submission): neither a pass nor a
  /// failure, and left out of the totals.
  bool not_run = false;
  /// The trap a failed check's hint names (grader/traps.h: "lost-wakeup", ...), "" for none or
  /// a test group; set where the hint is written (stage and lab mode), read by the mutants.
  std::string trap{};
};

/// What a check's run returns from its child process.
struct RunOutcome {
  bool passed = false;
  std::string output;
  nlohmann::json data;  ///< measurements to keep (throughput numbers)
};

/// Everything a check needs besides its spec and stage.
struct CheckContext {
  std::string work_dir;     ///< scratch space for logs of this run (exists)
  std::string gdb = "gdb";  ///< debugger for the hang watchdog
  bool quick = false;
  int run = 0;  ///< which repeat of the check this is, from 0
  nlohmann::json throughput;  ///< the rubric's throughput block
  std::string wrk_script;     ///< bench/wrk/proxy.lua of the grading tree
  /// How many stages grade_stages grades at once (--stage-lanes), each stage's checks one after
  /// another; throughput and queue-bound (runs_alone, grade.cpp) run alone after every lane.
  int lanes = 1;
};

/// Runs one repeat of `spec` on `stage` in the calling process. Never throws: an exception
/// becomes a failed outcome naming it.
RunOutcome run_check_once(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx);

/// Compares the throughput measured for every stage against the rubric's ratio thresholds and
/// returns, per stage, whether its thresholds held and a table explaining why.
std::map<std::string, RunOutcome> judge_throughput(
    const nlohmann::json& throughput_rubric, const std::map<std::string, nlohmann::json>& measured);

/// Writes the table (returned), report.md, results.json (Gradescope) and junit.xml to `out_dir`.
std::string write_reports(const std::string& out_dir, const std::string& submission,
                          const std::vector<CheckResult>& results, double total_seconds);

}  // namespace grader
