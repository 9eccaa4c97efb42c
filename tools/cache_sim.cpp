// cache-sim: replays a request stream against the proxy's own cache policies (common/) and
// prints, per policy, the hit ratio and the byte hit ratio. Every request goes to every policy
// in the same order, so the policies are compared on exactly the same stream; on a miss the
// object is inserted, as the proxy does after fetching it from the origin.
//
//   cache-sim --policy lru,lfu,sieve --cache-bytes N --workload zipf|shift|scan|mixed
//             --requests N --seed S          (a synthetic workload)
//   cache-sim --trace FILE                   (one "key size" pair per line)
//
// Synthetic workloads are deterministic: the same flags give the same table on any machine
// (our own SplitMix64 and samplers, not std::*_distribution, whose output the standard leaves
// to each library).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache/cache_factory.h"

namespace proxy::sim {
namespace {

// ---- deterministic randomness --------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014):
/// tiny, fast and good enough to draw requests; the same seed gives the same stream everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return finalize(state_ += 0x9e3779b97f4a7c15ULL); }
  /// Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// SplitMix64's output function, also used to hash (seed, key) into an object's size.
  static std::uint64_t finalize(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

double unit_from(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// ---- object sizes --------------------------------------------------------------------------

/// Object sizes, in bytes as the cache charges them (URL + head + body). Each key's size is a
/// pure function of (seed, key): an object has the same size every time it is requested.
struct SizeDistribution {
  std::string kind = "lognormal";  ///< fixed | uniform | lognormal
  double mean = 8192;              ///< fixed: the size; lognormal: the mean before clamping
  double sigma = 1.0;              ///< lognormal: standard deviation of ln(size)
  std::size_t min = 256;           ///< sizes are clamped to [min, max]; uniform draws from it
  std::size_t max = 102'400;

  [[nodiscard]] std::size_t size_of(std::uint64_t seed, std::uint64_t id) const {
    const std::uint64_t h1 = SplitMix64::finalize(seed ^ SplitMix64::finalize(2 * id + 1));
    const std::uint64_t h2 = SplitMix64::finalize(h1 + 0x9e3779b97f4a7c15ULL);
    double size = mean;
    if (kind == "uniform") {
      size = static_cast<double>(min) + unit_from(h1) * static_cast<double>(max - min + 1);
    } else if (kind == "lognormal") {
      // Box-Muller; mu chosen so that E[size] = mean before clamping.
      const double u1 = 1.0 - unit_from(h1);  // (0, 1]: log() stays finite
      const double normal =
          std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * unit_from(h2));
      const double mu = std::log(mean) - sigma * sigma / 2.0;
      size = std::exp(mu + sigma * normal);
    }
    size = std::clamp(size, static_cast<double>(min), static_cast<double>(max));
    return static_cast<std::size_t>(size);
  }

  [[nodiscard]] std::string describe() const {
    std::ostringstream out;
    if (kind == "fixed") {
      out << "fixed " << static_cast<std::size_t>(mean) << " B";
    } else if (kind == "uniform") {
      out << "uniform " << min << "-" << max << " B";
    } else {
      out << "lognormal mean " << static_cast<std::size_t>(mean) << " B sigma " << sigma
          << ", clamped to " << min << "-" << max << " B";
    }
    return out.str();
  }
};

// ---- request streams -----------------------------------------------------------------------

/// One request: the cache key and the object's size in bytes as the cache charges it.
struct Request {
  std::string key;
  std::size_t bytes = 0;
};

/// A source of requests, read once from start to end.
class Workload {
 public:
  virtual ~Workload() = default;
  /// Fills `request` with the next request; false at the end of the stream.
  virtual bool next(Request& request) = 0;
  /// One line saying what the stream is, for the report.
  [[nodiscard]] virtual std::string describe() const = 0;
  /// The index of the first request after popularity moves, for workloads that move it.
  [[nodiscard]] virtual std::optional<std::uint64_t> shift_at() const { return std::nullopt; }
  /// The keys that were popular before the shift and are never requested after it.
  [[nodiscard]] virtual std::vector<std::string> keys_before_shift() const { return {}; }
};

/// Zipf's law over `n` ranks: P(rank r) ∝ 1 / (r + 1)^alpha, drawn by inverting the CDF.
class Zipf {
 public:
  Zipf(std::size_t n, double alpha) : cdf_(n) {
    double sum = 0;
    for (std::size_t r = 0; r < n; ++r) cdf_[r] = sum += 1.0 / std::pow(double(r + 1), alpha);
    for (double& c : cdf_) c /= sum;
  }
  /// The rank for a uniform draw `u` in [0, 1): 0 is the most popular.
  [[nodiscard]] std::size_t rank(double u) const {
    auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return it == cdf_.end() ? cdf_.size() - 1 : static_cast<std::size_t>(it - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

/// The shapes of synthetic traffic. Popular requests draw a rank from Zipf's law; keys
/// 0..keys-1 are the popular set, keys..2*keys-1 the set popularity moves to in `shift` and
/// `mixed`, and keys from 2*keys on are requested once each (the scan, one-hit wonders).
///   zipf   popularity never changes: the best case for LFU.
///   shift  at shift_at, every popular request moves to the second set (same ranks, new keys).
///   scan   scan_fraction of the requests, evenly spread, read the next never-seen key.
///   mixed  shift, plus one_hit_fraction of requests, at random, for never-seen keys.
struct SyntheticOptions {
  std::string workload = "zipf";
  std::uint64_t requests = 1'000'000;
  std::uint64_t seed = 1;
  std::size_t keys = 10'000;
  double alpha = 0.9;
  double shift_at = 0.5;          ///< fraction of the requests after which popularity moves
  double scan_fraction = 0.5;     ///< scan: fraction of requests that belong to the scan
  double one_hit_fraction = 0.3;  ///< mixed: fraction of requests for one-hit wonders
};

class SyntheticWorkload final : public Workload {
 public:
  SyntheticWorkload(const SyntheticOptions& options, const SizeDistribution& sizes)
      : options_(options),
        sizes_(sizes),
        random_(options.seed),
        zipf_(options.keys, options.alpha),
        shift_point_(
            static_cast<std::uint64_t>(options.shift_at * static_cast<double>(options.requests))),
        next_unique_(2 * static_cast<std::uint64_t>(options.keys)) {}

  bool next(Request& request) override {
    if (emitted_ == options_.requests) return false;
    const std::uint64_t id = pick(emitted_++);
    request.key = key_for(id);
    request.bytes = sizes_.size_of(options_.seed, id);
    return true;
  }

  [[nodiscard]] std::vector<std::string> keys_before_shift() const override {
    std::vector<std::string> keys;
    if (!shift_at()) return keys;
    keys.reserve(options_.keys);
    for (std::uint64_t id = 0; id < options_.keys; ++id) keys.push_back(key_for(id));
    return keys;
  }

  [[nodiscard]] std::optional<std::uint64_t> shift_at() const override {
    if (options_.workload == "shift" || options_.workload == "mixed") return shift_point_;
    return std::nullopt;
  }

  [[nodiscard]] std::string describe() const override {
    std::ostringstream out;
    out << options_.workload << ": " << options_.requests << " requests, zipf alpha "
        << options_.alpha << " over " << options_.keys << " keys";
    if (shift_at()) {
      out << ", moving to " << options_.keys << " new keys after request " << shift_point_;
    }
    if (options_.workload == "scan") {
      out << ", " << options_.scan_fraction * 100 << "% of requests from a scan of new keys";
    }
    if (options_.workload == "mixed") {
      out << ", " << options_.one_hit_fraction * 100 << "% one-hit wonders interleaved";
    }
    out << "; seed " << options_.seed;
    return out.str();
  }

 private:
  static std::string key_for(std::uint64_t id) {
    return "http://origin.sim/object/" + std::to_string(id);
  }

  std::uint64_t popular(std::uint64_t index) {
    const std::uint64_t base = index < shift_point_ ? 0 : options_.keys;
    return base + zipf_.rank(random_.unit());
  }

  std::uint64_t pick(std::uint64_t index) {
    const std::string& w = options_.workload;
    if (w == "shift") return popular(index);
    if (w == "scan") {
      // A crawler or a backup reads keys in order, each once, alongside the popular traffic;
      // its requests are spread evenly through the stream.
      const auto scanned = [&](std::uint64_t i) {
        return static_cast<std::uint64_t>(options_.scan_fraction * static_cast<double>(i));
      };
      if (scanned(index + 1) > scanned(index)) return next_unique_++;
      return zipf_.rank(random_.unit());
    }
    if (w == "mixed") {
      if (random_.unit() < options_.one_hit_fraction) return next_unique_++;
      return popular(index);
    }
    return zipf_.rank(random_.unit());
  }

  SyntheticOptions options_;
  SizeDistribution sizes_;
  SplitMix64 random_;
  Zipf zipf_;
  std::uint64_t shift_point_;
  std::uint64_t next_unique_;
  std::uint64_t emitted_ = 0;
};

/// Requests read from a file: one "key size" pair per line; blank lines and lines starting
/// with '#' are skipped. Throws std::runtime_error naming the line of anything else.
class TraceWorkload final : public Workload {
 public:
  explicit TraceWorkload(const std::string& path) : path_(path), in_(path) {
    if (!in_) throw std::runtime_error("cannot open trace " + path);
  }

  bool next(Request& request) override {
    std::string line;
    while (std::getline(in_, line)) {
      ++line_number_;
      std::istringstream fields(line);
      std::string key;
      if (!(fields >> key) || key[0] == '#') continue;
      long long bytes = -1;
      std::string extra;
      if (!(fields >> bytes) || bytes < 0 || (fields >> extra)) {
        throw std::runtime_error(path_ + ":" + std::to_string(line_number_) +
                                 ": expected \"key size\", got \"" + line + "\"");
      }
      request.key = std::move(key);
      request.bytes = static_cast<std::size_t>(bytes);
      return true;
    }
    return false;
  }

  [[nodiscard]] std::string describe() const override { return "trace " + path_; }

 private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t line_number_ = 0;
};

// ---- replaying ------------------------------------------------------------------------------

/// One policy's cache and what it scored, in total and on each side of a shift.
struct Run {
  std::string policy;
  std::unique_ptr<Cache> cache;
  std::uint64_t hits[2] = {0, 0};  // [before the shift, after it]; all in [0] otherwise
  std::uint64_t requests[2] = {0, 0};
  std::uint64_t hit_bytes = 0;
  std::uint64_t window_hits = 0;
  CacheStats at_end{};            // the cache's counters once the stream is over
  std::uint64_t stale_bytes = 0;  // bytes cached at the end for keys unrequested since the shift
};

/// The response the "origin" returns for `request`: charged exactly request.bytes under
/// request.key (or the key's length, if the size is smaller than the key).
std::shared_ptr<const CachedResponse> make_object(const Request& request) {
  const std::size_t body =
      request.bytes > request.key.size() ? request.bytes - request.key.size() : 0;
  return std::make_shared<const CachedResponse>(CachedResponse{{}, std::string(body, 'x')});
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * double(part) / double(whole));
  return text;
}

struct ReportOptions {
  bool csv = false;
  std::uint64_t timeline = 0;  ///< print hit ratio per window of this many requests; 0 = off
};

void print_report(const std::vector<Run>& runs, std::uint64_t total_requests,
                  std::uint64_t total_bytes, const Workload& workload, bool shifted,
                  const ReportOptions& report) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"policy", "requests", "hit ratio", "byte hit ratio"};
  if (shifted) {
    header.insert(header.end(), {"before shift", "after shift", "stale bytes at end"});
  }
  header.insert(header.end(), {"evictions", "bytes cached"});
  rows.push_back(header);
  for (const Run& run : runs) {
    const CacheStats& stats = run.at_end;
    std::vector<std::string> row = {run.policy, std::to_string(total_requests),
                                    percent(run.hits[0] + run.hits[1], total_requests),
                                    percent(run.hit_bytes, total_bytes)};
    if (shifted) {
      row.push_back(percent(run.hits[0], run.requests[0]));
      row.push_back(percent(run.hits[1], run.requests[1]));
      row.push_back(percent(run.stale_bytes, stats.bytes));
    }
    row.push_back(std::to_string(stats.evictions));
    row.push_back(std::to_string(stats.bytes));
    rows.push_back(row);
  }

  if (report.csv) {
    for (const auto& row : rows) {
      for (std::size_t i = 0; i < row.size(); ++i) {
        std::string cell = row[i];
        if (cell.size() > 1 && cell.back() == '%') cell.pop_back();  // numbers in CSV
        std::replace(cell.begin(), cell.end(), ' ', '_');
        std::cout << (i ? "," : "") << cell;
      }
      std::cout << '\n';
    }
    return;
  }
  std::cout << "# " << workload.describe() << '\n';
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::cout << '|';
    for (std::size_t i = 0; i < rows[r].size(); ++i) {
      const std::string& cell = rows[r][i];
      const std::string pad(width[i] - cell.size(), ' ');
      // Names left, numbers right, as Markdown renders them with the separator below.
      std::cout << ' ' << (i == 0 ? cell + pad : pad + cell) << " |";
    }
    std::cout << '\n';
    if (r == 0) {
      std::cout << '|';
      for (std::size_t i = 0; i < width.size(); ++i) {
        const std::string dashes(width[i] - 1, '-');
        std::cout << ' ' << (i == 0 ? ":" + dashes : dashes + ":") << " |";
      }
      std::cout << '\n';
    }
  }
}

int replay(Workload& workload, const std::vector<std::string>& policies, std::size_t cache_bytes,
           std::size_t max_object_bytes, const ReportOptions& report) {
  std::vector<Run> runs;
  runs.reserve(policies.size());
  for (const auto& policy : policies) {
    runs.push_back(Run{policy, make_cache(policy, cache_bytes, max_object_bytes)});
  }
  const std::optional<std::uint64_t> shift = workload.shift_at();
  if (report.timeline != 0) {
    std::cout << (report.csv ? "requests" : "# timeline: hit ratio per window of ")
              << (report.csv ? "" : std::to_string(report.timeline) + " requests\n# requests");
    for (const Run& run : runs) std::cout << (report.csv ? "," : " ") << run.policy;
    std::cout << '\n';
  }

  Request request;
  std::uint64_t index = 0;
  std::uint64_t total_bytes = 0;
  while (workload.next(request)) {
    const int phase = shift && index >= *shift ? 1 : 0;
    total_bytes += request.bytes;
    // One object per miss, shared by every policy that missed: entries are immutable, and it
    // saves building the same body once per policy.
    std::shared_ptr<const CachedResponse> object;
    for (Run& run : runs) {
      ++run.requests[phase];
      if (run.cache->find(request.key)) {
        ++run.hits[phase];
        ++run.window_hits;
        run.hit_bytes += request.bytes;
        continue;
      }
      if (!object) object = make_object(request);
      run.cache->insert(request.key, object);
    }
    ++index;
    if (report.timeline != 0 && index % report.timeline == 0) {
      std::cout << (report.csv ? "" : "# ") << index;
      for (Run& run : runs) {
        std::cout << (report.csv ? "," : " ") << percent(run.window_hits, report.timeline);
        run.window_hits = 0;
      }
      std::cout << '\n';
    }
  }
  // Which of yesterday's favourites are still cached? Probing with find() counts hits, so the
  // counters are read first.
  const std::vector<std::string> stale_keys = workload.keys_before_shift();
  for (Run& run : runs) {
    run.at_end = run.cache->stats();
    for (const std::string& key : stale_keys) {
      if (auto found = run.cache->find(key)) run.stale_bytes += entry_bytes(key, *found);
    }
  }
  print_report(runs, index, total_bytes, workload, shift.has_value(), report);
  return 0;
}

/// The flags of the synthetic workload and its object sizes; returns --workload's option (a
/// trace excludes it).
CLI::Option* add_synthetic_options(CLI::App& app, SyntheticOptions& synthetic,
                                   SizeDistribution& sizes) {
  CLI::Option* workload_option =
      app.add_option("--workload", synthetic.workload,
                     "zipf: fixed popularity; shift: popularity moves to new keys at "
                     "--shift-at; scan: zipf plus a scan reading new keys once; mixed: "
                     "shift plus random one-hit wonders")
          ->check(CLI::IsMember({"zipf", "shift", "scan", "mixed"}))
          ->capture_default_str();
  app.add_option("--requests", synthetic.requests, "Requests to generate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", synthetic.seed, "Random seed")->capture_default_str();
  app.add_option("--keys", synthetic.keys, "Keys in the popular set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--zipf-alpha", synthetic.alpha, "Zipf exponent of popularity")
      ->check(CLI::Range(0.0, 5.0))
      ->capture_default_str();
  app.add_option("--shift-at", synthetic.shift_at,
                 "shift/mixed: fraction of requests after which popularity moves")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--scan-fraction", synthetic.scan_fraction,
                 "scan: fraction of requests that read the next key of a scan")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--one-hit-fraction", synthetic.one_hit_fraction,
                 "mixed: fraction of requests for keys never requested again")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--size-dist", sizes.kind, "Object size distribution")
      ->check(CLI::IsMember({"fixed", "uniform", "lognormal"}))
      ->capture_default_str();
  app.add_option("--size-mean", sizes.mean, "fixed: the size; lognormal: its mean, in bytes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--size-sigma", sizes.sigma, "lognormal: standard deviation of ln(size)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--size-min", sizes.min, "Smallest object, bytes")->capture_default_str();
  app.add_option("--size-max", sizes.max, "Largest object, bytes")->capture_default_str();
  return workload_option;
}

