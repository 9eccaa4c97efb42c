// The grader's outputs: a table for the terminal, report.md for people, results.json for
// Gradescope (https://gradescope-autograders.readthedocs.io/en/latest/specs/) and junit.xml for
// CI dashboards. All four say the same thing.
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

}  // namespace

std::string write_reports(const std::string& out_dir, const std::string& submission,
                          const std::vector<CheckResult>& results, double total_seconds) {
  namespace fs = std::filesystem;
  fs::create_directories(out_dir);
  double score = 0, max_score = 0;
  std::map<std::string, std::pair<double, double>> per_stage;
  for (const CheckResult& r : results) {
    if (r.not_run) continue;  // neither a pass nor a failure: out of the totals
    score += r.score;
    max_score += r.max_score;
    per_stage[r.stage].first += r.score;
    per_stage[r.stage].second += r.max_score;
  }

  // The table.
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
  for (const auto& [stage, points] : per_stage) {
    std::snprintf(line, sizeof line, "%-18s %-34s %4.0f/%-4.0f\n", stage.c_str(), "stage total",
                  points.first, points.second);
    table += line;
  }
  std::snprintf(line, sizeof line, "%-53s %4.0f/%-4.0f %6.1fs\n", "TOTAL", score, max_score,
                total_seconds);
  table += line;
  table += "details: " + out_dir + "/report.md (also results.json, junit.xml)\n";

  // report.md
  std::ofstream md(out_dir + "/report.md");
  md << "# Grade report\n\nSubmission: `" << submission << "`  \nScore: **" << score << " / "
     << max_score << "** in " << static_cast<int>(total_seconds) << " s\n\n";
  md << "| stage | check | result | points | time |\n| --- | --- | --- | --- | --- |\n";
  for (const CheckResult& r : results) {
    md << "| " << r.stage << " | " << r.check_id << " | " << status_word(r) << " | " << r.score
       << " / " << r.max_score << " | " << static_cast<int>(r.seconds + 0.5) << " s |\n";
  }
  md << "\n";
  for (const CheckResult& r : results) {
    md << "## " << r.stage << ": " << r.name << " — " << status_word(r) << "\n\n```\n"
       << r.output << (r.output.empty() || r.output.back() == '\n' ? "" : "\n") << "```\n\n";
  }

  // results.json, Gradescope's format.
  nlohmann::json tests = nlohmann::json::array();
  for (const CheckResult& r : results) {
    tests.push_back({{"name", r.stage + ": " + r.name},
                     {"score", r.score},
                     {"max_score", r.max_score},
                     {"status", r.passed ? "passed" : "failed"},
                     {"output", nlohmann::json::parse(valid_utf8(r.output))},
                     {"visibility", r.visibility}});
  }
  nlohmann::json gradescope = {{"score", score},
                               {"execution_time", static_cast<int>(total_seconds + 0.5)},
                               {"output", "Graded " + std::to_string(results.size()) +
                                              " checks; see each test for details."},
                               {"stdout_visibility", "visible"},
                               {"tests", tests}};
  std::ofstream(out_dir + "/results.json") << gradescope.dump(2) << "\n";

  // junit.xml: one testsuite per stage.
  std::ofstream xml(out_dir + "/junit.xml");
  int failures = 0;
  for (const CheckResult& r : results) failures += r.passed || r.not_run ? 0 : 1;
  xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"grade\" tests=\""
      << results.size() << "\" failures=\"" << failures << "\" time=\"" << total_seconds
      << "\">\n";
  for (const auto& [stage, points] : per_stage) {
    int n = 0, f = 0;
    for (const CheckResult& r : results) {
      if (r.stage == stage) {
        ++n;
        f += r.passed || r.not_run ? 0 : 1;
      }
    }
    xml << "  <testsuite name=\"" << xml_escape(stage) << "\" tests=\"" << n << "\" failures=\""
        << f << "\">\n";
    for (const CheckResult& r : results) {
      if (r.stage != stage) continue;
      nlohmann::json text = nlohmann::json::parse(valid_utf8(r.output));
      xml << "    <testcase classname=\"" << xml_escape(stage) << "\" name=\""
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
    xml << "  </testsuite>\n";
  }
  xml << "</testsuites>\n";
  return table;
}

}  // namespace grader
