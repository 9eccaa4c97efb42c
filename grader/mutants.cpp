#include "mutants.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "build.h"
#include "support.h"
#include "traps.h"

namespace grader {
namespace {

namespace fs = std::filesystem;

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

/// Why `patch` refuses `patch_path` on `tree`, file by file ("stage3-pool/main.cpp: Hunk #2
/// FAILED at 32"), or "" when it applies exactly: no fuzz, so a hunk whose context drifted is
/// refused rather than planted in the wrong place; a shifted line number is fine.
std::string patch_problems(const std::string& tree, const std::string& patch_path, bool dry_run) {
  // patch(1) takes input with no hunk at all as applied (an empty file: exit 0): it plants
  // nothing, so a mutant graded with it would be the reference itself.
  if (patched_files(slurp(patch_path)).empty()) {
    return "  " + patch_path + ": patches no file (no '+++ ' line: not a unified diff)\n";
  }
  // Its own 2>&1: run_capture's applies to the echo alone, and patch says "malformed patch" and
  // "Only garbage was found" on stderr.
  const std::string out = run_capture("patch " + std::string(dry_run ? "--dry-run " : "") +
                                      "--fuzz=0 --no-backup-if-mismatch -p1 -d " +
                                      shell_quote(tree) + " -i " + shell_quote(patch_path) +
                                      " 2>&1 && echo PATCH-APPLIED");
  if (out.find("PATCH-APPLIED") != std::string::npos) return "";
  std::string problems, file;
  std::stringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("checking file ", 0) == 0) file = line.substr(14);
    if (line.rfind("patching file ", 0) == 0) file = line.substr(14);
    if (line.find("FAILED") != std::string::npos || line.find("can't find file") != std::string::npos ||
        line.find("No such file") != std::string::npos || line.find("malformed") != std::string::npos ||
        line.find("Only garbage") != std::string::npos) {
      problems += "  " + (file.empty() ? std::string() : file + ": ") + line + "\n";
    }
  }
  return problems.empty() ? out : problems;
}

}  // namespace

int check_mutants_apply(const Session& session) {
  int drifted = 0;
  for (const MutantSpec& m : session.rubric.mutants) {
    const std::string patch_path = (fs::path(session.rubric.directory) / m.patch).string();
    std::string problems;
    if (!fs::exists(patch_path)) {
      problems = "  no patch file " + patch_path + "\n";
    } else if (m.lab_test.empty() &&
               std::none_of(session.rubric.checks.begin(), session.rubric.checks.end(),
                            [&](const CheckSpec& c) { return c.id == m.check; })) {
      problems = "  the check '" + m.check + "' meant to catch it is not in the rubric\n";
    } else {
      problems = patch_problems(session.submission, patch_path, /*dry_run=*/true);
    }
    if (problems.empty()) {
      std::printf("mutant %-22s applies to %s%s\n", m.name.c_str(),
                  [&] {
                    std::string files;
                    for (const std::string& f : patched_files(slurp(patch_path))) files += f + " ";
                    return files;
                  }().c_str(),
                  m.lab_test.empty() ? "" : ("(graded by " + m.lab_test + ")").c_str());
    } else {
      ++drifted;
      std::printf("mutant %s DRIFTED (%s no longer applies to %s):\n%s", m.name.c_str(),
                  m.patch.c_str(), session.submission.c_str(), problems.c_str());
    }
  }
  std::printf("%s\n", drifted == 0 ? "every mutant applies cleanly"
                                    : "re-describe each drifted bug on today's code: edit a copy, "
                                      "then diff -r -U2 (see grader/README.md, \"Mutants\")");
  return drifted == 0 ? 0 : 1;
}

namespace {

/// What grading one planted mutant showed.
struct MutantVerdict {
  bool ok = true;       ///< caught by its check, by every `also` check, and no wrong hint
  std::string summary;  ///< "caught; hint lost-wakeup" or why not
  std::string details;  ///< each check's output, for report.md
};

/// The rubric checks `m` is graded with: its own, then `also`, then `watch`; nullopt when one
/// is not in the rubric (said on stderr).
std::optional<std::vector<CheckSpec>> mutant_checks(const MutantSpec& m, const Rubric& rubric) {
  std::vector<CheckSpec> specs;
  std::vector<std::string> ids{m.check};
  ids.insert(ids.end(), m.also.begin(), m.also.end());
  ids.insert(ids.end(), m.watch.begin(), m.watch.end());
  for (const std::string& id : ids) {
    auto it = std::find_if(rubric.checks.begin(), rubric.checks.end(),
                           [&](const CheckSpec& c) { return c.id == id; });
    if (it == rubric.checks.end()) {
      std::cerr << "grader: mutant " << m.name << ": check '" << id << "' is not in the rubric\n";
      return std::nullopt;
    }
    specs.push_back(*it);
  }
  return specs;
}

/// Builds the mutant tree's stage (m.stage) in every build `specs` need and grades it with them: the
/// mutant's own check and each `also` must fail, and no failed check's hint may name a trap
/// other than `m.trap` (the own check's must name it, when it is set).
MutantVerdict grade_mutant(const MutantSpec& m, const std::vector<CheckSpec>& specs,
                           const fs::path& tree, const Session& session) {
  MutantVerdict verdict;
  std::vector<StageInfo> stages;
  for (StageInfo& s : discover_stages(tree.string())) {
    if (s.number == m.stage) stages.push_back(s);
  }
  std::set<std::string> builds{"release"};
  for (const CheckSpec& spec : specs) builds.insert(spec.build);
  for (const std::string& b : builds) {
    build_submission(tree.string(), (fs::path(session.build_root) / "mutants" / b).string(), b,
                     stages, session.jobs);
  }
  if (stages.empty() || stages[0].binaries.count("release") == 0) {
    // A mutant that does not compile proves nothing about the checks: it escaped.
    return {false, "NOT CAUGHT (the mutant did not build)", ""};
  }
  stages[0].pool = offers_workers(stages[0].binaries.at("release"));
  const auto results = grade_stages(specs, stages, session.ctx, session.rubric,
                                    session.out_dir + "/mutants/" + m.name, session.start);
  for (const CheckResult& r : results) {
    const bool must_fail = r.check_id == m.check ||
                           std::find(m.also.begin(), m.also.end(), r.check_id) != m.also.end();
    const std::string trap = r.passed ? "" : classify_trap(r.check_id, r.output);
    std::string note = r.check_id + (r.passed ? " passed" : " failed");
    if (!trap.empty()) note += " (hint: " + trap + ")";
    if (must_fail && r.passed) {
      verdict.ok = false;
      note += " — NOT CAUGHT";
    }
    if (!trap.empty() && trap != m.trap) {
      verdict.ok = false;
      note += " — WRONG HINT (expected " + (m.trap.empty() ? std::string("none") : m.trap) + ")";
    }
    if (r.check_id == m.check && !r.passed && !m.trap.empty() && trap != m.trap) {
      verdict.ok = false;
      note += " — NO HINT naming " + m.trap;
    }
    verdict.summary += (verdict.summary.empty() ? "" : "; ") + note;
    const std::string hint = r.passed ? "" : trap_hint(r.check_id, r.output, nlohmann::json());
    verdict.details += "### " + r.check_id + ": " + (r.passed ? "pass" : "FAIL") + "\n\n```\n" +
                       (hint.empty() ? "" : hint + "\n\n") + r.output + "```\n\n";
  }
  return verdict;
}

}  // namespace

