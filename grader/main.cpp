// grader: builds a submission out of tree and grades each of its stages against
// grader/rubric.json, or (--lab N) grades it as a lab of labs/manifest.json, or (--mutants)
// proves the checks can fail by grading planted-bug variants of stages 3 and 4. This file only
// reads the command line and dispatches: stage mode is grade.cpp, lab mode lab.cpp, mutants
// mutants.cpp, the builds build.cpp, the checks checks*.cpp. See grader/README.md.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "build.h"
#include "grade.h"
#include "lab.h"
#include "mutants.h"
#include "support.h"

namespace fs = std::filesystem;

namespace {

/// The command line, as given.
struct Args {
  std::string submission = ".";
  std::string stages;
  std::string checks;
  std::string rubric = GRADER_RUBRIC;
  std::string out_dir = "results/grade";
  std::string build_root;
  std::string prebuilt;
  std::string reuse_build;
  std::string mutants;
  std::string gdb = "gdb";
  std::string manifest = std::string(GRADER_REFERENCE) + "/labs/manifest.json";
  int lab = 0;
  int stage_lanes = 1;
  int repeat = 1;
  bool mutants_apply = false;
  bool quick = false;
  bool expect_full = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--submission", a.submission, "The tree to grade (this repository's layout)")
      ->capture_default_str();
  app.add_option("--stages", a.stages, "Stage numbers to grade, e.g. 1,3 (default: every stage)");
  app.add_option("--lab", a.lab,
                 "Grade the submission as lab N of labs/manifest.json: the reference's tests "
                 "(visible and hidden) laid over it, the lab's test groups and checks, its points");
  app.add_option("--manifest", a.manifest, "The labs' manifest (with --lab)")->capture_default_str();
  app.add_option("--checks", a.checks, "Only these check ids, e.g. correctness,cache");
  app.add_option("--rubric", a.rubric, "Points, visibility, repeats, time limits, thresholds")
      ->capture_default_str();
  app.add_option("--out", a.out_dir, "Where report.md, results.json, junit.xml and logs go")
      ->capture_default_str();
  app.add_option("--build-dir", a.build_root,
                 "Out-of-tree builds of the submission, with stages/, labN/ and mutants/ inside "
                 "(default $XDG_CACHE_HOME or ~/.cache, /proxy-grader/NAME-HASH: one per "
                 "submission path, outside the submission)");
  app.add_option("--prebuilt", a.prebuilt,
                 "Grade the stage binaries in this directory instead of building (every check "
                 "uses them as they are: no TSan unless they were built with it)");
  app.add_option("--reuse-build", a.reuse_build,
                 "Lab mode: the submission's own ninja build (e.g. its build/release); each object "
                 "of the tests' build whose compile command and sources are that build's is "
                 "copied from it instead of compiled (labs/tools/plan-reuse.sh). For a self-grade "
                 "only: objects are trusted as they are");
  app.add_option("--mutants", a.mutants,
                 "Grade planted-bug variants of stages 3 and 4: 'all' or a comma list of names; "
                 "prints mutant -> check -> caught, exits 1 if any escaped");
  app.add_option("--repeat", a.repeat,
                 "With --mutants: grade the reference and each mutant N times (stage and lab "
                 "mode); a score that differs between runs fails, naming the tree")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--mutants-apply", a.mutants_apply,
               "Only check that every mutant's patch applies exactly to the submission (fast: "
               "nothing is built); names the mutant and file of each that drifted, exits 1");
  app.add_option("--gdb", a.gdb, "Debugger the hang watchdog attaches")->capture_default_str();
  app.add_option("-j,--jobs", a.jobs, "Parallel compile jobs, and in lab mode how many tests of a group run at once")->capture_default_str();
  app.add_option("--stage-lanes", a.stage_lanes,
                 "Grade up to N stages at once (stage mode), each stage's checks one after "
                 "another; throughput and queue-bound (measurements under a flood) run alone "
                 "after them. On N cores, N lanes cost about what N other processes running "
                 "beside the grader would")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--quick", a.quick, "One repeat per check and shorter loads (the QUICK=1 budget)");
  app.add_flag("--expect-full-marks", a.expect_full,
               "Exit 1 unless every check passed or failed as the rubric expects (self-tests)");
}

/// Where builds go by default: outside any submission, so that grading leaves no build folders
/// (hundreds of MB) in a student's tree. $XDG_CACHE_HOME or ~/.cache, else /tmp.
std::string default_build_parent() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/proxy-grader";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/proxy-grader";
  }
  return "/tmp/proxy-grader-" + std::to_string(::getuid());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"grader: builds a submission out of tree and grades each stage against the "
               "rubric (correctness, concurrency, cache, shutdown, races, deadlocks, memory, "
               "throughput); with --mutants, grades planted-bug variants of stages 3 and 4 instead",
               "grader"};
  Args args;
  add_options(app, args);
  CLI11_PARSE(app, argc, argv);

  grader::Session session;
  session.start = grader::Clock::now();
  try {
    session.rubric = grader::load_rubric(args.rubric, args.quick);
  } catch (const std::exception& e) {
    std::cerr << "grader: " << e.what() << "\n";
    return 2;
  }
  if (!fs::is_directory(args.submission)) {
    std::cerr << "grader: no submission directory " << args.submission << "\n";
    return 2;
  }
  session.submission = fs::canonical(args.submission).string();
  fs::create_directories(args.out_dir);
  session.out_dir = fs::canonical(args.out_dir).string();
  // One build folder per submission: CMake refuses a build folder configured from another
  // source tree, so a shared one would fail every submission graded after the first. Inside
  // it, each mode has its own (stages/, labN/, mutants/).
  session.build_root = args.build_root.empty() ? default_build_parent() + "/" +
                                                     grader::build_folder_name(session.submission)
                                               : args.build_root;
  if (args.prebuilt.empty() && !args.mutants_apply) {
    std::fprintf(stderr, "[grade] builds in %s (outside the submission; delete it to reclaim the "
                         "space), reports and logs in %s\n",
                 session.build_root.c_str(), session.out_dir.c_str());
  }
  session.prebuilt = args.prebuilt;
  if (!args.reuse_build.empty() && fs::exists(args.reuse_build)) {
    session.reuse_build = fs::canonical(args.reuse_build).string();
  }
  session.stages_arg = args.stages;
  session.jobs = args.jobs;
  session.expect_full = args.expect_full;
  session.ctx.gdb = args.gdb;
  session.ctx.quick = args.quick;
  session.ctx.lanes = args.stage_lanes;
  session.ctx.throughput = session.rubric.throughput;
  ::signal(SIGPIPE, SIG_IGN);

  std::vector<grader::CheckSpec> checks;
  const std::set<std::string> only = grader::parse_list(args.checks);
  for (const grader::CheckSpec& spec : session.rubric.checks) {
    if (only.empty() || only.count(spec.id)) checks.push_back(spec);
  }
  for (const std::string& id : only) {
    if (std::none_of(checks.begin(), checks.end(), [&](const auto& c) { return c.id == id; })) {
      std::cerr << "grader: the rubric has no check '" << id << "'\n";
      return 2;
    }
  }
  if (args.mutants_apply) return grader::check_mutants_apply(session, args.manifest);
  if (!args.mutants.empty()) {
    return grader::grade_mutants(session, grader::parse_list(args.mutants), GRADER_REFERENCE,
                                 args.manifest, args.repeat);
  }
  if (args.lab > 0) {
    return grader::grade_lab(session, args.lab, GRADER_REFERENCE, args.manifest, only);
  }
  return grader::grade_submission(session, checks);
}
