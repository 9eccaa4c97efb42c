#include "mutants.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "build.h"
#include "lab.h"
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

namespace {

using json = nlohmann::json;

/// The manifest's labs (labs/manifest.json), or nullopt when it cannot be read (said on stderr).
std::optional<json> load_labs(const std::string& manifest_path) {
  try {
    std::ifstream in(manifest_path);
    return json::parse(in).value("labs", json::array());
  } catch (const std::exception& e) {
    std::cerr << "grader: cannot read the lab manifest " << manifest_path << ": " << e.what()
              << "\n";
    return std::nullopt;
  }
}

/// The labs that grade mutant `m`, whose patch changes `files`: every lab one of whose
/// graded_files it changes (a student's submission of that lab can hold this bug), and every
/// lab whose trap_hints word its trap (the lab's checks claim to catch it: hit-drops-unsent
/// breaks common/poller/serve_hit_now.cpp, which no lab hands out, but a lab 4 submission is a whole
/// tree and lab 4's slow-reader check grades it). Derived, not declared, so that a new mutant
/// of a lab's file cannot skip lab mode.
std::vector<int> grading_labs(const MutantSpec& m, const std::vector<std::string>& files,
                              const json& labs) {
  std::vector<int> numbers;
  for (const json& lab : labs) {
    const std::vector<std::string> graded = lab.value("graded_files", std::vector<std::string>{});
    const bool touches = std::any_of(files.begin(), files.end(), [&](const std::string& f) {
      return std::find(graded.begin(), graded.end(), f) != graded.end();
    });
    const bool hints = !m.trap.empty() && lab.value("trap_hints", json::object()).contains(m.trap);
    if (touches || hints) numbers.push_back(lab.value("number", 0));
  }
  return numbers;
}

std::string lab_list(const std::vector<int>& labs) {
  std::string text;
  for (int n : labs) text += (text.empty() ? "lab " : ", ") + std::to_string(n);
  return text;
}

}  // namespace

int check_mutants_apply(const Session& session, const std::string& manifest_path) {
  const std::optional<json> labs = load_labs(manifest_path);
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
      const std::vector<std::string> files = patched_files(slurp(patch_path));
      std::string where;
      for (const std::string& f : files) where += f + " ";
      if (!m.lab_test.empty()) where += "(graded by " + m.lab_test + ") ";
      if (labs) {
        const std::vector<int> numbers = grading_labs(m, files, *labs);
        where += numbers.empty()      ? "(stage mode only)"
                 : m.lab_test.empty() ? "(and in " + lab_list(numbers) + " mode)"
                                      : "(" + lab_list(numbers) + " mode only)";
      }
      std::printf("mutant %-22s applies to %s\n", m.name.c_str(), where.c_str());
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

/// Points as a reader writes them: "30", "7.5".
std::string format_number(double points) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", points);
  return text;
}

/// What grading one tree (a mutant, or the reference) in one mode showed, over every repeat.
struct ModeVerdict {
  bool ok = true;                 ///< every run as required, and the same score in each
  std::vector<std::string> runs;  ///< each run's one-line summary
  std::vector<double> scores;     ///< each run's points
  double max_score = 0;
  std::string details;  ///< the outputs worth reading, for report.md
};

/// "30 of 50" or, over repeats, "30, 30, 25 of 50".
std::string scores_text(const ModeVerdict& v) {
  if (v.scores.empty()) return "—";
  std::string text;
  for (double s : v.scores) text += (text.empty() ? "" : ", ") + format_number(s);
  return text + " of " + format_number(v.max_score);
}

/// The runs' summaries: one when every run said the same, else each run's.
std::string runs_text(const ModeVerdict& v) {
  if (std::all_of(v.runs.begin(), v.runs.end(),
                  [&](const std::string& r) { return r == v.runs[0]; })) {
    return v.runs.empty() ? "" : v.runs[0];
  }
  std::string text;
  for (std::size_t i = 0; i < v.runs.size(); ++i) {
    text += (i ? " / " : "") + std::string("run ") + std::to_string(i + 1) + ": " + v.runs[i];
  }
  return text;
}

/// Fails `v` when its runs did not score alike: the same submission must get the same grade.
void require_same_scores(ModeVerdict& v) {
  if (v.scores.size() > 1 &&
      std::any_of(v.scores.begin(), v.scores.end(), [&](double s) { return s != v.scores[0]; })) {
    v.ok = false;
    v.runs.push_back("SCORE DIFFERS between runs (" + scores_text(v) + ")");
  }
}

