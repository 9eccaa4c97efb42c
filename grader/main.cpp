// grader: builds a submission out of tree and grades each of its stages against
// grader/rubric.json, or (--mutants) proves the checks can fail by grading planted-bug
// variants of stage 3. See README.md, "Grading".
#include <CLI/CLI.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "grader.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

using grader::CheckResult;
using grader::CheckSpec;
using grader::RunOutcome;
using grader::StageInfo;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "NAME-HASH" for a submission's canonical path: the folder's name for people, and a 64-bit
// FNV-1a hash of the whole path (stable across runs and compilers) so two students' folders
// with the same name never share a build.
std::string build_folder_name(const std::string& canonical_submission) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : canonical_submission) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  std::string name = fs::path(canonical_submission).filename().string();
  if (name.empty()) name = "root";
  return name + "-" + std::string(hex, 8);
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  }
  return buf;
}

/// The compiler's complaints from a build log: each line naming an error with a little
/// context, at most `max_lines`.
std::string compiler_errors(const std::string& log, std::size_t max_lines = 80) {
  std::stringstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  std::size_t kept = 0;
  std::set<std::size_t> shown;
  for (std::size_t i = 0; i < lines.size() && kept < max_lines; ++i) {
    if (lines[i].find("error") == std::string::npos && lines[i].find("Error") == std::string::npos)
      continue;
    for (std::size_t j = i == 0 ? 0 : i - 1; j < std::min(lines.size(), i + 4); ++j) {
      if (shown.insert(j).second && kept < max_lines) {
        out += lines[j] + "\n";
        ++kept;
      }
    }
  }
  if (out.empty()) {
    out = lines.size() > max_lines ? "...\n" : "";
    for (std::size_t i = lines.size() > max_lines ? lines.size() - max_lines : 0; i < lines.size(); ++i)
      out += lines[i] + "\n";
  }
  return out;
}

/// Stage directories of `root`: stage*-* holding a CMakeLists.txt, sorted.
std::vector<StageInfo> discover_stages(const std::string& root) {
  std::vector<StageInfo> stages;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("stage", 0) != 0 || name.find('-') == std::string::npos ||
        !fs::exists(entry.path() / "CMakeLists.txt")) {
      continue;
    }
    StageInfo stage;
    stage.dir = name;
    stage.number = std::atoi(name.c_str() + 5);
    stages.push_back(stage);
  }
  std::sort(stages.begin(), stages.end(),
            [](const StageInfo& a, const StageInfo& b) { return a.dir < b.dir; });
  return stages;
}

/// Configures `source` into `dir` for `build` and builds each stage's target; fills in the
/// binaries that built and the errors of those that did not. Never writes into `source`.
void build_submission(const std::string& source, const std::string& dir, const std::string& build,
                      std::vector<StageInfo>& stages, int jobs) {
  fs::create_directories(dir);
  const std::string type = build == "debug" ? "Debug" : "RelWithDebInfo";
  const std::string sanitizer = build == "tsan" ? "thread" : "";
  const std::string configure_log = dir + "/configure.log";
  std::string cmd = "cmake -S " + shell_quote(source) + " -B " + shell_quote(dir) +
                    " -G Ninja -DCMAKE_BUILD_TYPE=" + type + " -DSANITIZER=" + sanitizer +
                    " -DPROXY_BUILD_TESTS=OFF > " + shell_quote(configure_log) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    std::string errors = compiler_errors(slurp(configure_log));
    for (StageInfo& stage : stages) stage.build_errors[build] = "cmake could not configure:\n" + errors;
    return;
  }
  for (StageInfo& stage : stages) {
    const std::string log = dir + "/build-" + stage.dir + ".log";
    std::string b = "cmake --build " + shell_quote(dir) + " --target " + stage.dir + " -j " +
                    std::to_string(jobs) + " > " + shell_quote(log) + " 2>&1";
    const std::string binary = dir + "/bin/" + stage.dir;
    if (std::system(b.c_str()) == 0 && fs::exists(binary)) {
      stage.binaries[build] = fs::absolute(binary).string();
    } else {
      stage.build_errors[build] = compiler_errors(slurp(log));
    }
  }
}

bool offers_workers(const std::string& binary) {
  std::string cmd = shell_quote(binary) + " --help 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return false;
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  ::pclose(pipe);
  return out.find("--workers") != std::string::npos;
}

