// The throughput check: wrk on hits and misses at several connection counts, and the
// comparison of the stages of one run against the rubric's ratio thresholds.
#include <algorithm>
#include <cstdio>

#include "origin_server.h"
#include "wrk.h"

#include "check_support.h"
#include "support.h"

namespace grader {

using namespace std::chrono_literals;
using Clock = CheckClock;
using testing_support::HttpResponse;
using json = nlohmann::json;

RunOutcome measure_throughput(const CheckSpec&, const StageInfo& stage, const CheckContext& ctx) {
  const json& t = ctx.throughput;
  const int delay = t.value("miss_delay_ms", 20);
  harness::OriginServer origin(harness::OriginOptions{.threads = 2});
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  Launched proxy = launch(stage, "release", {}, ctx, "throughput");
  json data = json::object();
  const int seconds = t.value(ctx.quick ? "quick_seconds" : "seconds", 2);
  std::string out = t.value("close", false)
                        ? "  (each request on a new connection: Connection: close)\n"
                        : "  (keep-alive connections)\n";
  for (const std::string workload : {"hit", "miss"}) {
    for (int connections : t.value("connections", std::vector<int>{1, 10, 100})) {
      harness::WrkOptions options;
      options.proxy_url = "http://" + proxy.process->address();
      options.target = workload == "hit" ? base + "/bytes/1024"
                                         : base + "/delay/" + std::to_string(delay) + "/bytes/1024";
      options.workload = workload;
      options.close = t.value("close", false);
      options.connections = connections;
      options.threads = std::min(connections, 2);
      options.duration = std::chrono::seconds(seconds);
      options.script = ctx.wrk_script;
      std::string key = workload + "@" + std::to_string(connections);
      try {
        harness::WrkResult r = harness::run_wrk(options);
        // Only answered requests count: a stage that refused everything with a quick 503
        // would otherwise win every ratio.
        data[key] = r.ok_per_s();
        char line[200];
        std::snprintf(line, sizeof line, "  %-9s %8.0f req/s answered  p99 %7.1f ms  errors %llu\n",
                      key.c_str(), r.ok_per_s(), r.latency_ms.p99,
                      static_cast<unsigned long long>(r.errors.total()));
        out += line;
      } catch (const std::exception& e) {
        data[key] = 0.0;
        out += "  " + key + ": wrk failed: " + e.what() + "\n";
      }
    }
  }
  // A floor every load must reach whether or not another stage is graded beside it: a stage
  // that answers nothing (a hung pool) must not pass because it had nothing to compare with.
  const double floor = t.value("floor_rps", 10.0);
  bool ok = true;
  for (const auto& [key, rate] : data.items()) {
    if (rate.get<double>() >= floor) continue;
    ok = false;
    char line[300];
    std::snprintf(line, sizeof line,
                  "  [FAIL] %s: %.0f req/s answered, under the floor of %.0f req/s every stage "
                  "must reach%s\n",
                  key.c_str(), rate.get<double>(), floor,
                  rate.get<double>() == 0 ? " (the stage served nothing under this load — see "
                                            "the deadlock check)"
                                          : "");
    out += line;
  }
  harness::ExitStatus s = proxy.process->stop(10s);
  if (!s.clean()) {
    ok = false;
    out += "the stage " + exit_text(s) + " after the load\n";
  }
  return {ok, out, data};
}

std::map<std::string, RunOutcome> judge_throughput(
    const json& rubric, const std::map<std::string, json>& measured) {
  std::map<std::string, RunOutcome> verdicts;
  for (const auto& [stage, data] : measured) verdicts[stage] = {true, "", data};
  for (const json& rule : rubric.value("thresholds", json::array())) {
    const std::string stage = rule.at("stage"), vs = rule.at("vs");
    const std::string key = rule.at("workload").get<std::string>() + "@" +
                            std::to_string(rule.at("connections").get<int>());
    const double min_ratio = rule.at("min_ratio");
    if (!verdicts.count(stage) || !measured.count(vs)) continue;  // not both in this run
    auto rate = [&](const std::string& name) {
      const json& data = measured.at(name);
      return data.is_object() ? data.value(key, 0.0) : 0.0;
    };
    double mine = rate(stage), theirs = rate(vs);
    double ratio = theirs > 0 ? mine / theirs : 0;
    bool ok = ratio >= min_ratio;
    char line[300];
    std::snprintf(line, sizeof line, "  [%s] %s / %s on %s: %.0f / %.0f req/s = %.2f (need >= %.2f)%s%s\n",
                  ok ? "pass" : "FAIL", stage.c_str(), vs.c_str(), key.c_str(), mine, theirs,
                  ratio, min_ratio, rule.contains("why") ? " — " : "",
                  rule.value("why", std::string()).c_str());
    verdicts[stage].output += line;
    if (!ok) verdicts[stage].passed = false;
  }
  return verdicts;
}

}  // namespace grader