/// Parses the command line and replays; the exit status. Throws on a bad trace or bad sizes.
int run_cli(int argc, char** argv) {
  CLI::App app{
      "Replays a workload or a trace against the proxy's cache policies and prints hit ratio "
      "and byte hit ratio per policy. Sizes are bytes as the proxy charges them: URL + head + "
      "body.",
      "cache-sim"};
  std::vector<std::string> policies = {"lru", "lfu", "sieve"};
  std::size_t cache_bytes = 1'049'000;
  std::size_t max_object_bytes = 102'400;
  SyntheticOptions synthetic;
  SizeDistribution sizes;
  std::string trace;
  ReportOptions report;

  app.add_option("--policy", policies, "Policies to compare, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(proxy::cache_policy_names()))
      ->capture_default_str();
  app.add_option("--cache-bytes", cache_bytes, "Cache size in bytes")->capture_default_str();
  app.add_option("--max-object-bytes", max_object_bytes, "Largest cached object in bytes")
      ->capture_default_str();
  CLI::Option* workload_option = add_synthetic_options(app, synthetic, sizes);
  app.add_option("--trace", trace, "Replay FILE instead: one \"key size\" pair per line")
      ->check(CLI::ExistingFile)
      ->excludes(workload_option);
  app.add_option("--timeline", report.timeline,
                 "Also print each policy's hit ratio per window of N requests");
  app.add_flag("--csv", report.csv, "Print CSV instead of a table");
  CLI11_PARSE(app, argc, argv);

  if (sizes.min > sizes.max) throw std::invalid_argument("--size-min exceeds --size-max");
  std::unique_ptr<Workload> workload;
  if (!trace.empty()) {
    workload = std::make_unique<TraceWorkload>(trace);
  } else {
    workload = std::make_unique<SyntheticWorkload>(synthetic, sizes);
  }
  if (!report.csv) {
    std::cout << "# cache " << cache_bytes << " B, max object " << max_object_bytes << " B";
    if (trace.empty()) std::cout << "; sizes " << sizes.describe();
    std::cout << '\n';
  }
  return replay(*workload, policies, cache_bytes, max_object_bytes, report);
}

}  // namespace
}  // namespace proxy::sim

int main(int argc, char** argv) {
  try {
    return proxy::sim::run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cache-sim: " << e.what() << '\n';
    return 1;
  }
}
