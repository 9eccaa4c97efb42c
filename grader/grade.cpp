#include "grade.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "build.h"
#include "support.h"
#include "traps.h"

namespace grader {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

/// Runs one repeat of a check in a child process of its own (its own process group), so that
/// a hang anywhere is ended by the time limit: the whole group, stage processes included, is
/// killed and the check fails.
RunOutcome run_isolated(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  const std::string result_path = ctx.work_dir + "/result.json";
  fs::remove(result_path);
  std::cout.flush();
  std::cerr.flush();
  pid_t child = ::fork();
  if (child < 0) return {false, "the grader could not fork", {}};
  if (child == 0) {
    ::setpgid(0, 0);
    RunOutcome outcome = run_check_once(spec, stage, ctx);
    std::ofstream(result_path) << json{{"passed", outcome.passed}, {"output", outcome.output},
                                       {"data", outcome.data}}
                                      .dump();
    std::cout.flush();
    ::_exit(0);
  }
  ::setpgid(child, child);
  const auto deadline = Clock::now() + std::chrono::seconds(spec.time_limit_s);
  int status = 0;
  bool done = false;
  while (Clock::now() < deadline) {
    if (::waitpid(child, &status, WNOHANG) == child) {
      done = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling the child's exit
  }
  if (!done) {
    ::kill(-child, SIGKILL);
    ::waitpid(child, &status, 0);
    return {false,
            "time limit of " + std::to_string(spec.time_limit_s) +
                " s exceeded: the check was killed with every process it started",
            {}};
  }
  ::kill(-child, SIGKILL);  // anything it left behind
  try {
    json r = json::parse(slurp(result_path));
    return {r.at("passed"), r.at("output"), r.value("data", json())};
  } catch (const std::exception&) {
    return {false, "the check ended without a result (status " + std::to_string(status) + ")", {}};
  }
}

/// One check to run on one stage.
struct Planned {
  const CheckSpec* spec;
  StageInfo* stage;
};

/// Every check on every stage it applies to, stage by stage; throughput last, since it
/// compares stages with each other once all are measured.
std::vector<Planned> plan_checks(const std::vector<CheckSpec>& checks,
                                 std::vector<StageInfo>& stages) {
  std::vector<Planned> plan;
  for (int pass = 0; pass < 2; ++pass) {
    for (StageInfo& stage : stages) {
      for (const CheckSpec& spec : checks) {
        if ((spec.id == "throughput") != (pass == 1)) continue;
        if (spec.pool_only && !stage.pool) continue;
        plan.push_back({&spec, &stage});
      }
    }
  }
  return plan;
}

/// The progress line on stderr, with an ETA from the checks' estimates scaled by how fast the
/// estimated work has gone so far.
class Progress {
 public:
  Progress(const std::vector<Planned>& plan, Clock::time_point start)
      : start_(start), started_at_(elapsed_since(start)) {
    for (const Planned& p : plan) estimate_total_ += p.spec->estimate_s * p.spec->repeats;
  }
  void starting(const StageInfo& stage, const CheckSpec& spec, int run) const {
    const double elapsed = elapsed_since(start_);
    const double rate = estimate_done_ > 0 ? (elapsed - started_at_) / estimate_done_ : 1.0;
    const double eta = (estimate_total_ - estimate_done_) * std::max(rate, 0.5);
    std::fprintf(stderr, "[grade %7s | ETA %7s] %-18s %-17s run %d/%d\n",
                 format_duration(elapsed).c_str(), format_duration(eta).c_str(),
                 stage.dir.c_str(), spec.id.c_str(), run + 1, spec.repeats);
  }
  /// `runs` runs of `spec` are done (or will not happen).
  void done(const CheckSpec& spec, int runs) { estimate_done_ += spec.estimate_s * runs; }

 private:
  static double elapsed_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  Clock::time_point start_;
  double started_at_;
  double estimate_total_ = 0;
  double estimate_done_ = 0;
};

/// Runs `spec` on `stage` up to spec.repeats times, each in a process of its own with a log
/// folder of its own, stopping at the first failed run. Fills in `result`'s passed and output;
/// a throughput run's measurements go to `measured`.
void run_repeats(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                 const std::string& out_dir, Progress& progress,
                 std::map<std::string, json>& measured, CheckResult& result) {
  result.passed = true;
  for (int r = 0; r < spec.repeats; ++r) {
    progress.starting(stage, spec, r);
    CheckContext run_ctx = ctx;
    run_ctx.run = r;
    run_ctx.work_dir = out_dir + "/logs/" + safe_name(stage.dir) + "/" + spec.id + "-" +
                       std::to_string(r + 1);
    fs::create_directories(run_ctx.work_dir);
    RunOutcome outcome = run_isolated(spec, stage, run_ctx);
    progress.done(spec, 1);
    if (spec.repeats > 1) result.output += "--- run " + std::to_string(r + 1) + " ---\n";
    result.output += outcome.output;
    if (spec.id == "throughput") measured[stage.dir] = outcome.data;
    if (!outcome.passed) {
      result.passed = false;
      progress.done(spec, spec.repeats - r - 1);
      break;  // one failing run is enough evidence; the rest would repeat it
    }
  }
}

/// One (stage, check) graded: run, or failed for want of a build; a failure the rubric expects
/// of this stage (its lesson) is marked so.
CheckResult grade_one(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx,
                      const std::string& out_dir, Progress& progress,
                      std::map<std::string, json>& measured) {
  CheckResult result{stage.dir, spec.id, spec.name, 0, spec.points, false, spec.visibility, "", 0,
                     false};
  const auto check_start = Clock::now();
  if (!spec.stages.empty() &&
      std::find(spec.stages.begin(), spec.stages.end(), stage.number) == spec.stages.end()) {
    // Listed rather than left out, so that a reader sees it was not forgotten; out of the
    // totals, so that it costs nothing and earns nothing.
    std::string numbers;
    for (int n : spec.stages) numbers += (numbers.empty() ? "" : ", ") + std::to_string(n);
    result.not_run = true;
    result.output = "not graded on " + stage.dir + ": this check grades stage " + numbers +
                    " only (rubric.json, \"stages\"), whose code it exercises\n";
    progress.done(spec, spec.repeats);
    return result;
  }
  if (stage.binaries.count(spec.build) == 0) {
    auto errors = stage.build_errors.find(spec.build);
    result.output = "The " + spec.build + " build of " + stage.dir + " failed, so this check " +
                    "could not run. The compiler said:\n" +
                    (errors != stage.build_errors.end() ? errors->second : "(no log)");
  } else {
    run_repeats(spec, stage, ctx, out_dir, progress, measured, result);
  }
  auto lesson = spec.expected_to_fail.find(stage.dir);
  if (!result.passed && lesson != spec.expected_to_fail.end()) {
    result.expected_failure = true;
    result.output = "EXPECTED: " + lesson->second + "\n\n" + result.output;
  }
  result.score = result.passed ? spec.points : 0;
  result.seconds = std::chrono::duration<double>(Clock::now() - check_start).count();
  return result;
}

/// Adds to each throughput result (`throughput_index`: stage -> index in `results`) how the
/// stage compares with the others measured in this run, failing it where a ratio falls short.
void compare_throughput(const Rubric& rubric, const std::map<std::string, json>& measured,
                        const std::map<std::string, std::size_t>& throughput_index,
                        std::vector<CheckResult>& results) {
  auto verdicts = judge_throughput(rubric.throughput, measured);
  for (const auto& [stage, index] : throughput_index) {
    CheckResult& r = results[index];
    auto v = verdicts.find(stage);
    if (v == verdicts.end()) continue;
    r.output += v->second.output.empty()
                    ? "  (no ratio threshold names this stage in this run: the floor alone applies)\n"
                    : "\nCompared with the other stages of this run:\n" + v->second.output;
    if (!v->second.passed) r.passed = false;
    r.score = r.passed ? r.max_score : 0;
  }
}

/// Checks whose verdict is a measurement of the stage under a flood run alone, after the lanes,
/// even with --stage-lanes: throughput (requests per second, compared across stages) and
/// queue-bound (descriptors open during the flood: a load-shedding stage under a contended CPU
/// holds its shed clients a little longer, one over the bound in a first two-lane run of
/// stage 4, where it passed alone).
bool runs_alone(const CheckSpec& spec) {
  return spec.id == "throughput" || spec.id == "queue-bound";
}

json result_to_json(const CheckResult& r) {
  return {{"stage", r.stage},         {"check_id", r.check_id},   {"name", r.name},
          {"score", r.score},         {"max_score", r.max_score}, {"passed", r.passed},
          {"visibility", r.visibility}, {"output", r.output},     {"seconds", r.seconds},
          {"expected_failure", r.expected_failure}, {"not_run", r.not_run}};
}

CheckResult result_from_json(const json& j) {
  CheckResult r;
  r.stage = j.at("stage");
  r.check_id = j.at("check_id");
  r.name = j.at("name");
  r.score = j.at("score");
  r.max_score = j.at("max_score");
  r.passed = j.at("passed");
  r.visibility = j.at("visibility");
  r.output = j.at("output");
  r.seconds = j.at("seconds");
  r.expected_failure = j.at("expected_failure");
  r.not_run = j.at("not_run");
  return r;
}

/// Splits the stages over `lanes` lanes, heaviest first onto the least loaded lane (the
/// rubric's estimates), so that the lanes end at about the same time.
std::vector<std::set<std::string>> assign_lanes(const std::vector<Planned>& plan, int lanes) {
  std::map<std::string, double> cost;
  for (const Planned& p : plan) cost[p.stage->dir] += p.spec->estimate_s * p.spec->repeats;
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [dir, c] : cost) order.emplace_back(c, dir);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::set<std::string>> lane(static_cast<std::size_t>(lanes));
  std::vector<double> load(lane.size(), 0);
  for (const auto& [c, dir] : order) {
    const auto least = static_cast<std::size_t>(
        std::min_element(load.begin(), load.end()) - load.begin());
    lane[least].insert(dir);
    load[least] += c;
  }
  return lane;
}

/// Grades the planned checks that need not run alone with the stages split over ctx.lanes lane
/// processes, each grading its stages' checks one after another as the sequential loop does
/// and writing its results to a file; returns them in plan order. A lane that ends without
/// results (it cannot: grade_one catches everything) leaves its checks failed, saying so.
std::map<std::size_t, CheckResult> grade_in_lanes(const std::vector<Planned>& plan,
                                                  const CheckContext& ctx,
                                                  const std::string& out_dir,
                                                  Clock::time_point start) {
  const std::vector<std::set<std::string>> lanes = assign_lanes(plan, ctx.lanes);
  std::vector<pid_t> pids;
  std::vector<std::string> files;
  for (std::size_t l = 0; l < lanes.size(); ++l) {
    if (lanes[l].empty()) continue;
    const std::string file = out_dir + "/logs/lane-" + std::to_string(l + 1) + ".json";
    fs::create_directories(out_dir + "/logs");
    fs::remove(file);
    std::vector<Planned> mine;
    for (const Planned& p : plan) {
      if (!runs_alone(*p.spec) && lanes[l].count(p.stage->dir)) mine.push_back(p);
    }
    std::cout.flush();
    std::cerr.flush();
    const pid_t pid = ::fork();
    if (pid == 0) {
      Progress progress(mine, start);
      std::map<std::string, json> unused;
      json out = json::array();
      for (const Planned& p : mine) {
        const auto index = static_cast<std::size_t>(
            std::find_if(plan.begin(), plan.end(), [&](const Planned& q) {
              return q.spec == p.spec && q.stage == p.stage;
            }) - plan.begin());
        json r = result_to_json(grade_one(*p.spec, *p.stage, ctx, out_dir, progress, unused));
        r["index"] = index;
        out.push_back(r);
        std::ofstream(file + ".tmp") << out.dump();  // what is done so far survives a crash
        fs::rename(file + ".tmp", file);
      }
      std::cout.flush();
      std::cerr.flush();
      ::_exit(0);
    }
    if (pid > 0) {
      pids.push_back(pid);
      files.push_back(file);
    }
  }
  for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
  std::map<std::size_t, CheckResult> done;
  for (const std::string& file : files) {
    try {
      for (const json& r : json::parse(slurp(file))) done[r.at("index")] = result_from_json(r);
    } catch (const std::exception&) {
      // Missing or cut short: those checks are reported below as not graded.
    }
  }
  return done;
}

}  // namespace

