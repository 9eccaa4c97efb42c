// The grader's outputs: a table for the terminal, report.md for people, results.json for
// Gradescope (https://gradescope-autograders.readthedocs.io/en/latest/specs/) and junit.xml for
// CI dashboards. All four say the same thing.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "grader.h"

namespace grader {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        // XML 1.0 forbids most control characters, even escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

/// JSON and XML want valid UTF-8; a crashing stage may print anything.
std::string valid_utf8(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string status_word(const CheckResult& r) {
  if (r.not_run) return "not run here";
  if (r.passed) return "pass";
  return r.expected_failure ? "FAIL (expected)" : "FAIL";
}

/// The points earned and offered, in all and per stage; checks not run here are left out.
struct Totals {
  double score = 0;
  double max_score = 0;
  std::map<std::string, std::pair<double, double>> per_stage;  // stage -> (score, max_score)
};

Totals add_up(const std::vector<CheckResult>& results) {
  Totals totals;
  for (const CheckResult& r : results) {
    if (r.not_run) continue;  // neither a pass nor a failure: out of the totals
    totals.score += r.score;
    totals.max_score += r.max_score;
    totals.per_stage[r.stage].first += r.score;
    totals.per_stage[r.stage].second += r.max_score;
  }
  return totals;
}

/// The table for the terminal: one row a check, a total per stage, the grand total.
std::string terminal_table(const std::string& out_dir, const std::vector<CheckResult>& results,
                           const Totals& totals, double total_seconds) {
  std::string table;
  char line[400];
  std::snprintf(line, sizeof line, "%-18s %-17s %-16s %9s %7s\n", "stage", "check", "result",
                "points", "time");
  table += line;
  table += std::string(71, '-') + "\n";
  for (const CheckResult& r : results) {
    if (r.not_run) {
      std::snprintf(line, sizeof line, "%-18s %-17s %-16s    -/%-4.0f %6.1fs\n", r.stage.c_str(),
                    r.check_id.c_str(), status_word(r).c_str(), r.max_score, r.seconds);
    } else {
      std::snprintf(line, sizeof line, "%-18s %-17s %-16s %4.0f/%-4.0f %6.1fs\n", r.stage.c_str(),
                    r.check_id.c_str(), status_word(r).c_str(), r.score, r.max_score, r.seconds);
    }
    table += line;
  }
  table += std::string(71, '-') + "\n";
  for (const auto& [stage, points] : totals.per_stage) {
    std::snprintf(line, sizeof line, "%-18s %-34s %4.0f/%-4.0f\n", stage.c_str(), "stage total",
                  points.first, points.second);
    table += line;
  }
  std::snprintf(line, sizeof line, "%-53s %4.0f/%-4.0f %6.1fs\n", "TOTAL", totals.score,
                totals.max_score, total_seconds);
  table += line;
  table += "details: " + out_dir + "/report.md (also results.json, junit.xml)\n";
  return table;
}

/// report.md, for people: the score, a table, then each check's full output.
void write_markdown(const std::string& path, const std::string& submission,
                    const std::vector<CheckResult>& results, const Totals& totals,
                    double total_seconds) {
  std::ofstream md(path);
  md << "# Grade report\n\nSubmission: `" << submission << "`  \nScore: **" << totals.score
     << " / " << totals.max_score << "** in " << static_cast<int>(total_seconds) << " s\n\n";
  md << "| stage | check | result | points | time |\n| --- | --- | --- | --- | --- |\n";
  for (const CheckResult& r : results) {
    md << "| " << r.stage << " | " << r.check_id << " | " << status_word(r) << " | ";
    // Out of the totals, as in the table on the terminal: a "0" here would read as points lost.
    if (r.not_run) {
      md << "- / " << r.max_score;
    } else {
      md << r.score << " / " << r.max_score;
    }
    md << " | " << static_cast<int>(r.seconds + 0.5) << " s |\n";
  }
  md << "\n";
  for (const CheckResult& r : results) {
    md << "## " << r.stage << ": " << r.name << " — " << status_word(r) << "\n\n```\n"
       << r.output << (r.output.empty() || r.output.back() == '\n' ? "" : "\n") << "```\n\n";
  }
}

/// results.json, in Gradescope's format.
void write_gradescope_json(const std::string& path, const std::vector<CheckResult>& results,
                           const Totals& totals, double total_seconds) {
  nlohmann::json tests = nlohmann::json::array();
  for (const CheckResult& r : results) {
    nlohmann::json test = {{"name", r.stage + ": " + r.name},
                           {"score", r.score},
                           {"max_score", r.max_score},
                           {"status", r.passed ? "passed" : "failed"},
                           {"output", nlohmann::json::parse(valid_utf8(r.output))},
                           {"visibility", r.visibility}};
    // Not run: out of the totals there too, 0 of 0 with no status, neither passed nor failed.
    if (r.not_run) {
      test["max_score"] = 0;
      test.erase("status");
    }
    tests.push_back(test);
  }
  nlohmann::json gradescope = {{"score", totals.score},
                               {"execution_time", static_cast<int>(total_seconds + 0.5)},
                               {"output", "Graded " + std::to_string(results.size()) +
                                              " checks; see each test for details."},
                               {"stdout_visibility", "visible"},
                               {"tests", tests}};
  std::ofstream(path) << gradescope.dump(2) << "\n";
}

bool failed(const CheckResult& r) { return !r.passed && !r.not_run; }

/// One <testcase>: skipped when not run here, a failure with the check's output, or passed.
void write_junit_case(std::ostream& xml, const CheckResult& r) {
  nlohmann::json text = nlohmann::json::parse(valid_utf8(r.output));
  xml << "    <testcase classname=\"" << xml_escape(r.stage) << "\" name=\""
      << xml_escape(r.check_id) << "\" time=\"" << r.seconds << "\">\n";
  if (r.not_run) {
    xml << "      <skipped message=\"" << xml_escape(text.get<std::string>()) << "\"/>\n";
  } else if (!r.passed) {
    xml << "      <failure message=\"" << xml_escape(r.name)
        << (r.expected_failure ? " (expected: the lesson of this stage)" : "") << "\">"
        << xml_escape(text.get<std::string>()) << "</failure>\n";
  } else {
    xml << "      <system-out>" << xml_escape(text.get<std::string>()) << "</system-out>\n";
  }
  xml << "    </testcase>\n";
}

/// junit.xml, for CI dashboards: one testsuite per stage.
void write_junit(const std::string& path, const std::vector<CheckResult>& results,
                 const Totals& totals, double total_seconds) {
  std::ofstream xml(path);
  const auto failures = std::count_if(results.begin(), results.end(), failed);
  xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"grade\" tests=\""
      << results.size() << "\" failures=\"" << failures << "\" time=\"" << total_seconds
      << "\">\n";
  for (const auto& [stage, points] : totals.per_stage) {
    int n = 0, f = 0;
    for (const CheckResult& r : results) {
      if (r.stage == stage) {
        ++n;
        f += failed(r) ? 1 : 0;
      }
    }
    xml << "  <testsuite name=\"" << xml_escape(stage) << "\" tests=\"" << n << "\" failures=\""
        << f << "\">\n";
    for (const CheckResult& r : results) {
      if (r.stage == stage) write_junit_case(xml, r);
    }
    xml << "  </testsuite>\n";
  }
  xml << "</testsuites>\n";
}

}  // namespace

std::string write_reports(const std::string& out_dir, const std::string& submission,
                          const std::vector<CheckResult>& results, double total_seconds) {
  std::filesystem::create_directories(out_dir);
  const Totals totals = add_up(results);
  write_markdown(out_dir + "/report.md", submission, results, totals, total_seconds);
  write_gradescope_json(out_dir + "/results.json", results, totals, total_seconds);
  write_junit(out_dir + "/junit.xml", results, totals, total_seconds);
  return terminal_table(out_dir, results, totals, total_seconds);
}

}  // namespace grader
