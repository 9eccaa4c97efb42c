#include "lab.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "build.h"
#include "evidence.h"
#include "run_command.h"
#include "support.h"
#include "traps.h"

namespace grader {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

/// The full names of the tests `binary` runs under the gtest `filter` (--gtest_list_tests).
std::vector<std::string> gtest_list(const std::string& binary, const std::string& filter) {
  std::vector<std::string> tests;
  const std::string cmd = shell_quote(binary) + " --gtest_filter=" + shell_quote(filter) +
                          " --gtest_list_tests 2>/dev/null";
  std::stringstream in(harness::run_command(cmd).text);
  std::string suite;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::stringstream words(line);
    std::string first;
    words >> first;
    if (line[0] != ' ') {
      suite = first;  // "Suite." or "Prefix/Suite." (a comment may follow)
    } else if (!suite.empty()) {
      tests.push_back(suite + first);
    }
  }
  return tests;
}

/// One lab of the manifest, and where it is built.
struct LabRun {
  const json* lab = nullptr;
  std::string name;         ///< e.g. "lab3-pool"
  std::string build_root;   ///< this lab's own build folder
  fs::path tree;            ///< the submission with the reference's tests laid over it
  std::string tests_build;  ///< the tests' build (also a release build of every stage)
  bool built = false;       ///< whether the tests built
  bool hidden_here = true;  ///< whether the reference holds the lab's hidden test sources
};

std::string elapsed_since(Clock::time_point start) {
  return format_duration(std::chrono::duration<double>(Clock::now() - start).count());
}

/// Configures and builds unit_tests and blackbox_tests from the lab's tree. With a
/// `reuse_build` (the submission's own build: a self-grade), every object whose compile command
/// and sources are that build's is copied from it (labs/tools/plan-reuse.sh plans, the launcher
/// labs/tools/reuse-object.sh copies; both from the reference's labs/tools, laid over the tree);
/// without one the plan is empty and everything compiles.
bool build_tests(const LabRun& run, const std::string& submission, const std::string& reuse_build,
                 int jobs) {
  fs::create_directories(run.tests_build);
  const std::string log = run.tests_build + "/build.log";
  const std::string tools = (run.tree / "labs" / "tools").string();
  const std::string reuse = run.tests_build + "/reuse";
  const bool can_reuse = fs::exists(tools + "/reuse-object.sh") && fs::exists(tools + "/plan-reuse.sh");
  const std::string launcher =
      can_reuse ? " " + shell_quote("-DCMAKE_CXX_COMPILER_LAUNCHER=sh;" + tools + "/reuse-object.sh;" + reuse)
                : std::string();
  const std::string configure = "cmake -S " + shell_quote(run.tree.string()) + " -B " +
                                shell_quote(run.tests_build) +
                                " -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANITIZER= "
                                "-DPROXY_BUILD_TESTS=ON" + launcher + " > " + shell_quote(log) + " 2>&1";
  if (std::system(configure.c_str()) != 0) return false;
  fs::remove_all(reuse);
  if (can_reuse && !reuse_build.empty()) {
    const std::string plan = "sh " + shell_quote(tools + "/plan-reuse.sh") + " " +
                             shell_quote(reuse_build) + " " + shell_quote(submission) + " " +
                             shell_quote(run.tree.string()) + " " + shell_quote(run.tests_build) +
                             " " + shell_quote(reuse) + " >> " + shell_quote(log) + " 2>&1";
    if (std::system(plan.c_str()) != 0) fs::remove_all(reuse);  // then everything compiles
    std::size_t reused = 0;
    std::error_code ec;
    for (fs::directory_iterator it(reuse + "/d", ec), end; !ec && it != end; it.increment(ec)) ++reused;
    std::fprintf(stderr, "[grade] %zu objects of the tests' build are copied from %s\n", reused,
                 reuse_build.c_str());
  }
  const std::string build = "cmake --build " + shell_quote(run.tests_build) +
                            " --target unit_tests blackbox_tests -j " + std::to_string(jobs) +
                            " >> " + shell_quote(log) + " 2>&1";
  return std::system(build.c_str()) == 0;
}

