// stage-bench: every stage side by side on the scenarios of the two studies (make bench):
//   hits vs misses      1 kB and 100 kB bodies, 10 connections, 1 ms origin (1 kB hits also
//                       at 100 keep-alive connections)
//   quick I/O           1 kB body, 1 ms origin, miss path, 1/10/100/400 connections
//   long I/O            100 kB body, 50 ms origin, miss path, 1/10/100/400 connections
//   memory              peak RSS, VSZ and threads per stage at 400 connections
//   APDEX and dropped   per stage and load, with T stated
// with optional peers (--peers: squid, tinyproxy, nginx serving the bodies directly, and the
// caching reverse proxies nginx proxy_cache and varnish in front of the same origin).
// Every load point runs all servers back to back, so machine noise hits them alike. Writes
// OUT/bench.csv, OUT/bench.md (tables with ratios to stage 1 and stage 3), OUT/bench.gp and
// OUT/bench.svg / .png, and every server's log in OUT/logs/.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "load_report.h"
#include "load_runner.h"

#ifndef PROXY_SOURCE_DIR
#error "PROXY_SOURCE_DIR must name the source tree (set in bench/load/CMakeLists.txt)"
#endif

namespace {

namespace fs = std::filesystem;

// 100 kB, not 100 KiB: with its URL and head, one object must fit Proxy Lab's 102,400-byte
// object limit, or the hit path could never hit.
constexpr int kSmallBody = 1024;
constexpr int kLargeBody = 100'000;

struct Scenario {
  std::string name;      // CSV `scenario`
  std::string workload;  // hit | miss
  int body_bytes;
  int delay_ms;
  std::vector<int> connections;
  double apdex_t_ms;
  bool nginx = false;  // nginx-direct joins (it serves static files: hits only)
};

struct Server {
  bench::ServerCommand command;
  bool peer = false;
};

// Stands in a peer's command line for the origin's HOST:PORT, known only once it started.
constexpr const char* kOriginArgument = "@ORIGIN@";

struct BenchOptions {
  std::string bin_dir;
  std::string stages;  // empty: every stage*-* in bin_dir
  int duration_s = 5;
  std::string connections = "1 10 100 400";
  int pool_workers = 128;
  bool peers = false;
  int wrk_threads = 2;
  std::string out = "results/bench";
  double quick_t_ms = 10;
  double long_t_ms = 100;
  bool replot = false;
};

std::vector<std::string> find_stages(const std::string& bin_dir) {
  std::vector<std::string> stages;
  for (const auto& entry : fs::directory_iterator(bin_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.rfind("stage", 0) == 0 && std::isdigit(static_cast<unsigned char>(name[5])) &&
        name.find('-') != std::string::npos && entry.is_regular_file() &&
        (entry.status().permissions() & fs::perms::owner_exec) != fs::perms::none) {
      stages.push_back(name);
    }
  }
  std::sort(stages.begin(), stages.end());
  return stages;
}

// All measured points, looked up by (scenario, connections, server).
class Results {
 public:
  void add(const bench::LoadPoint& point) { points_.push_back(point); }
  [[nodiscard]] const std::vector<bench::LoadPoint>& all() const { return points_; }
  [[nodiscard]] const bench::LoadPoint* find(const std::string& scenario, int connections,
                                             const std::string& server) const {
    for (const auto& p : points_)
      if (p.scenario == scenario && p.connections == connections && p.server == server) return &p;
    return nullptr;
  }

