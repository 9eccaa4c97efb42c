#include "grade.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "build.h"
#include "support.h"

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

}  // namespace

/// Grades `stages` with `checks`, printing progress; returns one result per (stage, check).
std::vector<CheckResult> grade_stages(const std::vector<CheckSpec>& checks,
                                      std::vector<StageInfo>& stages, CheckContext ctx,
                                      const Rubric& rubric, const std::string& out_dir,
                                      Clock::time_point start, bool stop_at_first_failure) {
  struct Planned {
    const CheckSpec* spec;
    StageInfo* stage;
  };
  std::vector<Planned> plan;
  // Throughput last: it compares stages with each other once all are measured.
  for (int pass = 0; pass < 2; ++pass) {
    for (StageInfo& stage : stages) {
      for (const CheckSpec& spec : checks) {
        if ((spec.id == "throughput") != (pass == 1)) continue;
        if (spec.pool_only && !stage.pool) continue;
        plan.push_back({&spec, &stage});
      }
    }
  }
  double estimate_total = 0;
  for (const Planned& p : plan) estimate_total += p.spec->estimate_s * p.spec->repeats;
  double estimate_done = 0;
  const double started_at = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<CheckResult> results;
  std::map<std::string, json> measured;
  std::map<std::string, std::size_t> throughput_index;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const CheckSpec& spec = *plan[i].spec;
    StageInfo& stage = *plan[i].stage;
    CheckResult result{stage.dir, spec.id, spec.name, 0, spec.points, false, spec.visibility, "", 0,
                       false};
    const auto check_start = Clock::now();
    auto built = stage.binaries.find(spec.build);
    if (built == stage.binaries.end()) {
      auto errors = stage.build_errors.find(spec.build);
      result.output = "The " + spec.build + " build of " + stage.dir + " failed, so this check " +
                      "could not run. The compiler said:\n" +
                      (errors != stage.build_errors.end() ? errors->second : "(no log)");
    } else {
      std::string outputs;
      bool passed = true;
      for (int r = 0; r < spec.repeats; ++r) {
        double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        double rate = estimate_done > 0 ? (elapsed - started_at) / estimate_done : 1.0;
        double eta = (estimate_total - estimate_done) * std::max(rate, 0.5);
        std::fprintf(stderr, "[grade %7s | ETA %7s] %-18s %-17s run %d/%d\n",
                     format_duration(elapsed).c_str(), format_duration(eta).c_str(),
                     stage.dir.c_str(), spec.id.c_str(), r + 1, spec.repeats);
        CheckContext run_ctx = ctx;
        run_ctx.run = r;
        run_ctx.work_dir = out_dir + "/logs/" + safe_name(stage.dir) + "/" + spec.id + "-" +
                           std::to_string(r + 1);
        fs::create_directories(run_ctx.work_dir);
        RunOutcome outcome = run_isolated(spec, stage, run_ctx);
        estimate_done += spec.estimate_s;
        if (spec.repeats > 1) outputs += "--- run " + std::to_string(r + 1) + " ---\n";
        outputs += outcome.output;
        if (spec.id == "throughput") measured[stage.dir] = outcome.data;
        if (!outcome.passed) {
          passed = false;
          estimate_done += spec.estimate_s * (spec.repeats - r - 1);
          break;  // one failing run is enough evidence; the rest would repeat it
        }
      }
      result.passed = passed;
      result.output = outputs;
    }
    auto lesson = spec.expected_to_fail.find(stage.dir);
    if (!result.passed && lesson != spec.expected_to_fail.end()) {
      result.expected_failure = true;
      result.output = "EXPECTED: " + lesson->second + "\n\n" + result.output;
    }
    result.score = result.passed ? spec.points : 0;
    result.seconds = std::chrono::duration<double>(Clock::now() - check_start).count();
    if (spec.id == "throughput") throughput_index[stage.dir] = results.size();
    results.push_back(result);
    if (stop_at_first_failure && !result.passed) break;
  }
  if (!throughput_index.empty()) {
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
  (void)rubric;
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
    for (const std::string& build : builds) {
      std::fprintf(stderr, "[grade %7s] building %s (%s) out of tree in %s/%s\n",
                   format_duration(std::chrono::duration<double>(Clock::now() - start).count()).c_str(),
                   submission.c_str(), build.c_str(), build_root.c_str(), build.c_str());
      build_submission(submission, build_root + "/" + build, build, stages, session.jobs);
    }
  }
  for (StageInfo& stage : stages) {
    auto release = stage.binaries.find("release");
    if (release != stage.binaries.end()) stage.pool = offers_workers(release->second);
  }
  std::vector<CheckResult> results =
      grade_stages(checks, stages, session.ctx, session.rubric, out_dir, start);
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << write_reports(out_dir, submission, results, total);
  std::cout.flush();
  return exit_status(results, session.expect_full);
}

}  // namespace grader