/// Runs each test of one group in a process of its own, with a time limit: a crash or a hang
/// fails that test alone. Fills in `r`'s score (whole points, rounded down) and output.
void run_test_group(const json& group, const LabRun& run, const std::string& out_dir,
                    Clock::time_point start, int jobs, CheckResult& r) {
  const std::string binary = run.tests_build + "/bin/" + group.at("binary").get<std::string>();
  const std::vector<std::string> tests = gtest_list(binary, group.at("filter"));
  const std::string command = group.at("binary").get<std::string>() + " --gtest_filter='" +
                              group.at("filter").get<std::string>() + "'";
  if (tests.empty() && r.visibility == "hidden" && !run.hidden_here) {
    // A handout: its hidden tests ship only with the course's grader.
    r.not_run = true;
    r.output = "Not run here: the hidden tests are not in this tree; they run when your "
               "submission is graded (" + std::to_string(static_cast<int>(r.max_score)) +
               " points). Not counted in the total above.\n";
    return;
  }
  std::size_t passed = 0;
  std::vector<FailedTest> failures;
  const std::string log_dir = out_dir + "/logs/" + run.name + "/" + r.check_id;
  fs::create_directories(log_dir);
  std::fprintf(stderr, "[grade %7s] %s: %-18s %zu tests\n", elapsed_since(start).c_str(),
               run.name.c_str(), r.check_id.c_str(), tests.size());
  // `jobs` tests at a time, as ctest -j runs them: the tests are written to run side by side.
  std::vector<int> statuses(tests.size(), -1);
  std::atomic<std::size_t> next{0};
  auto run_tests = [&] {
    for (std::size_t i = next++; i < tests.size(); i = next++) {
      const std::string cmd = "timeout -s KILL 180 " + shell_quote(binary) + " --gtest_filter=" +
                              shell_quote(tests[i]) + " > " +
                              shell_quote(log_dir + "/" + safe_name(tests[i]) + ".log") +
                              " 2>&1 < /dev/null";
      statuses[i] = std::system(cmd.c_str());
    }
  };
  std::vector<std::thread> runners;
  for (int k = 1; k < jobs; ++k) runners.emplace_back(run_tests);
  run_tests();
  for (std::thread& t : runners) t.join();
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const std::string& test = tests[i];
    const std::string log = log_dir + "/" + safe_name(test) + ".log";
    const int status = statuses[i];
    const std::string text = slurp(log);
    const bool skipped = text.find("[  SKIPPED ]") != std::string::npos;
    if (status == 0 && !skipped) {
      ++passed;
      continue;
    }
    std::string why = skipped ? "SKIPPED (a skip is not a pass)"
                      : WIFEXITED(status) && WEXITSTATUS(status) == 137 ? "KILLED after 180 s (a hang?)"
                                                                         : "FAILED";
    failures.push_back({test, why, log, text});
  }
  r.passed = !tests.empty() && passed == tests.size();
  // Whole points, rounded down: the table shows integers, and 32 of 33 is not full marks.
  r.score = tests.empty() ? 0 : std::floor(r.max_score * static_cast<double>(passed) / tests.size());
  r.output = std::to_string(passed) + " of " + std::to_string(tests.size()) + " tests passed (" +
             command + ")\n" +
             (tests.empty() ? "No test matches this filter: the test sources were not the reference's.\n"
                            : "") +
             condense_failures(failures);
}

/// The rubric's checks the lab names, with the lab's points; nullopt when one is not in the
/// rubric (said on stderr).
std::optional<std::vector<CheckSpec>> lab_checks(const json& lab, const Rubric& rubric,
                                                  const std::set<std::string>& only_checks) {
  std::vector<CheckSpec> checks;
  for (const json& c : lab.value("checks", json::array())) {
    const std::string id = c.at("id");
    if (!only_checks.empty() && !only_checks.count(id)) continue;
    auto spec = std::find_if(rubric.checks.begin(), rubric.checks.end(),
                             [&](const CheckSpec& s) { return s.id == id; });
    if (spec == rubric.checks.end()) {
      std::cerr << "grader: lab " << lab.value("number", 0) << " names check '" << id
                << "', which the rubric lacks\n";
      return std::nullopt;
    }
    CheckSpec lab_spec = *spec;
    lab_spec.points = c.value("points", spec->points);
    lab_spec.visibility = c.value("visibility", spec->visibility);
    checks.push_back(lab_spec);
  }
  return checks;
}