 private:
  std::vector<bench::LoadPoint> points_;
};

std::string ratio(double value, const bench::LoadPoint* base) {
  const double base_rate = base == nullptr ? std::nan("") : base->wrk.ok_per_s();
  if (!(base_rate > 0) || !std::isfinite(value)) return "–";
  return bench::format_number(value / base_rate, value / base_rate < 10 ? 2 : 1) + "×";
}

std::string mib(long kib) { return bench::format_number(static_cast<double>(kib) / 1024.0, 1); }

// Markdown: one throughput table per scenario, ratios to stage 1 and stage 3.
void throughput_table(std::ostream& md, const Results& results, const Scenario& s,
                      const std::vector<Server>& servers, const std::string& stage1,
                      const std::string& stage3) {
  md << "| server |";
  for (int c : s.connections) md << " " << c << " conn: req/s | ÷ stage 1 | ÷ stage 3 |";
  md << "\n| --- |";
  for (std::size_t i = 0; i < s.connections.size(); ++i) md << " --: | --: | --: |";
  md << "\n";
  for (const auto& server : servers) {
    if (server.command.name == "nginx-direct" && !s.nginx) continue;
    md << "| " << server.command.name << " |";
    for (int c : s.connections) {
      const auto* p = results.find(s.name, c, server.command.name);
      double rps = p ? p->wrk.ok_per_s() : std::nan("");
      md << " " << bench::format_number(rps, 0) << " | " << ratio(rps, results.find(s.name, c, stage1))
         << " | " << ratio(rps, results.find(s.name, c, stage3)) << " |";
    }
    md << "\n";
  }
}

// Markdown: p99, APDEX and dropped requests per server and load.
void latency_table(std::ostream& md, const Results& results, const Scenario& s,
                   const std::vector<Server>& servers) {
  md << "| server |";
  for (int c : s.connections) md << " " << c << " conn: p99 ms | APDEX | dropped | non-2xx |";
  md << "\n| --- |";
  for (std::size_t i = 0; i < s.connections.size(); ++i) md << " --: | --: | --: | --: |";
  md << "\n";
  for (const auto& server : servers) {
    if (server.command.name == "nginx-direct" && !s.nginx) continue;
    md << "| " << server.command.name << " |";
    for (int c : s.connections) {
      const auto* p = results.find(s.name, c, server.command.name);
      if (p == nullptr) {
        md << " – | – | – | – |";
        continue;
      }
      md << " " << bench::format_number(p->wrk.latency_ms.p99, 1) << " | "
         << bench::format_number(bench::point_apdex(*p), 3) << " | " << bench::dropped(p->wrk.errors)
         << " | " << p->wrk.errors.status << " |";
    }
    md << "\n";
  }
}

// The plot's data sit in the script as one inline block per (scenario, server), in connection
// order, so each server's points join into a line (the CSV interleaves the servers).
std::string gnuplot_script(const fs::path& out, const std::vector<Server>& servers,
                           const Scenario& quick, const Scenario& slow, const Results& results) {
  std::ostringstream gp;
  gp << "# Generated by stage-bench from bench.csv; rerun with: gnuplot " << (out / "bench.gp").string()
     << "\n"
     << "set datafile missing '?'\n"
     << "set logscale x 10\nset grid\nset key top left noenhanced font ',9'\n"
     << "set xlabel 'connections (log scale)'\n";
  auto value = [](double v) { return std::isfinite(v) ? std::to_string(v) : std::string("?"); };
  std::map<std::string, std::string> block;  // scenario + server -> datablock name
  for (const Scenario* s : {&quick, &slow}) {
    for (const auto& server : servers) {
      const std::string name = "$d" + std::to_string(block.size());
      block[s->name + "/" + server.command.name] = name;
      gp << name << " << EOD\n# " << s->name << " " << server.command.name
         << ": connections requests_per_s latency_p99_ms\n";
      for (int c : s->connections) {
        if (const auto* p = results.find(s->name, c, server.command.name))
          gp << c << " " << value(p->wrk.ok_per_s()) << " " << value(p->wrk.latency_ms.p99) << "\n";
      }
      gp << "EOD\n";
    }
  }
  const char* colors[] = {"#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"};
  auto panel = [&](const Scenario& s, int column, const std::string& ylabel,
                   const std::string& title, bool log_y) {
    std::ostringstream p;
    p << "set title '" << title << "' noenhanced\nset ylabel '" << ylabel << "'\n"
      << (log_y ? "set logscale y 10\n" : "unset logscale y\n") << "set yrange [" << (log_y ? "*" : "0")
      << ":*]\nplot ";
    std::size_t i = 0;
    for (const auto& server : servers) {
      if (server.command.name == "nginx-direct") continue;
      if (i > 0) p << ", \\\n     ";
      p << block[s.name + "/" + server.command.name] << " using 1:" << column
        << " with linespoints lw 2 pt 7 " << (server.peer ? "dt 2 " : "") << "lc rgb '"
        << colors[i % std::size(colors)] << "' title '" << server.command.name << "'";
      ++i;
    }
    p << "\n";
    return p.str();
  };
  const std::string body =
      "set multiplot layout 2,2\n" +
      panel(quick, 2, "requests/s", "quick I/O: 1 kB, 1 ms origin, misses", false) +
      panel(slow, 2, "requests/s", "long I/O: 100 kB, 50 ms origin, misses", false) +
      panel(quick, 3, "p99 latency, ms (log)", "quick I/O: p99", true) +
      panel(slow, 3, "p99 latency, ms (log)", "long I/O: p99", true) + "unset multiplot\n";
  gp << "set terminal svg size 1200,900 dynamic font 'sans,11'\nset output '"
     << (out / "bench.svg").string() << "'\n" << body
     << "set terminal pngcairo size 1400,1050 font 'sans,10'\nset output '"
     << (out / "bench.png").string() << "'\n" << body;
  return gp.str();
}

void add_bench_options(CLI::App& app, BenchOptions& o) {
  app.add_option("--bin-dir", o.bin_dir, "Where the stages and origin are (default: next to this program)");
  app.add_option("--stages", o.stages, "Stages to compare (default: every stage*-* in --bin-dir)");
  app.add_option("--duration", o.duration_s, "Seconds of load per point")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--connections", o.connections, "Connection levels of the I/O scenarios")
      ->capture_default_str();
  app.add_option("--pool-workers", o.pool_workers,
                 "--workers for stage3-pool (other stages keep their defaults)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_flag("--peers", o.peers,
               "Also run squid, tinyproxy, nginx (files), nginx proxy_cache and varnish "
               "(bench/peers/)");
  app.add_option("--wrk-threads", o.wrk_threads, "wrk threads")->capture_default_str();
  app.add_option("--quick-apdex-ms", o.quick_t_ms, "APDEX T for quick I/O, ms")->capture_default_str();
  app.add_option("--long-apdex-ms", o.long_t_ms, "APDEX T for long I/O, ms")->capture_default_str();
  app.add_option("--out", o.out, "Output folder")->capture_default_str();
  app.add_flag("--replot", o.replot,
               "Measure nothing: rewrite bench.md and the plots from OUT/bench.csv");
}

// The servers to compare: the stages named by --stages (default: every one in --bin-dir), then
// with --peers the peers' launch scripts (bench/peers/).
std::vector<Server> servers_to_compare(const BenchOptions& o, const fs::path& out) {
  std::vector<std::string> stage_names;
  if (o.stages.empty()) {
    stage_names = find_stages(o.bin_dir);
  } else {
    std::istringstream list(o.stages);
    for (std::string name; list >> name;) stage_names.push_back(name);
  }
  if (stage_names.empty()) throw std::runtime_error("no stage binaries in " + o.bin_dir + " (make first)");
  std::vector<Server> servers;
  for (const auto& name : stage_names) {
    Server s{{name, {(fs::path(o.bin_dir) / name).string(), "--port", "0"}, false}, false};
    if (name == "stage3-pool") {
      s.command.argv.push_back("--workers");
      s.command.argv.push_back(std::to_string(o.pool_workers));
    }
    servers.push_back(s);
  }
  if (o.peers) {
    const std::string peers = std::string(PROXY_SOURCE_DIR) + "/bench/peers/";
    for (const char* peer : {"squid", "tinyproxy"})
      servers.push_back({{peer, {peers + peer, "--dir", (out / "peers" / peer).string()}, true}, true});
    servers.push_back(
        {{"nginx-direct", {peers + "nginx", "--dir", (out / "peers" / "nginx").string()}, true}, true});
    // Reverse proxies: they forward to the origin they are given, whatever the target names.
    for (const char* peer : {"nginx-cache", "varnish"})
      servers.push_back({{peer,
                          {peers + peer, "--dir", (out / "peers" / peer).string(), "--origin",
                           kOriginArgument},
                          true},
                         true});
  }
  return servers;
}

// --replot: the points saved in OUT/bench.csv, and the servers, stage 3's worker count and the
// duration they were measured with, in the order they were measured.
void read_saved_results(BenchOptions& o, const fs::path& out, std::vector<Server>& servers,
                        Results& results) {
  std::ifstream in(out / "bench.csv");
  if (!in) throw std::runtime_error("--replot: cannot read " + (out / "bench.csv").string());
  std::string line;
  std::getline(in, line);
  if (line != bench::csv_header()) throw std::runtime_error("--replot: bench.csv has another header");
  servers.clear();
  for (; std::getline(in, line);) {
    if (line.empty()) continue;
    bench::LoadPoint point = bench::read_csv_row(line);
    bool known = false;
    for (const auto& server : servers) known = known || server.command.name == point.server;
    if (!known) {
      const bool peer = point.server.rfind("stage", 0) != 0;
      servers.push_back({{point.server, {}, peer}, peer});
    }
    if (point.scenario == "hit-1k" && point.server == "stage3-pool" && point.workers > 0)
      o.pool_workers = point.workers;
    if (point.wrk.duration_s > 0) o.duration_s = static_cast<int>(std::lround(point.wrk.duration_s));
    results.add(point);
  }
}

void measure_all(const BenchOptions& o, const fs::path& out, const std::vector<Server>& servers,
                 const std::vector<Scenario>& scenarios, Results& results,
                 std::chrono::steady_clock::time_point started);
void write_report(const BenchOptions& o, const fs::path& out, const std::vector<Server>& servers,
                  const std::vector<Scenario>& scenarios, const std::vector<int>& levels,
                  const Results& results, std::chrono::seconds elapsed);

int run(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"stage-bench: every built stage (and optional peers) side by side under wrk on "
               "the scenarios of the two studies (make bench)."};
  add_bench_options(app, o);
  CLI11_PARSE(app, argc, argv);