/// Points earned and possible over `results`, leaving out what did not run here.
std::pair<double, double> points_of(const std::vector<CheckResult>& results) {
  double score = 0, max = 0;
  for (const CheckResult& r : results) {
    if (r.not_run) continue;
    score += r.score;
    max += r.max_score;
  }
  return {score, max};
}

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

/// Builds stage `number` of `tree` in every build `specs` need (the mutants' folders, reused by
/// every mutant); nullopt when it did not build.
std::optional<StageInfo> build_stage(int number, const std::vector<CheckSpec>& specs,
                                     const fs::path& tree, const Session& session) {
  std::vector<StageInfo> stages;
  for (StageInfo& s : discover_stages(tree.string())) {
    if (s.number == number) stages.push_back(s);
  }
  std::set<std::string> builds{"release"};
  for (const CheckSpec& spec : specs) builds.insert(spec.build);
  for (const std::string& b : builds) {
    build_submission(tree.string(), (fs::path(session.build_root) / "mutants" / b).string(), b,
                     stages, session.jobs);
  }
  if (stages.empty() || stages[0].binaries.count("release") == 0) return std::nullopt;
  stages[0].pool = offers_workers(stages[0].binaries.at("release"));
  return stages[0];
}

/// Grades `stage` with `specs` `repeats` times, run K's logs in OUT/runK; `judge` turns one
/// run's results into (ok, summary) and may add to the details.
template <typename Judge>
ModeVerdict grade_stage_runs(StageInfo stage, const std::vector<CheckSpec>& specs,
                             const std::string& out, int repeats, const Session& session,
                             Judge judge) {
  ModeVerdict v;
  for (int k = 1; k <= repeats; ++k) {
    std::vector<StageInfo> stages{stage};
    const auto results = grade_stages(specs, stages, session.ctx, session.rubric,
                                      out + "/run" + std::to_string(k), session.start);
    const auto [score, max] = points_of(results);
    v.scores.push_back(score);
    v.max_score = max;
    auto [ok, summary] = judge(results, k == 1 ? &v.details : nullptr);
    if (!ok) v.ok = false;
    v.runs.push_back(summary);
  }
  require_same_scores(v);
  return v;
}

/// One stage-mode run of mutant `m`: its own check and each `also` must fail, and no failed
/// check's hint may name a trap other than `m.trap` (the own check's must name it, when set).
std::pair<bool, std::string> judge_stage_run(const MutantSpec& m,
                                             const std::vector<CheckResult>& results,
                                             std::string* details) {
  bool ok = true;
  std::string summary;
  for (const CheckResult& r : results) {
    const bool must_fail = r.check_id == m.check ||
                           std::find(m.also.begin(), m.also.end(), r.check_id) != m.also.end();
    const std::string trap = r.passed ? "" : classify_trap(r.check_id, r.output);
    std::string note = r.check_id + (r.passed ? " passed" : " failed");
    if (!trap.empty()) note += " (hint: " + trap + ")";
    if (must_fail && r.passed) {
      ok = false;
      note += " — NOT CAUGHT";
    }
    if (!trap.empty() && trap != m.trap) {
      ok = false;
      note += " — WRONG HINT (expected " + (m.trap.empty() ? std::string("none") : m.trap) + ")";
    }
    if (r.check_id == m.check && !r.passed && !m.trap.empty() && trap != m.trap) {
      ok = false;
      note += " — NO HINT naming " + m.trap;
    }
    summary += (summary.empty() ? "" : "; ") + note;
    if (details) {
      const std::string hint = r.passed ? "" : trap_hint(r.check_id, r.output, json());
      *details += "### " + r.check_id + ": " + (r.passed ? "pass" : "FAIL") + "\n\n```\n" +
                  (hint.empty() ? "" : hint + "\n\n") + r.output + "```\n\n";
    }
  }
  return {ok, summary};
}

/// One stage-mode run of the unmutated tree: every check a mutant is judged by must pass on
/// it, or a mutant failing that check proves nothing.
std::pair<bool, std::string> judge_reference_stage_run(const std::vector<CheckResult>& results,
                                                       std::string* details) {
  std::string failed;
  for (const CheckResult& r : results) {
    if (r.passed || r.not_run || r.expected_failure) continue;
    failed += (failed.empty() ? "" : ", ") + r.check_id;
    if (details) *details += "### " + r.check_id + ": FAIL\n\n```\n" + r.output + "```\n\n";
  }
  return {failed.empty(), failed.empty() ? "every check passed"
                                         : "FAILED " + failed +
                                               " (a check the reference fails "
                                               "catches nothing)"};
}