/// Builds the lab's stages in the builds `checks` need (the tests' build serves as the release
/// one) and grades them; a failed check's output starts with the trap its evidence points at.
std::vector<CheckResult> run_lab_checks(const std::vector<CheckSpec>& checks, const LabRun& run,
                                        const Session& session) {
  std::vector<StageInfo> stages;
  std::set<std::string> wanted;
  for (const json& s : run.lab->value("stages", json::array())) wanted.insert(s.get<std::string>());
  for (StageInfo& s : discover_stages(run.tree.string())) {
    if (wanted.count(s.dir)) stages.push_back(s);
  }
  std::set<std::string> builds;
  for (const CheckSpec& spec : checks) builds.insert(spec.build);
  for (StageInfo& stage : stages) {
    const fs::path binary = fs::path(run.tests_build) / "bin" / stage.dir;
    if (run.built && fs::exists(binary)) stage.binaries["release"] = binary.string();
  }
  for (const std::string& b : builds) {
    if (b == "release" && std::all_of(stages.begin(), stages.end(), [](const StageInfo& s) {
          return s.binaries.count("release") > 0;
        })) {
      continue;
    }
    std::fprintf(stderr, "[grade %7s] %s: building the stages (%s) in %s/%s\n",
                 elapsed_since(session.start).c_str(), run.name.c_str(), b.c_str(),
                 run.build_root.c_str(), b.c_str());
    build_submission(run.tree.string(), run.build_root + "/" + b, b, stages, session.jobs);
  }
  for (StageInfo& stage : stages) {
    auto release = stage.binaries.find("release");
    if (release != stage.binaries.end()) stage.pool = offers_workers(release->second);
    // The manifest names this lab's checks: one that needs a pool still counts when the
    // stage did not build (it scores 0 with the compiler's errors), so the total stays 100.
    if (release == stage.binaries.end()) stage.pool = true;
  }
  const json hints = run.lab->value("trap_hints", json::object());
  std::vector<CheckResult> results =
      grade_stages(checks, stages, session.ctx, session.rubric, session.out_dir, session.start);
  for (CheckResult& r : results) {
    if (r.passed || r.not_run) continue;
    r.trap = classify_trap(r.check_id, r.output);
    if (std::string hint = trap_hint(r.check_id, r.output, hints); !hint.empty()) {
      r.output = hint + "\n\n" + r.output;
    }
  }
  return results;
}

/// Lab `number` of the manifest at `path`; nullopt when it cannot be read (said on stderr).
std::optional<json> load_lab(const std::string& path, int number) {
  json manifest;
  try {
    std::ifstream in(path);
    manifest = json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "grader: cannot read the lab manifest " << path << ": " << e.what() << "\n";
    return std::nullopt;
  }
  for (const json& l : manifest.value("labs", json::array())) {
    if (l.value("number", 0) == number) {
      json lab = l;
      lab["overlay"] = manifest.value("overlay", json::array());
      return lab;
    }
  }
  std::cerr << "grader: " << path << " has no lab " << number << "\n";
  return std::nullopt;
}

/// The lab's tree in `build_root`/src (a copy of `session.submission` with the reference's
/// tests and build files laid over it, so that a student cannot weaken them) and its tests'
/// build. Only what changed since the last call compiles: the copy rewrites only files whose
/// content differs. `reuse_source` is the tree `session.reuse_build` is a build of.
LabRun prepare_lab(const json& lab, int lab_number, const Session& session,
                   const std::string& reference, const std::string& build_root,
                   const std::string& reuse_source) {
  LabRun run;
  run.lab = &lab;
  run.name = fs::path(lab.value("dir", "lab" + std::to_string(lab_number))).filename().string();
  run.build_root = build_root;
  run.tree = fs::path(run.build_root) / "src";
  run.tests_build = run.build_root + "/tests";
  for (const json& hidden : lab.value("hidden_sources", json::array())) {
    if (!fs::exists(fs::path(reference) / hidden.get<std::string>())) run.hidden_here = false;
  }
  std::fprintf(stderr, "[grade %7s] %s: copying %s to %s, then the reference's %s\n",
               elapsed_since(session.start).c_str(), run.name.c_str(), session.submission.c_str(),
               run.tree.c_str(), lab.at("overlay").dump().c_str());
  copy_tree(session.submission, run.tree);
  for (const json& p : lab.at("overlay")) {
    overlay(fs::path(reference) / p.get<std::string>(), run.tree / p.get<std::string>());
  }
  std::fprintf(stderr, "[grade %7s] %s: building the tests (unit_tests, blackbox_tests) in %s\n",
               elapsed_since(session.start).c_str(), run.name.c_str(), run.tests_build.c_str());
  run.built = build_tests(run, reuse_source, session.reuse_build, session.jobs);
  return run;
}