  if (o.bin_dir.empty()) o.bin_dir = bench::own_bin_dir();
  const fs::path out = o.out;
  std::vector<Server> servers = servers_to_compare(o, out);
  const std::vector<int> levels = bench::parse_int_list(o.connections);
  fs::create_directories(out / "logs");

  const std::vector<int> ten = {10};
  std::vector<Scenario> scenarios = {
      {"hit-1k", "hit", kSmallBody, 1, {10, 100}, o.quick_t_ms, true},
      {"hit-100k", "hit", kLargeBody, 1, ten, o.quick_t_ms, true},
      {"miss-100k", "miss", kLargeBody, 1, ten, o.quick_t_ms, false},
      {"quick-io", "miss", kSmallBody, 1, levels, o.quick_t_ms, false},
      {"long-io", "miss", kLargeBody, 50, levels, o.long_t_ms, false},
  };

  Results results;
  const auto started = std::chrono::steady_clock::now();
  if (o.replot) {
    read_saved_results(o, out, servers, results);
  } else {
    measure_all(o, out, servers, scenarios, results, started);
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started);
  write_report(o, out, servers, scenarios, levels, results, elapsed);
  return 0;
}

// One load point: `server` under scenario `s` at `c` connections, against `origin`. Throws
// when the server cannot be run or measured.
bench::LoadPoint measure_one(const BenchOptions& o, const fs::path& out, const Server& server,
                             const Scenario& s, int c, const harness::Process& origin) {
  bench::LoadPoint point;
  point.scenario = s.name;
  point.server = server.command.name;
  point.workload = s.workload;
  point.workers = server.command.name == "stage3-pool" ? o.pool_workers : 0;
  point.connections = c;
  point.body_bytes = s.body_bytes;
  point.origin_delay_ms = s.delay_ms;
  point.bound_rps = std::numeric_limits<double>::infinity();
  harness::WrkOptions wrk;
  wrk.target = "http://" + origin.address() + "/bytes/" + std::to_string(s.body_bytes) +
               "?delay_ms=" + std::to_string(s.delay_ms);
  wrk.workload = s.workload;
  wrk.connections = c;
  wrk.threads = o.wrk_threads;
  wrk.duration = std::chrono::seconds(o.duration_s);
  wrk.apdex_t_ms = s.apdex_t_ms;
  const std::string log = (out / "logs" / (server.command.name + "-" + s.name + "-c" + std::to_string(c) + ".log")).string();
  bench::ServerCommand command = server.command;
  for (auto& arg : command.argv)
    if (arg == kOriginArgument) arg = origin.address();
  bench::measure(command, wrk, log, point);
  if (server.command.name == "tinyproxy") {
    // tinyproxy closes the client connection after every response without saying so
    // (it drops Connection: close), and wrk counts that close as a read error although
    // the response was complete: one per request, not a failure. Only the excess counts.
    auto& read = point.wrk.errors.read;
    read = read > point.wrk.requests ? read - point.wrk.requests : 0;
  }
  return point;
}