/// One lab-mode run of mutant `m` as lab `lab`'s submission: fewer points than the reference
/// scored in every run (`reference_low`, its lowest), and, when `m.trap` is set, a failed item
/// whose hint names it; no failed item's hint may name another trap.
std::pair<bool, std::string> judge_lab_run(const MutantSpec& m, int lab,
                                           const std::vector<CheckResult>& results,
                                           double reference_low, std::string* details) {
  const auto [score, max] = points_of(results);
  bool ok = true;
  bool named = false;
  std::string lost;
  for (const CheckResult& r : results) {
    if (r.passed || r.not_run) continue;
    lost += (lost.empty() ? "" : ", ") + r.check_id + " " + format_number(r.score) + "/" +
            format_number(r.max_score);
    if (!r.trap.empty()) lost += " (hint: " + r.trap + ")";
    if (!r.trap.empty() && r.trap == m.trap) named = true;
    if (!r.trap.empty() && r.trap != m.trap) {
      ok = false;
      lost += " — WRONG HINT (expected " + (m.trap.empty() ? std::string("none") : m.trap) + ")";
    }
    if (details) {
      *details += "### lab " + std::to_string(lab) + ", " + r.check_id + ": " +
                  format_number(r.score) + " of " + format_number(r.max_score) + "\n\n```\n" +
                  r.output + "```\n\n";
    }
  }
  std::string summary = "lab " + std::to_string(lab) + ": " + format_number(score) + " of " +
                        format_number(max) + " (reference " + format_number(reference_low) + ")" +
                        (lost.empty() ? "" : "; lost " + lost);
  if (score >= reference_low) {
    ok = false;
    summary += " — NOT CAUGHT (no fewer points than the reference)";
  }
  if (!m.trap.empty() && !named) {
    ok = false;
    summary += " — NO HINT naming " + m.trap;
  }
  return {ok, summary};
}

/// Grades `tree` as lab `lab`'s submission `repeats` times in the mutants' one lab folder
/// (mutants/lab/: every lab lays the same overlay, so the labs share its builds); nullopt when
/// the manifest or rubric is wrong.
std::optional<std::vector<std::vector<CheckResult>>> lab_runs(const fs::path& tree, int lab,
                                                              const std::string& out, int repeats,
                                                              const Session& session,
                                                              const std::string& reference,
                                                              const std::string& manifest_path) {
  Session as_lab = session;
  as_lab.submission = tree.string();
  as_lab.out_dir = out;
  // The tests' build copies from session.reuse_build only objects none of whose sources the
  // mutant changed: plan-reuse.sh compares the lab's tree with the tree that build was made of.
  return grade_lab_runs(as_lab, lab, reference, manifest_path,
                        (fs::path(session.build_root) / "mutants" / "lab").string(),
                        session.submission, repeats);
}

/// A table cell: '|' would end it.
std::string cell(std::string text) {
  for (std::size_t i = 0; (i = text.find('|', i)) != std::string::npos; i += 2)
    text.replace(i, 1, "\\|");
  return text.empty() ? "—" : text;
}

}  // namespace

