#include "lab.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "build.h"
#include "support.h"

namespace grader {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

/// The full names of the tests `binary` runs under the gtest `filter` (--gtest_list_tests).
std::vector<std::string> gtest_list(const std::string& binary, const std::string& filter) {
  std::vector<std::string> tests;
  const std::string cmd = shell_quote(binary) + " --gtest_filter=" + shell_quote(filter) +
                          " --gtest_list_tests 2>/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return tests;
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) text.append(buf, n);
  ::pclose(pipe);
  std::stringstream in(text);
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

/// The line of a failing check's output that names the trap most likely behind it, from what
/// the output shows (a crash in pop, a hang with workers asleep), before the manifest's hint.
std::string specific_trap(const std::string& check, const std::string& output) {
  auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
  if (check == "deadlock" || check == "races" || check == "memory" || check == "shutdown") {
    if ((has("pop_front") || has("front()") || has("::pop")) &&
        (has("died") || has("SEGV") || has("crashed") || has("Segmentation") || has("Invalid read"))) {
      return "A worker crashed inside BoundedQueue::pop: it took an item from an empty queue. That is the "
             "wait under `if` instead of a loop: after a wakeup (spurious, or another worker took the item "
             "first) the predicate must be checked again.";
    }
    if (has("HUNG") && has("pthread_cond_wait")) {
      return "Every worker sleeps in a condition-variable wait while the load waits: a lost wakeup (a push "
             "that notifies nobody) or a wait whose predicate is never made true.";
    }
    if (has("lock-order-inversion") || has("opposite orders")) {
      return "Two locks are taken in opposite orders on two paths (e.g. the queue's lock inside the cache's "
             "and the cache's inside the queue's): never hold one lock while taking another.";
    }
  }
  if (check == "shutdown" && has("503")) {
    return "Queued clients did not get their 503: close() must hand the queued items back so they are "
           "answered outside the lock, and must wake every waiter.";
  }
  return "";
}

}  // namespace