/// One grading of a prepared lab: each test group test by test (a crash or a hang costs one
/// test), then the rubric checks the lab names on its stages; logs under `session.out_dir`.
std::vector<CheckResult> grade_prepared_lab(const LabRun& run, const std::vector<CheckSpec>& checks,
                                            const Session& session) {
  std::vector<CheckResult> results;
  for (const json& group : run.lab->at("tests")) {
    CheckResult r{run.name, group.at("id"), group.value("name", group.at("id").get<std::string>()),
                  0, group.value("points", 0.0), false, group.value("visibility", "visible"), "", 0,
                  false};
    const auto group_start = Clock::now();
    if (!run.built) {
      r.output = "The tests did not build, so this group could not run. The compiler said:\n" +
                 compiler_errors(slurp(run.tests_build + "/build.log"));
    } else {
      run_test_group(group, run, session.out_dir, session.start, session.jobs, r);
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - group_start).count();
    results.push_back(r);
  }
  if (!checks.empty()) {
    for (CheckResult& r : run_lab_checks(checks, run, session)) results.push_back(r);
  }
  return results;
}

}  // namespace

/// Grades `submission` for `lab_number` with the manifest's points: the reference's tests
/// (visible and hidden) and build files are laid over a copy of it, then the test groups and
/// the lab's checks run (grade_prepared_lab). Returns the exit status.
int grade_lab(const Session& session, int lab_number, const std::string& reference,
              const std::string& manifest_path, const std::set<std::string>& only_checks) {
  const std::optional<json> lab = load_lab(manifest_path, lab_number);
  if (!lab) return 2;
  const std::optional<std::vector<CheckSpec>> checks =
      lab_checks(*lab, session.rubric, only_checks);
  if (!checks) return 2;
  // A folder of its own per lab: CMake refuses a build folder configured from another source
  // tree, and stage mode configures from the submission itself.
  const LabRun run =
      prepare_lab(*lab, lab_number, session, reference,
                  session.build_root + "/lab" + std::to_string(lab_number), session.submission);
  const std::vector<CheckResult> results = grade_prepared_lab(run, *checks, session);

  const double total = std::chrono::duration<double>(Clock::now() - session.start).count();
  std::cout << "Lab " << lab_number << " (" << lab->value("title", "") << ")\n"
            << write_reports(session.out_dir, session.submission, results, total);
  if (lab->contains("written")) {
    const json& w = lab->at("written");
    std::cout << "Not scored here: the written part (" << w.value("points", 0) << " points, "
              << w.value("file", "") << "), " << w.value("graded", "graded by hand") << ".\n";
  }
  std::cout.flush();
  return exit_status(results, session.expect_full);
}

std::optional<std::vector<std::vector<CheckResult>>> grade_lab_runs(
    const Session& session, int lab_number, const std::string& reference,
    const std::string& manifest_path, const std::string& build_root,
    const std::string& reuse_source, int repeats) {
  const std::optional<json> lab = load_lab(manifest_path, lab_number);
  if (!lab) return std::nullopt;
  const std::optional<std::vector<CheckSpec>> checks = lab_checks(*lab, session.rubric, {});
  if (!checks) return std::nullopt;
  const LabRun run = prepare_lab(*lab, lab_number, session, reference, build_root, reuse_source);
  std::vector<std::vector<CheckResult>> runs;
  for (int k = 1; k <= repeats; ++k) {
    Session each = session;
    each.out_dir = session.out_dir + "/run" + std::to_string(k);
    fs::create_directories(each.out_dir);
    const auto run_start = Clock::now();
    runs.push_back(grade_prepared_lab(run, *checks, each));
    write_reports(each.out_dir, session.submission, runs.back(),
                  std::chrono::duration<double>(Clock::now() - run_start).count());
  }
  return runs;
}

}  // namespace grader
