// sizing-sim: how should a proxy size its concurrency toward an origin? Replays N closed-loop
// clients through a proxy whose limit a controller sets, against an origin that queues,
// thrashes or fails past its capacity (harness/downstream.h), in virtual time (sizing_sim.h):
// a 30-second run takes milliseconds, and the same flags print the same table on any machine.
//
//   sizing-sim [--controller all|fixed|fixed:N|littles|aimd|vegas|gradient|stage4[,...]]
//              [--limits "1 2 4 ... 128"] [--overload queue|thrash|fail] [--clients 200]
//              [--delay-ms 20] [--capacity 32] [--seconds 30] [--seed 1] [--out DIR]
//
// `fixed` sweeps a fixed limit over --limits: the tuning curve a pool of N workers draws.
// With --out DIR: DIR/sizing-sim.csv, DIR/sizing-sim.gp and, drawn by gnuplot, DIR/sizing-sim.png
// (the curve, and each adaptive controller as a point at its mean limit).
#include "sizing_sim.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "run_command.h"

namespace sizing {
namespace {

namespace fs = std::filesystem;

/// One row of the report: a result, and for a fixed limit its N and the law's prediction.
struct Row {
  SimResult result;
  int fixed_n = 0;       ///< 0: an adaptive controller
  double law_per_s = 0;  ///< expected_per_second() for fixed_n
};

std::vector<int> parse_limits(const std::string& text) {
  std::vector<int> limits;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ' ')) {
    std::istringstream numbers(item);
    std::string piece;
    while (std::getline(numbers, piece, ',')) {
      if (piece.empty()) continue;
      const int n = std::stoi(piece);
      if (n <= 0) throw std::invalid_argument("--limits: " + piece + " is not a positive count");
      limits.push_back(n);
    }
  }
  if (limits.empty()) throw std::invalid_argument("--limits is empty");
  return limits;
}

// --controller's list, expanded: `all` is the fixed sweep and every adaptive controller.
std::vector<Row> run_all(const SimOptions& options, const std::vector<std::string>& names,
                         const std::vector<int>& limits) {
  std::vector<Row> rows;
  auto run_fixed = [&](int n) {
    rows.push_back(
        {simulate(options, "fixed:" + std::to_string(n)), n, expected_per_second(options, n)});
  };
  for (const std::string& name : names) {
    if (name == "all" || name == "fixed") {
      for (const int n : limits) run_fixed(n);
      if (name == "fixed") continue;
      for (const std::string& adaptive : adaptive_controllers())
        rows.push_back({simulate(options, adaptive)});
    } else if (name.starts_with("fixed:")) {
      if (!make_controller(name)) throw std::invalid_argument("--controller: bad " + name);
      run_fixed(std::stoi(name.substr(6)));
    } else {
      rows.push_back({simulate(options, name)});
    }
  }
  return rows;
}

std::string describe(const SimOptions& o) {
  std::ostringstream out;
  out << harness::overload_name(o.overload) << " origin: capacity " << o.capacity << ", delay "
      << o.delay_ms << " ms; " << o.clients << " clients, think " << o.think_ms << " ms";
  if (o.queue_timeout_ms > 0) out << ", proxy queue timeout " << o.queue_timeout_ms << " ms";
  out << "; " << o.seconds << " s virtual, seed " << o.seed;
  return out.str();
}

void print_table(const SimOptions& options, const std::vector<Row>& rows) {
  std::printf("# %s\n", describe(options).c_str());
  std::printf("%-12s %9s %9s %7s %7s %8s %8s %10s %6s\n", "controller", "good/s", "law/s", "503s",
              "shed", "p50 ms", "p99 ms", "mean limit", "final");
  for (const Row& row : rows) {
    const SimResult& r = row.result;
    char law[32] = "";
    if (row.fixed_n > 0) std::snprintf(law, sizeof law, "%.1f", row.law_per_s);
    std::printf("%-12s %9.1f %9s %7llu %7llu %8.1f %8.1f %10.1f %6zu\n", r.controller.c_str(),
                r.good_per_second, law, static_cast<unsigned long long>(r.failed),
                static_cast<unsigned long long>(r.shed), r.p50_ms, r.p99_ms, r.mean_limit,
                r.final_limit);
  }
}