/// Runs one repeat of a check in a child process of its own (its own process group), so that
/// a hang anywhere is ended by the time limit: the whole group, stage processes included, is
/// killed and the check fails.
RunOutcome run_isolated(const CheckSpec& spec, const StageInfo& stage, const grader::CheckContext& ctx) {
  const std::string result_path = ctx.work_dir + "/result.json";
  fs::remove(result_path);
  std::cout.flush();
  std::cerr.flush();
  pid_t child = ::fork();
  if (child < 0) return {false, "the grader could not fork", {}};
  if (child == 0) {
    ::setpgid(0, 0);
    RunOutcome outcome = grader::run_check_once(spec, stage, ctx);
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

std::string safe_name(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  }
  return s;
}

/// Grades `stages` with `checks`, printing progress; returns one result per (stage, check).
std::vector<CheckResult> grade(const std::vector<CheckSpec>& checks, std::vector<StageInfo>& stages,
                               grader::CheckContext ctx, const grader::Rubric& rubric,
                               const std::string& out_dir, Clock::time_point start,
                               bool stop_at_first_failure = false) {
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
        grader::CheckContext run_ctx = ctx;
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
    auto verdicts = grader::judge_throughput(rubric.throughput, measured);
    for (const auto& [stage, index] : throughput_index) {
      CheckResult& r = results[index];
      auto v = verdicts.find(stage);
      if (v == verdicts.end()) continue;
      r.output += v->second.output.empty()
                      ? "  (no ratio threshold names this stage: measured for comparison only)\n"
                      : "\nCompared with the other stages of this run:\n" + v->second.output;
      if (!v->second.passed) r.passed = false;
      r.score = r.passed ? r.max_score : 0;
    }
  }
  (void)rubric;
  return results;
}

std::set<int> parse_stage_numbers(const std::string& list) {
  std::set<int> numbers;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) numbers.insert(std::atoi(item.c_str()));
  }
  return numbers;
}

std::set<std::string> parse_list(const std::string& list) {
  std::set<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.insert(item);
  }
  return items;
}

/// Makes `to` a copy of the source tree `from`, leaving out build products and version control.
/// Files whose content is already there are left alone, so their mtimes stay and a rerun rebuilds
/// incrementally; files in `to` that `from` does not have are removed, so that a file a
/// resubmission dropped cannot linger, and a test file a student adds under an overlaid folder
/// (tests/) cannot pad the lab's test groups.
void copy_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  std::vector<fs::path> extra;
  for (auto it = fs::recursive_directory_iterator(to); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path relative = fs::relative(it->path(), to);
    const std::string top = relative.begin()->string();
    if (top == "build" || top == "results" || top == ".git" || !fs::exists(from / relative)) {
      if (it->is_directory()) it.disable_recursion_pending();
      if (!fs::exists(from / relative)) extra.push_back(it->path());
    }
  }
  for (const fs::path& path : extra) fs::remove_all(path);
  for (auto it = fs::recursive_directory_iterator(from); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path relative = fs::relative(it->path(), from);
    const std::string top = relative.begin()->string();
    if (top == "build" || top == "results" || top == ".git") {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    const fs::path target = to / relative;
    if (it->is_directory()) {
      fs::create_directories(target);
    } else if (it->is_regular_file()) {
      if (fs::exists(target) && slurp(target.string()) == slurp(it->path().string())) continue;
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing);
    }
  }
}

/// Files a unified diff changes ("+++ b/PATH" lines).
std::vector<std::string> patched_files(const std::string& patch) {
  std::vector<std::string> files;
  std::stringstream in(patch);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("+++ ", 0) == 0) {
      std::string path = line.substr(4);
      path = path.substr(0, path.find('\t'));
      if (path.rfind("b/", 0) == 0) path = path.substr(2);
      files.push_back(path);
    }
  }
  return files;
}

// ---- lab mode (--lab N): labs/manifest.json's tests and checks for one lab ----------------------

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

std::string last_bytes(const std::string& text, std::size_t max) {
  return text.size() <= max ? text : "...\n" + text.substr(text.size() - max);
}