// Runs every (scenario, connections, server) point, writing bench.csv after each.
void measure_all(const BenchOptions& o, const fs::path& out, const std::vector<Server>& servers,
                 const std::vector<Scenario>& scenarios, Results& results,
                 std::chrono::steady_clock::time_point started) {
  // One origin for all: each target carries its own delay (?delay_ms=).
  harness::Process origin = bench::start_origin(o.bin_dir, 0, 0, (out / "logs" / "origin.log").string());

  std::size_t total = 0;
  for (const auto& s : scenarios)
    for (const auto& server : servers)
      if (server.command.name != "nginx-direct" || s.nginx) total += s.connections.size();
  std::cerr << "stage-bench: " << servers.size() << " servers, " << total << " runs of " << o.duration_s
            << " s (about " << bench::format_duration(std::chrono::seconds(total * (o.duration_s + 1)))
            << "); writing " << out.string() << "/" << std::endl;

  std::size_t done = 0;
  auto write_csv = [&] {
    std::ofstream file(out / "bench.csv", std::ios::trunc);
    file << bench::csv_header() << "\n";
    for (const auto& p : results.all()) file << bench::csv_row(p) << "\n";
  };
  for (const auto& s : scenarios) {
    for (int c : s.connections) {
      for (const auto& server : servers) {
        if (server.command.name == "nginx-direct" && !s.nginx) continue;
        bench::LoadPoint point;
        try {
          point = measure_one(o, out, server, s, c, origin);
        } catch (const std::exception& error) {
          // One server failing (a peer not installed) must not cost the rest of the run.
          std::cerr << "stage-bench: " << server.command.name << " " << s.name << " c=" << c
                    << " failed: " << error.what() << std::endl;
          ++done;
          continue;
        }
        results.add(point);
        write_csv();
        bench::print_progress(++done, total, point, started);
      }
    }
  }
  origin.stop();
}