void write_csv(const fs::path& csv, const std::vector<Row>& rows) {
  std::ofstream out(csv, std::ios::trunc);
  out << "controller,fixed_n,good_per_s,law_per_s,failed_503,shed_503,p50_ms,p99_ms,mean_limit,"
         "final_limit\n";
  for (const Row& row : rows) {
    const SimResult& r = row.result;
    out << r.controller << ',' << (row.fixed_n > 0 ? std::to_string(row.fixed_n) : "") << ','
        << r.good_per_second << ',' << (row.fixed_n > 0 ? std::to_string(row.law_per_s) : "") << ','
        << r.failed << ',' << r.shed << ',' << r.p50_ms << ',' << r.p99_ms << ',' << r.mean_limit
        << ',' << r.final_limit << '\n';
  }
  if (!out) throw std::runtime_error("cannot write " + csv.string());
}

// The tuning curve of the fixed limits (throughput, the law's arithmetic, p99) and each adaptive
// controller as a labelled point at its mean limit, so one reads where on the curve it settled.
std::string gnuplot_script(const SimOptions& options, const std::vector<Row>& rows,
                           const fs::path& csv, const fs::path& png) {
  bool any_fixed = false, any_adaptive = false;
  for (const Row& row : rows) (row.fixed_n > 0 ? any_fixed : any_adaptive) = true;
  const std::string file = "'" + csv.string() + "' skip 1";
  std::vector<std::string> plots;
  if (any_fixed) {
    plots.push_back(
        file +
        " using 2:3 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'fixed N: good answers/s'");
    plots.push_back(file +
                    " using 2:4 with lines dt 2 lw 2 lc rgb '#7f7f7f' title \"the law's "
                    "arithmetic: N / E[service]\"");
    plots.push_back(file +
                    " using 2:($8 > 0 ? $8 : 1/0) axes x1y2 with linespoints dt 3 pt 6 lc rgb "
                    "'#ff7f0e' title 'fixed N: p99 latency'");
  }
  if (any_adaptive) {  // valid(2): column 2, fixed_n, is empty for an adaptive controller
    const std::string x = "(valid(2) ? 1/0 : $9)";
    plots.push_back(file + " using " + x +
                    ":3 with points pt 5 ps 1.5 lc rgb '#d62728' title 'adaptive: good answers/s "
                    "at its mean limit'");
    plots.push_back(file + " using " + x +
                    ":3:1 with labels offset 0,1.2 tc rgb '#d62728' notitle");
    plots.push_back(file + " using " + x +
                    ":($8 > 0 ? $8 : 1/0) axes x1y2 with points pt 4 ps 1.5 lc rgb '#9467bd' title "
                    "'adaptive: p99 latency'");
  }
  std::ostringstream gp;
  gp << "# Generated by sizing-sim; rerun with: gnuplot "
     << (csv.parent_path() / "sizing-sim.gp").string() << "\n"
     << "set datafile separator comma\n"
     << "set title '" << describe(options) << "' noenhanced\n"
     << "set xlabel \"concurrency limit: fixed N, or an adaptive controller's mean (log scale)\"\n"
     << "set ylabel 'good answers/s'\n"
     << "set y2label 'p99 latency, ms (log scale)'\n"
     << "set logscale x 2\nset logscale y2 10\nset ytics nomirror\nset y2tics\nset yrange [0:*]\n"
     << "set offsets graph 0.05, graph 0.05, graph 0.1, 0\n"
     << "set grid xtics ytics\n"
     << "set key outside bottom center horizontal maxrows 2 noenhanced\n"
     << "set terminal pngcairo size 1200,750 font 'sans,11'\n"
     << "set output '" << png.string() << "'\n"
     << "plot ";
  for (std::size_t i = 0; i < plots.size(); ++i) gp << (i > 0 ? ", \\\n     " : "") << plots[i];
  gp << "\n";
  return gp.str();
}

