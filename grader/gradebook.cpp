// gradebook: the small JSON and CSV steps around the grader's results.json (Gradescope's format,
// written by report.cpp), so that the Gradescope bundle's shell scripts and grade-all.sh need no
// JSON tool of their own. See grader/README.md, "Gradescope" and "Many submissions".
//   gradebook note RESULTS NOTES        put the text of NOTES first in RESULTS' top-level output
//   gradebook fallback RESULTS MESSAGE  write a zero-score RESULTS whose output is MESSAGE's text
//   gradebook csv CSV DIR               one row per DIR/*/results.json, one column per test
//   gradebook summary RESULTS           print "SCORE MAX UNEXPECTED_FAILURES" (for the tests)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Gradescope rejects results.json holding invalid UTF-8; a student's output may hold anything.
std::string valid_utf8(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

void write_json(const fs::path& path, const json& j) {
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream(tmp) << j.dump(2) << "\n";
  fs::rename(tmp, path);  // a reader never sees half a file
}

// RFC 4180: a field holding a comma, quote or line break is quoted, quotes doubled.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

int note(const fs::path& results, const fs::path& notes) {
  json j = json::parse(slurp(results));
  const std::string text = valid_utf8(slurp(notes));
  j["output"] = text + (text.empty() || text.back() == '\n' ? "" : "\n") + "\n" + j.value("output", "");
  write_json(results, j);
  return 0;
}

int fallback(const fs::path& results, const fs::path& message) {
  write_json(results, json{{"score", 0},
                           {"output", valid_utf8(slurp(message))},
                           {"stdout_visibility", "visible"},
                           {"tests", json::array()}});
  return 0;
}

// "SCORE MAX UNEXPECTED": the total, the most it could be, and how many tests failed other than
// as their stage's lesson (the grader starts those outputs with "EXPECTED:").
int summary(const fs::path& results) {
  const json j = json::parse(slurp(results));
  double max_score = 0;
  int unexpected = 0;
  for (const json& t : j.value("tests", json::array())) {
    max_score += t.value("max_score", 0.0);
    if (t.value("status", "") != "passed" && t.value("output", "").rfind("EXPECTED:", 0) != 0) ++unexpected;
  }
  std::cout << number(j.value("score", 0.0)) << " " << number(max_score) << " " << unexpected << "\n";
  return 0;
}

int csv(const fs::path& out, const fs::path& dir) {
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(dir)) {
    // Dot folders are grade-all's own (slots, claims, a submission still being graded).
    if (e.is_directory() && e.path().filename().string().rfind('.', 0) != 0 &&
        fs::exists(e.path() / "results.json")) {
      folders.push_back(e.path());
    }
  }
  std::sort(folders.begin(), folders.end());
  std::vector<std::string> columns;  // test names, in the order first seen
  std::vector<std::pair<std::string, json>> rows;
  for (const fs::path& f : folders) {
    json j;
    try {
      j = json::parse(slurp(f / "results.json"));
    } catch (const std::exception& e) {
      std::cerr << "gradebook: " << (f / "results.json").string() << ": " << e.what() << "\n";
      return 1;
    }
    for (const json& t : j.value("tests", json::array())) {
      const std::string name = t.value("name", "");
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
    }
    rows.emplace_back(f.filename().string(), j);
  }
  std::ostringstream text;
  text << "submission,score,max_score";
  for (const std::string& c : columns) text << "," << csv_field(c);
  text << "\n";
  for (const auto& [name, j] : rows) {
    double max_score = 0;
    std::map<std::string, double> scores;
    for (const json& t : j.value("tests", json::array())) {
      scores[t.value("name", "")] = t.value("score", 0.0);
      max_score += t.value("max_score", 0.0);
    }
    text << csv_field(name) << "," << number(j.value("score", 0.0)) << "," << number(max_score);
    for (const std::string& c : columns) {
      auto s = scores.find(c);
      text << "," << (s == scores.end() ? std::string() : number(s->second));
    }
    text << "\n";
  }
  const fs::path tmp = out.string() + ".tmp";
  std::ofstream(tmp) << text.str();
  fs::rename(tmp, out);
  std::cout << "gradebook: " << rows.size() << " submissions, " << columns.size() << " checks -> "
            << out.string() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 3 && args[0] == "note") return note(args[1], args[2]);
    if (args.size() == 3 && args[0] == "fallback") return fallback(args[1], args[2]);
    if (args.size() == 3 && args[0] == "csv") return csv(args[1], args[2]);
    if (args.size() == 2 && args[0] == "summary") return summary(args[1]);
  } catch (const std::exception& e) {
    std::cerr << "gradebook: " << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: gradebook note RESULTS NOTES | fallback RESULTS MESSAGE | csv CSV DIR | "
               "summary RESULTS\n";
  return 2;
}
