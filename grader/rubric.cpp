#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "grader.h"

namespace grader {

Rubric load_rubric(const std::string& path, bool quick) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the rubric " + path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const std::exception& e) {
    throw std::runtime_error("the rubric " + path + " is not valid JSON: " + e.what());
  }
  Rubric rubric;
  rubric.directory = std::filesystem::absolute(path).parent_path().string();
  rubric.quick = doc.value("quick", nlohmann::json::object());
  rubric.throughput = doc.value("throughput", nlohmann::json::object());
  const nlohmann::json defaults = doc.value("defaults", nlohmann::json::object());
  for (const nlohmann::json& c : doc.at("checks")) {
    CheckSpec spec;
    try {
      spec.id = c.at("id");
      spec.name = c.at("name");
      spec.points = c.at("points");
      spec.visibility = c.value("visibility", defaults.value("visibility", "visible"));
      spec.repeats = c.value("repeats", defaults.value("repeats", 1));
      spec.time_limit_s = c.value("time_limit_s", defaults.value("time_limit_s", 60));
      spec.estimate_s = c.value("estimate_s", 10.0);
      spec.build = c.value("build", "release");
      spec.pool_only = c.value("pool_only", false);
      spec.stages = c.value("stages", std::vector<int>{});
      spec.expected_to_fail =
          c.value("expected_to_fail", std::map<std::string, std::string>{});
      spec.params = c.value("params", nlohmann::json::object());
    } catch (const std::exception& e) {
      throw std::runtime_error("rubric check " + c.dump() + ": " + e.what());
    }
    if (spec.build != "release" && spec.build != "tsan" && spec.build != "debug") {
      throw std::runtime_error("rubric check " + spec.id + ": build must be release, tsan or debug");
    }
    if (spec.repeats < 1 || spec.time_limit_s < 1 || spec.points < 0) {
      throw std::runtime_error("rubric check " + spec.id +
                               ": repeats and time_limit_s must be >= 1, points >= 0");
    }
    if (quick) {
      spec.repeats = std::min(spec.repeats, rubric.quick.value("max_repeats", 1));
      spec.estimate_s *= rubric.quick.value("estimate_factor", 0.6);
    }
    rubric.checks.push_back(spec);
  }
  for (const nlohmann::json& m : doc.value("mutants", nlohmann::json::array())) {
    MutantSpec spec;
    try {
      spec = MutantSpec{m.at("name"),
                        m.at("patch"),
                        m.value("check", ""),
                        m.value("lab_test", ""),
                        m.value("description", ""),
                        m.value("trap", ""),
                        m.value("also", std::vector<std::string>{}),
                        m.value("watch", std::vector<std::string>{}),
                        m.value("stage", 3)};
    } catch (const std::exception& e) {
      throw std::runtime_error("rubric mutant " + m.dump() + ": " + e.what());
    }
    // MUTANTS=name picks mutants by name, and each has its own report section.
    if (std::any_of(rubric.mutants.begin(), rubric.mutants.end(),
                    [&](const MutantSpec& other) { return other.name == spec.name; })) {
      throw std::runtime_error("rubric mutant " + spec.name + ": the name is given twice");
    }
    if (spec.check.empty() == spec.lab_test.empty()) {
      throw std::runtime_error("rubric mutant " + spec.name +
                               ": give exactly one of check (a stage check) and lab_test");
    }
    if (!spec.lab_test.empty() && (!spec.trap.empty() || !spec.also.empty() || !spec.watch.empty())) {
      throw std::runtime_error("rubric mutant " + spec.name +
                               ": trap, also and watch are for stage checks, not lab_test");
    }
    rubric.mutants.push_back(spec);
  }
  return rubric;
}

}  // namespace grader