int grade_mutants(const Session& session, const std::set<std::string>& wanted,
                  const std::string& reference, const std::string& manifest_path, int repeats) {
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
  const std::optional<json> labs = load_labs(manifest_path);
  if (!labs) return 2;
  const fs::path tree = fs::path(session.build_root) / "mutants" / "src";
  copy_tree(session.submission, tree);  // also undoes whatever mutant a previous run left planted
  const std::string out = session.out_dir + "/mutants";

  // What the chosen mutants need: their checks per stage, and their labs.
  std::vector<const MutantSpec*> chosen;
  std::map<int, std::vector<CheckSpec>> stage_checks;
  std::map<std::string, std::vector<int>> labs_of;
  std::set<int> all_labs;
  for (const MutantSpec& m : rubric.mutants) {
    if (!wanted.count("all") && !wanted.count(m.name)) continue;
    chosen.push_back(&m);
    const std::string patch_path = (fs::path(rubric.directory) / m.patch).string();
    if (std::string problems = patch_problems(tree.string(), patch_path, true); !problems.empty()) {
      std::cerr << "grader: mutant " << m.name << ": " << m.patch << " does not apply:\n"
                << problems;
      return 2;
    }
    labs_of[m.name] = grading_labs(m, patched_files(slurp(patch_path)), *labs);
    all_labs.insert(labs_of[m.name].begin(), labs_of[m.name].end());
    if (m.lab_test.empty()) {
      const std::optional<std::vector<CheckSpec>> specs = mutant_checks(m, rubric);
      if (!specs) return 2;
      std::vector<CheckSpec>& union_of = stage_checks[m.stage];
      for (const CheckSpec& spec : *specs) {
        if (std::none_of(union_of.begin(), union_of.end(),
                         [&](const CheckSpec& c) { return c.id == spec.id; })) {
          union_of.push_back(spec);
        }
      }
    }
  }

  std::string table =
      "| mutant | check meant to catch it | verdict | stage mode | stage score per run | lab mode "
      "| "
      "lab score per run |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  std::string details;
  int failed = 0;

  // The unmutated tree first, graded as every mutant after it will be: a check it fails, or a
  // score that moves between its runs, would make a mutant's lost points prove nothing.
  std::map<int, double> reference_low;
  {
    std::string stage_text, stage_scores, lab_text, lab_scores, section;
    bool ok = true;
    for (const auto& [number, specs] : stage_checks) {
      std::fprintf(stderr, "[mutants %7s] the reference: building stage %d, then %zu checks x %d\n",
                   elapsed().c_str(), number, specs.size(), repeats);
      const std::optional<StageInfo> stage = build_stage(number, specs, tree, session);
      ModeVerdict v;
      if (!stage) {
        v.ok = false;
        v.runs.push_back("stage " + std::to_string(number) + " did not build");
      } else {
        v = grade_stage_runs(*stage, specs, out + "/reference/stage" + std::to_string(number),
                             repeats, session, judge_reference_stage_run);
      }
      ok = ok && v.ok;
      stage_text += (stage_text.empty() ? "" : "; ") + std::string("stage ") +
                    std::to_string(number) + ": " + runs_text(v);
      stage_scores += (stage_scores.empty() ? "" : "; ") + scores_text(v);
      section += v.details;
    }
    for (int lab : all_labs) {
      std::fprintf(stderr, "[mutants %7s] the reference as lab %d's submission, x %d\n",
                   elapsed().c_str(), lab, repeats);
      const auto runs = lab_runs(tree, lab, out + "/reference/lab" + std::to_string(lab), repeats,
                                 session, reference, manifest_path);
      if (!runs) return 2;
      ModeVerdict v;
      for (const auto& results : *runs) {
        const auto [score, max] = points_of(results);
        v.scores.push_back(score);
        v.max_score = max;
      }
      require_same_scores(v);
      ok = ok && v.ok;
      reference_low[lab] = *std::min_element(v.scores.begin(), v.scores.end());
      lab_text += (lab_text.empty() ? "" : "; ") + std::string("lab ") + std::to_string(lab) +
                  (v.ok ? "" : ": " + runs_text(v));
      lab_scores += (lab_scores.empty() ? "" : "; ") + scores_text(v);
    }
    if (!ok) ++failed;
    table += "| (reference) | — | " + std::string(ok ? "as required" : "FAILED") + " | " +
             cell(stage_text) + " | " + cell(stage_scores) + " | " + cell(lab_text) + " | " +
             cell(lab_scores) + " |\n";
    std::printf("%-22s -> stage: %s [%s]; labs: %s [%s]\n", "(reference)", stage_text.c_str(),
                stage_scores.c_str(), lab_text.empty() ? "none" : lab_text.c_str(),
                lab_scores.c_str());
    std::fflush(stdout);
    details += "## the reference (unmutated): " + std::string(ok ? "as required" : "FAILED") +
               "\n\n" + section;
  }

  std::vector<std::string> previous;
  for (const MutantSpec* mp : chosen) {
    const MutantSpec& m = *mp;
    // Undo the previous mutant; copies get a new mtime, so the incremental builds notice.
    for (const std::string& file : previous) {
      fs::copy_file(fs::path(session.submission) / file, tree / file,
                    fs::copy_options::overwrite_existing);
    }
    const std::string patch_path = (fs::path(rubric.directory) / m.patch).string();
    previous = patched_files(slurp(patch_path));
    if (std::string problems = patch_problems(tree.string(), patch_path, false); !problems.empty()) {
      std::cerr << "grader: mutant " << m.name << ": " << m.patch << " does not apply:\n" << problems;
      return 2;
    }
    const std::string mout = out + "/" + m.name;
    bool ok = true;
    std::string section;

    // Stage mode.
    ModeVerdict stage;
    if (!m.lab_test.empty()) {
      // No stage check can see this bug (rubric.json says why): lab mode below grades it.
      stage.runs.push_back("not graded in stage mode (" + m.lab_test + ")");
    } else {
      const std::vector<CheckSpec> specs = *mutant_checks(m, rubric);
      std::fprintf(stderr, "[mutants %7s] %s: building, then checks %s x %d\n", elapsed().c_str(),
                   m.name.c_str(), m.check.c_str(), repeats);
      if (const std::optional<StageInfo> built = build_stage(m.stage, specs, tree, session)) {
        stage = grade_stage_runs(*built, specs, mout + "/stage", repeats, session,
                                 [&](const std::vector<CheckResult>& results, std::string* d) {
                                   return judge_stage_run(m, results, d);
                                 });
      } else {
        // A mutant that does not compile proves nothing about the checks: it escaped.
        stage.ok = false;
        stage.runs.push_back("NOT CAUGHT (the mutant did not build)");
      }
    }
    ok = ok && stage.ok;
    section += stage.details;

    // Lab mode: the mutant tree as the submission of each lab that grades it.
    std::string lab_text, lab_scores;
    const std::vector<int>& its_labs = labs_of[m.name];
    if (its_labs.empty() && !m.lab_test.empty()) {
      ok = false;
      lab_text = "GRADED NOWHERE: its patch changes no lab's graded_files";
    }
    for (int lab : its_labs) {
      std::fprintf(stderr, "[mutants %7s] %s: as lab %d's submission, x %d\n", elapsed().c_str(),
                   m.name.c_str(), lab, repeats);
      const auto runs = lab_runs(tree, lab, mout + "/lab" + std::to_string(lab), repeats, session,
                                 reference, manifest_path);
      if (!runs) return 2;
      ModeVerdict v;
      for (std::size_t k = 0; k < runs->size(); ++k) {
        const auto [score, max] = points_of((*runs)[k]);
        v.scores.push_back(score);
        v.max_score = max;
        auto [run_ok, summary] =
            judge_lab_run(m, lab, (*runs)[k], reference_low[lab], k == 0 ? &v.details : nullptr);
        if (!run_ok) v.ok = false;
        v.runs.push_back(summary);
      }
      require_same_scores(v);
      ok = ok && v.ok;
      lab_text += (lab_text.empty() ? "" : "; ") + runs_text(v);
      lab_scores += (lab_scores.empty() ? "" : "; ") + scores_text(v);
      section += v.details + "(lab " + std::to_string(lab) + "'s own reports: " + mout + "/lab" +
                 std::to_string(lab) + "/run1/report.md)\n\n";
    }
    if (its_labs.empty() && lab_text.empty()) lab_text = "no lab grades its files";

    if (!ok) ++failed;
    const std::string word = ok ? "caught" : "FAILED";
    const std::string check = m.lab_test.empty() ? m.check : "(" + lab_list(its_labs) + " mode)";
    table += "| " + m.name + " | " + check + " | " + word + " | " + cell(runs_text(stage)) + " | " +
             cell(scores_text(stage)) + " | " + cell(lab_text) + " | " + cell(lab_scores) + " |\n";
    std::printf("%-22s -> %-17s -> %s: %s [%s]\n%-22s    %s [%s]\n", m.name.c_str(), check.c_str(),
                word.c_str(), runs_text(stage).c_str(), scores_text(stage).c_str(), "",
                lab_text.c_str(), lab_scores.empty() ? "—" : lab_scores.c_str());
    std::fflush(stdout);
    details += "## " + m.name + " -> " + check + ": " + word + "\n\n" + m.description + "\n\n" +
               "Stage mode: " + runs_text(stage) + "\n\nLab mode: " + lab_text + "\n\n" + section;
  }
  fs::create_directories(out);
  std::ofstream(out + "/report.md")
      << "# Mutants: each planted bug, the checks that must catch it and the hint it must get\n\n"
      << "Each graded " << repeats << (repeats == 1 ? " time" : " times")
      << " in stage mode and as the submission of every lab that grades it; the reference "
         "first.\n\n"
      << table << "\n"
      << details;
  std::printf("\n%s(details: %s/report.md; %s)\n", table.c_str(), out.c_str(), elapsed().c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace grader