int grade_mutants(const Session& session, const std::set<std::string>& wanted) {
  const Rubric& rubric = session.rubric;
  const auto elapsed = [&] {
    return format_duration(std::chrono::duration<double>(Clock::now() - session.start).count());
  };
  // A misspelt MUTANTS=name would grade nothing and pass, as --checks refuses an unknown id.
  for (const std::string& name : wanted) {
    if (name != "all" && std::none_of(rubric.mutants.begin(), rubric.mutants.end(),
                                      [&](const MutantSpec& m) { return m.name == name; })) {
      std::cerr << "grader: the rubric has no mutant '" << name << "'\n";
      return 2;
    }
  }
  const fs::path tree = fs::path(session.build_root) / "mutants" / "src";
  copy_tree(session.submission, tree);  // also undoes whatever mutant a previous run left planted
  std::vector<std::string> previous;
  std::string table = "| mutant | check meant to catch it | verdict |\n| --- | --- | --- |\n";
  std::string details;
  int escaped = 0;
  for (const MutantSpec& m : rubric.mutants) {
    if (!wanted.count("all") && !wanted.count(m.name)) continue;
    // Undo the previous mutant; copies get a new mtime, so the incremental build notices.
    for (const std::string& file : previous) {
      fs::copy_file(fs::path(session.submission) / file, tree / file,
                    fs::copy_options::overwrite_existing);
    }
    previous.clear();
    const std::string patch_path = (fs::path(rubric.directory) / m.patch).string();
    if (!m.lab_test.empty()) {
      // No stage check can see this bug (rubric.json says why): stage mode does not claim it.
      // Its patch must still apply, so that the lab test's self-test plants the same bug.
      if (std::string problems = patch_problems(tree.string(), patch_path, true); !problems.empty()) {
        std::cerr << "grader: mutant " << m.name << ": " << m.patch << " does not apply:\n" << problems;
        return 2;
      }
      const std::string where = "not graded in stage mode; caught by " + m.lab_test;
      table += "| " + m.name + " | " + m.lab_test + " | not graded in stage mode |\n";
      std::printf("%-22s -> %s\n", m.name.c_str(), where.c_str());
      std::fflush(stdout);
      details += "## " + m.name + ": " + where + "\n\n" + m.description + "\n\n";
      continue;
    }
    previous = patched_files(slurp(patch_path));
    const std::optional<std::vector<CheckSpec>> specs = mutant_checks(m, rubric);
    if (!specs) return 2;
    if (std::string problems = patch_problems(tree.string(), patch_path, false); !problems.empty()) {
      std::cerr << "grader: mutant " << m.name << ": " << m.patch << " does not apply:\n" << problems;
      return 2;
    }
    std::fprintf(stderr, "[mutants %7s] %s: building, then checks %s\n", elapsed().c_str(),
                 m.name.c_str(), m.check.c_str());
    const MutantVerdict v = grade_mutant(m, *specs, tree, session);
    if (!v.ok) ++escaped;
    const std::string word = v.ok ? "caught: " : "FAILED: ";
    table += "| " + m.name + " | " + m.check + " | " + word + v.summary + " |\n";
    std::printf("%-22s -> %-17s -> %s%s\n", m.name.c_str(), m.check.c_str(), word.c_str(),
                v.summary.c_str());
    std::fflush(stdout);
    details += "## " + m.name + " -> " + m.check + ": " + word + v.summary + "\n\n" +
               m.description + "\n\n" + v.details;
  }
  fs::create_directories(fs::path(session.out_dir) / "mutants");
  std::ofstream(fs::path(session.out_dir) / "mutants" / "report.md")
      << "# Mutants: each planted bug, the checks that must catch it and the hint it must get\n\n"
      << table << "\n" << details;
  std::printf("\n%s(details: %s/mutants/report.md; %s)\n", table.c_str(), session.out_dir.c_str(),
              elapsed().c_str());
  return escaped == 0 ? 0 : 1;
}

}  // namespace grader
