#include "mutants.h"

#include <algorithm>
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
  const std::string out = run_capture("patch " + std::string(dry_run ? "--dry-run " : "") +
                                      "--fuzz=0 --no-backup-if-mismatch -p1 -d " +
                                      shell_quote(tree) + " -i " + shell_quote(patch_path) +
                                      " && echo PATCH-APPLIED");
  if (out.find("PATCH-APPLIED") != std::string::npos) return "";
  std::string problems, file;
  std::stringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("checking file ", 0) == 0) file = line.substr(14);
    if (line.rfind("patching file ", 0) == 0) file = line.substr(14);
    if (line.find("FAILED") != std::string::npos || line.find("can't find file") != std::string::npos ||
        line.find("No such file") != std::string::npos || line.find("malformed") != std::string::npos) {
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
    } else if (std::none_of(session.rubric.checks.begin(), session.rubric.checks.end(),
                            [&](const CheckSpec& c) { return c.id == m.check; })) {
      problems = "  the check '" + m.check + "' meant to catch it is not in the rubric\n";
    } else {
      problems = patch_problems(session.submission, patch_path, /*dry_run=*/true);
    }
    if (problems.empty()) {
      std::printf("mutant %-22s applies to %s\n", m.name.c_str(),
                  [&] {
                    std::string files;
                    for (const std::string& f : patched_files(slurp(patch_path))) files += f + " ";
                    return files;
                  }().c_str());
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

int grade_mutants(const Session& session, const std::set<std::string>& wanted) {
  const std::string& submission = session.submission;
  const std::string& out_dir = session.out_dir;
  const Rubric& rubric = session.rubric;
  const CheckContext& ctx = session.ctx;
  const int jobs = session.jobs;
  const auto start = session.start;
  const fs::path tree = fs::path(session.build_root) / "mutants" / "src";
  copy_tree(submission, tree);  // also undoes whatever mutant a previous run left planted
  std::vector<std::string> previous;
  std::string table = "| mutant | check meant to catch it | caught |\n| --- | --- | --- |\n";
  std::string details;
  int escaped = 0;
  for (const MutantSpec& m : rubric.mutants) {
    if (!wanted.count("all") && !wanted.count(m.name)) continue;
    // Undo the previous mutant; copies get a new mtime, so the incremental build notices.
    for (const std::string& file : previous) {
      fs::copy_file(fs::path(submission) / file, tree / file, fs::copy_options::overwrite_existing);
    }
    const std::string patch_path = (fs::path(rubric.directory) / m.patch).string();
    previous = patched_files(slurp(patch_path));
    auto spec_it = std::find_if(rubric.checks.begin(), rubric.checks.end(),
                                [&](const CheckSpec& c) { return c.id == m.check; });
    if (spec_it == rubric.checks.end()) {
      std::cerr << "grader: mutant " << m.name << ": check '" << m.check << "' is not in the rubric\n";
      return 2;
    }
    if (std::string problems = patch_problems(tree.string(), patch_path, false); !problems.empty()) {
      std::cerr << "grader: mutant " << m.name << ": " << m.patch << " does not apply:\n" << problems;
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
    build_submission(tree.string(), (fs::path(session.build_root) / "mutants" / spec_it->build).string(),
                     spec_it->build, stages, jobs);
    if (stages[0].binaries.count("release") == 0 && spec_it->build != "release") {
      build_submission(tree.string(), (fs::path(session.build_root) / "mutants" / "release").string(),
                       "release", stages, jobs);
    }
    auto bin = stages[0].binaries.begin();
    if (bin != stages[0].binaries.end()) stages[0].pool = offers_workers(bin->second);
    auto results = grade_stages({*spec_it}, stages, ctx, rubric, out_dir + "/mutants/" + m.name, start, true);
    bool caught = !results.empty() && !results[0].passed;
    bool built = stages[0].binaries.count(spec_it->build) > 0;
    // A mutant that does not compile proves nothing about the check: it escaped.
    if (!caught || !built) ++escaped;
    std::string verdict = !built ? "NOT CAUGHT (the mutant did not build)" : caught ? "caught" : "NOT CAUGHT";
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

}  // namespace grader