// bench.md's opening: how the run was made and how to read its columns.
void write_intro(std::ostream& md, const BenchOptions& o, std::chrono::seconds elapsed) {
  md << "# Stage comparison (`make bench`)\n\n"
     << "Every server ran each load point back to back, " << o.duration_s
     << " s of wrk each (" << o.wrk_threads << " wrk threads), against the harness origin on the same "
     << "machine" << (o.replot ? " (tables re-drawn from bench.csv)" : "; the whole run took " + bench::format_duration(elapsed)) << ". `stage3-pool` ran with `--workers "
     << o.pool_workers << "`; every other stage with its defaults (stage4-tuned: `--workers auto`, beside stage 3's fixed count). req/s counts answered requests only (2xx/3xx; a shed 503 "
     << "is not throughput, it is in the non-2xx column). Ratios divide a server's req/s by "
     << "stage 1's and stage 3's at the same point (above 1× = faster). Bodies: 1 kB = 1,024 bytes, "
     << "100 kB = 100,000 bytes (so one object fits Proxy Lab's 102,400-byte limit with its head).\n\n"
     << "\"dropped\" = wrk's connect + read + write + timeout errors (timeout: no answer within 2 s); "
     << "\"non-2xx\" = answers with a status of 400 or more (such as a 503 from load shedding). APDEX: "
     << "latency ≤ T satisfied (1), ≤ 4T tolerating (½), slower, dropped or non-2xx frustrated (0). "
     << "wrk counts only requests answered before the run ends: a request still queued at the end "
     << "(stage 1 at 400 connections) is in no column, so short runs flatter a long queue. "
     << "tinyproxy closes each client connection after one response without announcing it, which "
     << "wrk counts as a read error per response; those are subtracted (in bench.csv too).\n\n";
}

// bench.md's hits-versus-misses table, 1 kB and 100 kB at 10 connections.
void write_hits_versus_misses(std::ostream& md, const std::vector<Server>& servers,
                              const Results& results) {
  md << "## Hits versus misses (10 connections, 1 ms origin)\n\n"
     << "| server | 1 kB hit req/s | 1 kB miss req/s | hit ÷ miss | 100 kB hit req/s | 100 kB miss req/s | hit ÷ miss |\n"
     << "| --- | --: | --: | --: | --: | --: | --: |\n";
  for (const auto& server : servers) {
    const auto* h1 = results.find("hit-1k", 10, server.command.name);
    const auto* m1 = results.find("quick-io", 10, server.command.name);
    const auto* h100 = results.find("hit-100k", 10, server.command.name);
    const auto* m100 = results.find("miss-100k", 10, server.command.name);
    auto rps = [](const bench::LoadPoint* p) { return p ? p->wrk.ok_per_s() : std::nan(""); };
    md << "| " << server.command.name << " | " << bench::format_number(rps(h1), 0) << " | "
       << bench::format_number(rps(m1), 0) << " | " << ratio(rps(h1), m1) << " | "
       << bench::format_number(rps(h100), 0) << " | " << bench::format_number(rps(m100), 0) << " | "
       << ratio(rps(h100), m100) << " |\n";
  }
  md << "\n(1 kB misses are the quick-I/O run at 10 connections. nginx-direct serves the same bodies "
        "as static files, no proxy: the ceiling for a hit on this machine. nginx-cache (nginx "
        "proxy_cache) and varnish are caching reverse proxies in front of the same origin, kept-alive "
        "connections to it; squid and tinyproxy are forward proxies like the stages.)\n\n";
}