/// Copies `from` (a file or a tree) over `to`, replacing what is there.
void overlay(const fs::path& from, const fs::path& to) {
  if (fs::is_directory(from)) {
    copy_tree(from, to);
  } else if (fs::exists(from)) {
    fs::create_directories(to.parent_path());
    if (!fs::exists(to) || slurp(to.string()) != slurp(from.string())) {
      fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    }
  }
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

/// Grades `submission` for `lab_number` with the manifest's points: the reference's tests
/// (visible and hidden) and build files are laid over a copy of the submission so that a
/// student cannot weaken them, then each test group runs test by test (a crash or a hang costs
/// one test) and the rubric checks the lab names run on its stages. Returns the exit status.
int grade_lab(int lab_number, const std::string& submission, const std::string& reference,
              const std::string& manifest_path, const std::string& out_dir,
              const std::string& build_root, const grader::Rubric& rubric,
              const grader::CheckContext& ctx, const std::set<std::string>& only_checks, int jobs,
              bool expect_full, Clock::time_point start) {
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
        failures += "--- " + test + ": " + why + "\n" + last_bytes(text, 3000) + "\n";
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
    for (CheckResult r : grade(checks, stages, ctx, rubric, out_dir, start)) {
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
            << grader::write_reports(out_dir, submission, results, total);
  if (lab->contains("written")) {
    const json& w = lab->at("written");
    std::cout << "Not scored here: the written part (" << w.value("points", 0) << " points, "
              << w.value("file", "") << "), " << w.value("graded", "graded by hand") << ".\n";
  }
  std::cout.flush();
  if (expect_full) {
    for (const CheckResult& r : results) {
      if (!r.passed && !r.expected_failure) return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"grader: builds a submission out of tree and grades each stage against the "
               "rubric (correctness, concurrency, cache, shutdown, races, deadlocks, memory, "
               "throughput); with --mutants, grades planted-bug variants of stage 3 instead",
               "grader"};
  std::string submission = ".";
  std::string stages_arg;
  std::string checks_arg;
  std::string rubric_path = GRADER_RUBRIC;
  std::string out_dir = "results/grade";
  std::string build_root;
  std::string prebuilt;
  std::string mutants_arg;
  std::string gdb = "gdb";
  int lab = 0;
  bool quick = false;
  bool expect_full = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--submission", submission, "The tree to grade (this repository's layout)")
      ->capture_default_str();
  app.add_option("--stages", stages_arg, "Stage numbers to grade, e.g. 1,3 (default: every stage)");
  std::string manifest_path = std::string(GRADER_REFERENCE) + "/labs/manifest.json";
  app.add_option("--lab", lab,
                 "Grade the submission as lab N of labs/manifest.json: the reference's tests "
                 "(visible and hidden) laid over it, the lab's test groups and checks, its points");
  app.add_option("--manifest", manifest_path, "The labs' manifest (with --lab)")->capture_default_str();
  app.add_option("--checks", checks_arg, "Only these check ids, e.g. correctness,cache");
  app.add_option("--rubric", rubric_path, "Points, visibility, repeats, time limits, thresholds")
      ->capture_default_str();
  app.add_option("--out", out_dir, "Where report.md, results.json, junit.xml and logs go")
      ->capture_default_str();
  app.add_option("--build-dir", build_root,
                 "Out-of-tree builds of the submission (default OUT/build/NAME-HASH, one per "
                 "submission path)");
  app.add_option("--prebuilt", prebuilt,
                 "Grade the stage binaries in this directory instead of building (every check "
                 "uses them as they are: no TSan unless they were built with it)");
  app.add_option("--mutants", mutants_arg,
                 "Grade planted-bug variants of stage 3: 'all' or a comma list of names; prints "
                 "mutant -> check -> caught, exits 1 if any escaped");
  app.add_option("--gdb", gdb, "Debugger the hang watchdog attaches")->capture_default_str();
  app.add_option("-j,--jobs", jobs, "Parallel compile jobs")->capture_default_str();
  app.add_flag("--quick", quick, "One repeat per check and shorter loads (the QUICK=1 budget)");
  app.add_flag("--expect-full-marks", expect_full,
               "Exit 1 unless every check passed or failed as the rubric expects (self-tests)");
  CLI11_PARSE(app, argc, argv);

  const auto start = Clock::now();
  grader::Rubric rubric;
  try {
    rubric = grader::load_rubric(rubric_path, quick);
  } catch (const std::exception& e) {
    std::cerr << "grader: " << e.what() << "\n";
    return 2;
  }
  if (!fs::is_directory(submission)) {
    std::cerr << "grader: no submission directory " << submission << "\n";
    return 2;
  }
  submission = fs::canonical(submission).string();
  fs::create_directories(out_dir);
  out_dir = fs::canonical(out_dir).string();
  // One build folder per submission: CMake refuses a build folder configured from another
  // source tree, so a shared one would fail every submission graded after the first.
  if (build_root.empty()) build_root = out_dir + "/build/" + build_folder_name(submission);
  ::signal(SIGPIPE, SIG_IGN);

  grader::CheckContext ctx;
  ctx.gdb = gdb;
  ctx.quick = quick;
  ctx.throughput = rubric.throughput;

  std::vector<CheckSpec> checks;
  const std::set<std::string> only = parse_list(checks_arg);
  for (const CheckSpec& spec : rubric.checks) {
    if (only.empty() || only.count(spec.id)) checks.push_back(spec);
  }
  for (const std::string& id : only) {
    if (std::none_of(checks.begin(), checks.end(), [&](const CheckSpec& c) { return c.id == id; })) {
      std::cerr << "grader: the rubric has no check '" << id << "'\n";
      return 2;
    }
  }

  // ---- mutants -------------------------------------------------------------------------------
  if (!mutants_arg.empty()) {
    std::set<std::string> wanted = parse_list(mutants_arg);
    const fs::path tree = fs::path(out_dir) / "mutants" / "src";
    copy_tree(submission, tree);  // also undoes whatever mutant a previous run left planted
    std::vector<std::string> previous;
    std::string table = "| mutant | check meant to catch it | caught |\n| --- | --- | --- |\n";
    std::string details;
    int escaped = 0;
    for (const grader::MutantSpec& m : rubric.mutants) {
      if (!wanted.count("all") && !wanted.count(m.name)) continue;
      // Undo the previous mutant; copies get a new mtime, so the incremental build notices.
      for (const std::string& file : previous) {
        fs::copy_file(fs::path(submission) / file, tree / file, fs::copy_options::overwrite_existing);
      }
      const std::string patch_path = (fs::path(rubric.directory) / m.patch).string();
      previous = patched_files(slurp(patch_path));
      std::string apply = "patch -s -p1 -d " + shell_quote(tree.string()) + " < " +
                          shell_quote(patch_path) + " 2>&1";
      auto spec_it = std::find_if(rubric.checks.begin(), rubric.checks.end(),
                                  [&](const CheckSpec& c) { return c.id == m.check; });
      if (spec_it == rubric.checks.end() || std::system(apply.c_str()) != 0) {
        std::cerr << "grader: mutant " << m.name << ": patch does not apply or check '" << m.check
                  << "' is not in the rubric\n";
        return 2;
      }
      std::fprintf(stderr, "[mutants %7s] %s: building, then check %s\n",
                   format_duration(std::chrono::duration<double>(Clock::now() - start).count()).c_str(),
                   m.name.c_str(), m.check.c_str());
      std::vector<StageInfo> stages;
      for (StageInfo& s : discover_stages(tree.string())) {
        if (s.number == 3) stages.push_back(s);
      }
      if (stages.empty()) {
        std::cerr << "grader: the submission has no stage 3 to plant bugs in\n";
        return 2;
      }
      build_submission(tree.string(), (fs::path(out_dir) / "mutants" / "build" / spec_it->build).string(),
                       spec_it->build, stages, jobs);
      if (stages[0].binaries.count("release") == 0 && spec_it->build != "release") {
        build_submission(tree.string(), (fs::path(out_dir) / "mutants" / "build" / "release").string(),
                         "release", stages, jobs);
      }
      auto bin = stages[0].binaries.begin();
      if (bin != stages[0].binaries.end()) stages[0].pool = offers_workers(bin->second);
      auto results = grade({*spec_it}, stages, ctx, rubric, out_dir + "/mutants/" + m.name, start, true);
      bool caught = !results.empty() && !results[0].passed;
      bool built = stages[0].binaries.count(spec_it->build) > 0;
      if (!caught) ++escaped;
      std::string verdict = !built ? "caught (did not build)" : caught ? "caught" : "NOT CAUGHT";
      table += "| " + m.name + " | " + m.check + " | " + verdict + " |\n";
      std::printf("%-22s -> %-17s -> %s\n", m.name.c_str(), m.check.c_str(), verdict.c_str());
      std::fflush(stdout);
      details += "## " + m.name + " -> " + m.check + ": " + verdict + "\n\n" + m.description +
                 "\n\n```\n" + (results.empty() ? std::string() : results[0].output) + "```\n\n";
    }
    std::ofstream(fs::path(out_dir) / "mutants" / "report.md")
        << "# Mutants: each planted bug and the check that must catch it\n\n" << table << "\n"
        << details;
    std::printf("\n%s(details: %s/mutants/report.md; %s)\n", table.c_str(), out_dir.c_str(),
                format_duration(std::chrono::duration<double>(Clock::now() - start).count()).c_str());
    return escaped == 0 ? 0 : 1;
  }

  if (lab > 0) {
    return grade_lab(lab, submission, GRADER_REFERENCE, manifest_path, out_dir, build_root, rubric,
                     ctx, only, jobs, expect_full, start);
  }

  // ---- the submission --------------------------------------------------------------------------
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
      build_submission(submission, build_root + "/" + build, build, stages, jobs);
    }
  }
  for (StageInfo& stage : stages) {
    auto release = stage.binaries.find("release");
    if (release != stage.binaries.end()) stage.pool = offers_workers(release->second);
  }
  std::vector<CheckResult> results = grade(checks, stages, ctx, rubric, out_dir, start);
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << grader::write_reports(out_dir, submission, results, total);
  std::cout.flush();
  if (expect_full) {
    for (const CheckResult& r : results) {
      if (!r.passed && !r.expected_failure) return 1;
    }
  }
  return 0;
}