/// Grades `stages` with `checks`, printing progress; returns one result per (stage, check).
std::vector<CheckResult> grade_stages(const std::vector<CheckSpec>& checks,
                                      std::vector<StageInfo>& stages, CheckContext ctx,
                                      const Rubric& rubric, const std::string& out_dir,
                                      Clock::time_point start, bool stop_at_first_failure) {
  const std::vector<Planned> plan = plan_checks(checks, stages);
  Progress progress(plan, start);
  std::vector<CheckResult> results;
  std::map<std::string, json> measured;
  std::map<std::string, std::size_t> throughput_index;
  // Lanes only when they can overlap something: two stages or more, and no early stop (the
  // mutant runs, one stage, stop at the first failure).
  std::map<std::size_t, CheckResult> from_lanes;
  const bool lanes = ctx.lanes > 1 && stages.size() > 1 && !stop_at_first_failure;
  if (lanes) {
    from_lanes = grade_in_lanes(plan, ctx, out_dir, start);
    for (const Planned& p : plan) {
      if (!runs_alone(*p.spec)) progress.done(*p.spec, p.spec->repeats);
    }
  }
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const CheckSpec& spec = *plan[i].spec;
    if (spec.id == "throughput") throughput_index[plan[i].stage->dir] = results.size();
    if (lanes && !runs_alone(spec)) {
      auto r = from_lanes.find(i);
      if (r != from_lanes.end()) {
        results.push_back(r->second);
      } else {
        results.push_back(CheckResult{plan[i].stage->dir, spec.id, spec.name, 0, spec.points,
                                      false, spec.visibility,
                                      "the grader's lane process ended before this check "
                                      "was graded (a grader bug: please report it)",
                                      0, false});
      }
      continue;
    }
    results.push_back(grade_one(spec, *plan[i].stage, ctx, out_dir, progress, measured));
    if (stop_at_first_failure && !results.back().passed) break;
  }
  if (!throughput_index.empty()) compare_throughput(rubric, measured, throughput_index, results);
  return results;
}