// bench.md's memory table: peak RSS, VSZ, threads and CPU at the top connection level.
void write_memory(std::ostream& md, const std::vector<Server>& servers, const std::vector<int>& levels,
                  const Results& results) {
  const std::string stage1 = "stage1-sequential";
  const std::string stage3 = "stage3-pool";
  const int top = levels.back();
  md << "\n## Memory at " << top << " connections (peak over the run)\n\n"
     << "| server | scenario | peak RSS MiB | ÷ stage 1 | ÷ stage 3 | peak VSZ MiB | ÷ stage 1 | ÷ stage 3 | peak threads | CPU s |\n"
     << "| --- | --- | --: | --: | --: | --: | --: | --: | --: | --: |\n";
  for (const char* scenario : {"quick-io", "long-io"}) {
    const auto* base1 = results.find(scenario, top, stage1);
    const auto* base3 = results.find(scenario, top, stage3);
    auto mem_ratio = [](long value, const bench::LoadPoint* base, bool rss) {
      if (base == nullptr) return std::string("–");
      long b = rss ? base->process.peak_rss_kib : base->process.peak_vsz_kib;
      return b > 0 ? bench::format_number(static_cast<double>(value) / static_cast<double>(b), 2) + "×"
                   : std::string("–");
    };
    for (const auto& server : servers) {
      const auto* p = results.find(scenario, top, server.command.name);
      if (p == nullptr) continue;
      md << "| " << server.command.name << " | " << scenario << " | " << mib(p->process.peak_rss_kib)
         << " | " << mem_ratio(p->process.peak_rss_kib, base1, true) << " | "
         << mem_ratio(p->process.peak_rss_kib, base3, true) << " | " << mib(p->process.peak_vsz_kib)
         << " | " << mem_ratio(p->process.peak_vsz_kib, base1, false) << " | "
         << mem_ratio(p->process.peak_vsz_kib, base3, false) << " | " << p->process.threads << " | "
         << bench::format_number(p->process.cpu_seconds, 2) << " |\n";
    }
  }
  md << "\n(A peer's numbers add up the processes its launcher script started — nginx's master and "
        "workers, for instance — with each process's own peak.)\n"
     << "\nPlots: `bench.svg` / `bench.png` (throughput and p99 against connections). Raw numbers: "
        "`bench.csv`.\n";
}

// bench.md, bench.gp and the plots, from `results`.
void write_report(const BenchOptions& o, const fs::path& out, const std::vector<Server>& servers,
                  const std::vector<Scenario>& scenarios, const std::vector<int>& levels,
                  const Results& results, std::chrono::seconds elapsed) {
  const std::string stage1 = "stage1-sequential";
  const std::string stage3 = "stage3-pool";
  std::ofstream md(out / "bench.md", std::ios::trunc);
  write_intro(md, o, elapsed);
  write_hits_versus_misses(md, servers, results);
  md << "Hit throughput with ratios:\n\n";
  throughput_table(md, results, scenarios[0], servers, stage1, stage3);
  md << "\n";
  throughput_table(md, results, scenarios[1], servers, stage1, stage3);
  for (std::size_t i = 3; i < scenarios.size(); ++i) {
    const auto& s = scenarios[i];
    md << "\n## " << (s.name == "quick-io" ? "Quick I/O: 1 kB body, 1 ms origin" : "Long I/O: 100 kB body, 50 ms origin")
       << ", miss path\n\nThroughput:\n\n";
    throughput_table(md, results, s, servers, stage1, stage3);
    md << "\nLatency, APDEX (T = " << bench::format_number(s.apdex_t_ms, 0)
       << " ms) and errors:\n\n";
    latency_table(md, results, s, servers);
  }
  write_memory(md, servers, levels, results);
  md.close();

  const fs::path script = out / "bench.gp";
  std::ofstream(script, std::ios::trunc) << gnuplot_script(out, servers, scenarios[3], scenarios[4], results);
  bench::run_gnuplot(script.string());
  std::cerr << "stage-bench: wrote " << (out / "bench.md").string() << ", bench.csv, bench.svg, bench.png in "
            << bench::format_duration(elapsed) << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "stage-bench: " << error.what() << std::endl;
    return 1;
  }
}