/// Grades `submission` for `lab_number` with the manifest's points: the reference's tests
/// (visible and hidden) and build files are laid over a copy of the submission so that a
/// student cannot weaken them, then each test group runs test by test (a crash or a hang costs
/// one test) and the rubric checks the lab names run on its stages. Returns the exit status.
int grade_lab(const Session& session, int lab_number, const std::string& reference,
              const std::string& manifest_path, const std::set<std::string>& only_checks) {
  const std::string& submission = session.submission;
  const std::string& out_dir = session.out_dir;
  // A folder of its own per lab: CMake refuses a build folder configured from another source
  // tree, and stage mode configures from the submission itself.
  const std::string build_root = session.build_root + "/lab" + std::to_string(lab_number);
  const Rubric& rubric = session.rubric;
  const int jobs = session.jobs;
  const auto start = session.start;
  json manifest;
  try {
    std::ifstream in(manifest_path);
    manifest = json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "grader: cannot read the lab manifest " << manifest_path << ": " << e.what() << "\n";
    return 2;
  }
  const json* lab = nullptr;
  if (manifest.contains("labs") && manifest["labs"].is_array()) {
    for (const json& l : manifest["labs"]) {
      if (l.value("number", 0) == lab_number) lab = &l;
    }
  }
  if (!lab) {
    std::cerr << "grader: " << manifest_path << " has no lab " << lab_number << "\n";
    return 2;
  }
  const std::string lab_name = fs::path(lab->value("dir", "lab" + std::to_string(lab_number))).filename().string();
  auto elapsed = [&] { return format_duration(std::chrono::duration<double>(Clock::now() - start).count()); };

  // The tree that is built: the submission, with the reference's tests and build files on top.
  const fs::path tree = fs::path(build_root) / "src";
  std::fprintf(stderr, "[grade %7s] %s: copying %s to %s, then the reference's %s\n", elapsed().c_str(),
               lab_name.c_str(), submission.c_str(), tree.c_str(),
               manifest.value("overlay", json::array()).dump().c_str());
  copy_tree(submission, tree);
  for (const json& p : manifest.value("overlay", json::array())) {
    overlay(fs::path(reference) / p.get<std::string>(), tree / p.get<std::string>());
  }

  std::vector<CheckResult> results;
  // ---- the lab's tests, built with the reference's test sources
  const std::string tests_build = build_root + "/tests";
  fs::create_directories(tests_build);
  const std::string build_log = tests_build + "/build.log";
  std::fprintf(stderr, "[grade %7s] %s: building the tests (unit_tests, blackbox_tests) in %s\n",
               elapsed().c_str(), lab_name.c_str(), tests_build.c_str());
  const std::string configure = "cmake -S " + shell_quote(tree.string()) + " -B " + shell_quote(tests_build) +
                                " -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANITIZER= -DPROXY_BUILD_TESTS=ON > " +
                                shell_quote(build_log) + " 2>&1";
  const std::string build = "cmake --build " + shell_quote(tests_build) + " --target unit_tests blackbox_tests -j " +
                            std::to_string(jobs) + " >> " + shell_quote(build_log) + " 2>&1";
  const bool built = std::system(configure.c_str()) == 0 && std::system(build.c_str()) == 0;
  for (const json& group : lab->at("tests")) {
    CheckResult r{lab_name, group.at("id"), group.value("name", group.at("id").get<std::string>()), 0,
                  group.value("points", 0.0), false, group.value("visibility", "visible"), "", 0, false};
    const auto group_start = Clock::now();
    if (!built) {
      r.output = "The tests did not build, so this group could not run. The compiler said:\n" +
                 compiler_errors(slurp(build_log));
    } else {
      const std::string binary = tests_build + "/bin/" + group.at("binary").get<std::string>();
      const std::vector<std::string> tests = gtest_list(binary, group.at("filter"));
      std::size_t passed = 0;
      std::string failures;
      const std::string log_dir = out_dir + "/logs/" + lab_name + "/" + r.check_id;
      fs::create_directories(log_dir);
      std::fprintf(stderr, "[grade %7s] %s: %-18s %zu tests\n", elapsed().c_str(), lab_name.c_str(),
                   r.check_id.c_str(), tests.size());
      for (const std::string& test : tests) {
        const std::string log = log_dir + "/" + safe_name(test) + ".log";
        // One process per test, with a time limit: a crash or a hang fails that test alone.
        const std::string cmd = "timeout -s KILL 180 " + shell_quote(binary) + " --gtest_filter=" +
                                shell_quote(test) + " > " + shell_quote(log) + " 2>&1 < /dev/null";
        const int status = std::system(cmd.c_str());
        const std::string text = slurp(log);
        const bool skipped = text.find("[  SKIPPED ]") != std::string::npos;
        if (status == 0 && !skipped) {
          ++passed;
          continue;
        }
        std::string why = skipped ? "SKIPPED (a skip is not a pass)"
                          : WIFEXITED(status) && WEXITSTATUS(status) == 137 ? "KILLED after 180 s (a hang?)"
                                                                             : "FAILED";
        failures += "--- " + test + ": " + why + "\n" + tail(text, 3000) + "\n";
      }
      r.passed = !tests.empty() && passed == tests.size();
      // Whole points, rounded down: the table shows integers, and 32 of 33 is not full marks.
      r.score = tests.empty() ? 0 : std::floor(r.max_score * static_cast<double>(passed) / tests.size());
      r.output = std::to_string(passed) + " of " + std::to_string(tests.size()) + " tests passed (" +
                 group.at("binary").get<std::string>() + " --gtest_filter='" + group.at("filter").get<std::string>() +
                 "')\n" + (tests.empty() ? "No test matches this filter: the test sources were not the reference's.\n" : "") +
                 failures;
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - group_start).count();
    results.push_back(r);
  }

  // ---- the rubric's checks the lab names, on the lab's stages
  std::vector<CheckSpec> checks;
  for (const json& c : lab->value("checks", json::array())) {
    const std::string id = c.at("id");
    if (!only_checks.empty() && !only_checks.count(id)) continue;
    auto spec = std::find_if(rubric.checks.begin(), rubric.checks.end(), [&](const CheckSpec& s) { return s.id == id; });
    if (spec == rubric.checks.end()) {
      std::cerr << "grader: lab " << lab_number << " names check '" << id << "', which the rubric lacks\n";
      return 2;
    }
    CheckSpec lab_spec = *spec;
    lab_spec.points = c.value("points", spec->points);
    lab_spec.visibility = c.value("visibility", spec->visibility);
    checks.push_back(lab_spec);
  }
  if (!checks.empty()) {
    std::vector<StageInfo> stages;
    std::set<std::string> wanted;
    for (const json& s : lab->value("stages", json::array())) wanted.insert(s.get<std::string>());
    for (StageInfo& s : discover_stages(tree.string())) {
      if (wanted.count(s.dir)) stages.push_back(s);
    }
    std::set<std::string> builds;
    for (const CheckSpec& spec : checks) builds.insert(spec.build);
    for (StageInfo& stage : stages) {
      // The tests' build is a release build of every stage: no need for a second one.
      const fs::path binary = fs::path(tests_build) / "bin" / stage.dir;
      if (built && fs::exists(binary)) stage.binaries["release"] = binary.string();
    }
    for (const std::string& b : builds) {
      if (b == "release" && std::all_of(stages.begin(), stages.end(), [](const StageInfo& s) { return s.binaries.count("release") > 0; })) {
        continue;
      }
      std::fprintf(stderr, "[grade %7s] %s: building the stages (%s) in %s/%s\n", elapsed().c_str(),
                   lab_name.c_str(), b.c_str(), build_root.c_str(), b.c_str());
      build_submission(tree.string(), build_root + "/" + b, b, stages, jobs);
    }
    for (StageInfo& stage : stages) {
      auto release = stage.binaries.find("release");
      if (release != stage.binaries.end()) stage.pool = offers_workers(release->second);
    }
    const json hints = lab->value("trap_hints", json::object());
    for (CheckResult r : grade_stages(checks, stages, session.ctx, rubric, out_dir, start)) {
      if (!r.passed) {
        std::string hint = specific_trap(r.check_id, r.output);
        const std::string general = hints.value(r.check_id, "");
        if (!hint.empty() || !general.empty()) {
          r.output = "LIKELY TRAP: " + (hint.empty() ? general : hint + "\n" + general) + "\n\n" + r.output;
        }
      }
      results.push_back(r);
    }
  }

  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "Lab " << lab_number << " (" << lab->value("title", "") << ")\n"
            << write_reports(out_dir, submission, results, total);
  if (lab->contains("written")) {
    const json& w = lab->at("written");
    std::cout << "Not scored here: the written part (" << w.value("points", 0) << " points, "
              << w.value("file", "") << "), " << w.value("graded", "graded by hand") << ".\n";
  }
  std::cout.flush();
  return exit_status(results, session.expect_full);
}

}  // namespace grader