void write_report(const SimOptions& options, const std::vector<Row>& rows, const fs::path& out) {
  fs::create_directories(out);
  const fs::path csv = out / "sizing-sim.csv", script = out / "sizing-sim.gp",
                 png = out / "sizing-sim.png";
  write_csv(csv, rows);
  std::ofstream(script, std::ios::trunc) << gnuplot_script(options, rows, csv, png);
  if (harness::run_command("command -v gnuplot >/dev/null 2>&1").status != 0) {
    std::cerr << "sizing-sim: wrote " << csv.string() << " and " << script.string()
              << "; gnuplot is not installed (Debian package gnuplot-nox), so no PNG\n";
    return;
  }
  const harness::CommandOutput run = harness::run_command("gnuplot '" + script.string() + "' 2>&1");
  if (run.status != 0)
    throw std::runtime_error("gnuplot " + script.string() + " failed:\n" + run.text);
  std::cerr << "sizing-sim: wrote " << csv.string() << ", " << script.string() << ", "
            << png.string() << "\n";
}

int run_cli(int argc, char** argv) {
  CLI::App app{
      "Replays closed-loop clients through a proxy whose concurrency toward one origin a "
      "controller sets, in virtual time, and prints each controller's throughput, 503s, "
      "latency and limit.",
      "sizing-sim"};
  SimOptions options;
  std::string overload = "thrash";
  std::vector<std::string> controllers = {"all"};
  std::string limits = "1 2 4 8 16 32 64 128";
  std::string out;
  app.add_option("--controller", controllers,
                 "all, fixed (the sweep over --limits), fixed:N, littles, aimd, vegas, gradient, "
                 "stage4; comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--limits", limits,
                 "The fixed limits `fixed` sweeps, separated by spaces or commas")
      ->capture_default_str();
  app.add_option("--clients", options.clients, "Closed-loop clients")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--delay-ms", options.delay_ms, "The origin's base delay, ms")
      ->capture_default_str()
      ->check(CLI::Range(1, 60'000));
  app.add_option("--capacity", options.capacity, "The origin's capacity K")
      ->capture_default_str()
      ->check(CLI::Range(1, 100'000));
  app.add_option("--overload", overload, "What the origin does past K")
      ->capture_default_str()
      ->check(CLI::IsMember({"queue", "thrash", "fail"}));
  app.add_option("--seconds", options.seconds, "Virtual seconds per run")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--seed", options.seed, "Random seed")->capture_default_str();
  app.add_option("--think-ms", options.think_ms, "A client's pause before its next request, ms")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60'000.0));
  app.add_option("--queue-timeout-ms", options.queue_timeout_ms,
                 "The proxy answers 503 to a request that waited this long for the limit; 0: never")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60'000.0));
  app.add_option("--out", out, "Write DIR/sizing-sim.csv, .gp and .png");
  CLI11_PARSE(app, argc, argv);

  options.overload = *harness::parse_overload(overload);
  for (const std::string& name : controllers) {
    if (name != "all" && name != "fixed" && !make_controller(name))
      throw std::invalid_argument("--controller: unknown " + name);
  }
  const std::vector<Row> rows = run_all(options, controllers, parse_limits(limits));
  print_table(options, rows);
  if (!out.empty()) write_report(options, rows, out);
  return 0;
}

}  // namespace
}  // namespace sizing

int main(int argc, char** argv) {
  try {
    return sizing::run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sizing-sim: " << e.what() << '\n';
    return 1;
  }
}