int exit_status(const std::vector<CheckResult>& results, bool expect_full) {
  if (expect_full) {
    for (const CheckResult& r : results) {
      if (!r.passed && !r.expected_failure && !r.not_run) return 1;
    }
  }
  return 0;
}

int grade_submission(const Session& session, const std::vector<CheckSpec>& checks) {
  const std::string& submission = session.submission;
  // Stage mode's own folder: lab mode and the mutants configure other source trees.
  const std::string build_root = session.build_root + "/stages";
  const std::string& out_dir = session.out_dir;
  const std::string& prebuilt = session.prebuilt;
  const std::string& stages_arg = session.stages_arg;
  const auto start = session.start;
  std::vector<StageInfo> stages = discover_stages(submission);
  std::set<int> numbers = parse_stage_numbers(stages_arg);
  if (!numbers.empty()) {
    std::erase_if(stages, [&](const StageInfo& s) { return !numbers.count(s.number); });
  }
  if (stages.empty()) {
    std::cerr << "grader: no stage*-* directory with a CMakeLists.txt in " << submission
              << (numbers.empty() ? "" : " matching --stages") << "\n";
    return 2;
  }
  std::set<std::string> builds;
  for (const CheckSpec& spec : checks) builds.insert(spec.build);
  builds.insert("release");  // --help tells whether a stage has a pool
  if (!prebuilt.empty()) {
    for (StageInfo& stage : stages) {
      const std::string binary = fs::absolute(fs::path(prebuilt) / stage.dir).string();
      for (const std::string& build : builds) {
        if (fs::exists(binary)) {
          stage.binaries[build] = binary;
        } else {
          stage.build_errors[build] = "no prebuilt binary " + binary;
        }
      }
    }
  } else {
    // Built from a copy, never from the submission itself: Ninja rebuilds by file times, and a
    // submission re-extracted from an archive can carry times older than the objects of its
    // last grading, so a changed file went unnoticed and the previous binary was graded.
    // copy_tree rewrites only the files whose content differs, which gives them a new time:
    // exactly what changed is compiled again, whatever times the submission's files carry.
    const std::string tree = build_root + "/src";
    copy_tree(submission, tree);
    for (const std::string& build : builds) {
      std::fprintf(stderr, "[grade %7s] building %s (%s) out of tree in %s/%s\n",
                   format_duration(std::chrono::duration<double>(Clock::now() - start).count()).c_str(),
                   submission.c_str(), build.c_str(), build_root.c_str(), build.c_str());
      // A folder configured from the submission itself, by a grader that built there.
      forget_other_source(build_root + "/" + build, tree);
      build_submission(tree, build_root + "/" + build, build, stages, session.jobs);
    }
  }
  for (StageInfo& stage : stages) {
    // From the source as well as from --help, so that a pool stage that does not compile
    // still has its pool checks, scored 0 with the compiler's errors: the maximum must not
    // depend on what compiled.
    stage.pool = declares_workers((fs::path(submission) / stage.dir).string());
    auto release = stage.binaries.find("release");
    if (release != stage.binaries.end() && !stage.pool) stage.pool = offers_workers(release->second);
  }
  std::vector<CheckResult> results =
      grade_stages(checks, stages, session.ctx, session.rubric, out_dir, start);
  // The same hints as lab mode, in their built-in wording: a trap's evidence is the same
  // whichever mode saw it, and a stage's own code (stage 4's origin limit) has no lab to word
  // them.
  for (CheckResult& r : results) {
    if (r.passed || r.not_run) continue;
    r.trap = classify_trap(r.check_id, r.output);
    if (std::string hint = trap_hint(r.check_id, r.output, json()); !hint.empty()) {
      r.output = hint + "\n\n" + r.output;
    }
  }
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << write_reports(out_dir, submission, results, total);
  std::cout.flush();
  return exit_status(results, session.expect_full);
}

}  // namespace grader
