// cache-bench: lookups and inserts per second for every cache policy and every thread-safety
// wrapper at 1, 2, 4 and 8 threads (Google Benchmark). `make bench-cache` runs it; it is not part
// of `make test`.
//
// Two mixes, both over Proxy Lab's limits (1,049,000-byte cache, 102,400-byte objects) with
// object sizes drawn lognormally around 8 KiB and URLs of realistic length:
//   hits   every request is a find() of a resident object — the path the low-contention cache
//          exists for;
//   mix90  nine requests in ten find a resident object; the tenth asks for a cold one, misses
//          and inserts it, as the proxy does after fetching it, which evicts.
// Names read MIX/WRAPPER/POLICY/real_time/threads:N, e.g. hits/sharded8/sieve/real_time/threads:4;
// WRAPPER is plain (the policy alone, one thread), locked (LockedCache), shared-lock (one
// ConcurrentSieveCache) or sharded8 (make_concurrent_cache with 8 shards).
// items_per_second counts every cache call (find or insert) by all threads together.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache/cache_factory.h"
#include "cache/concurrent_sieve_cache.h"
#include "cache/locked_cache.h"
#include "cache/sharded_cache.h"

namespace proxy {
namespace {

constexpr std::size_t kCapacity = 1'049'000;  // Proxy Lab's MAX_CACHE_SIZE
constexpr std::size_t kMaxObject = 102'400;   // Proxy Lab's MAX_OBJECT_SIZE
constexpr std::size_t kShards = 8;            // the most that keeps a 100 KiB object cacheable
constexpr double kHotShare = 0.6;             // of the capacity: the hot set stays resident
constexpr std::size_t kColdKeys = 20'000;

/// xorshift64: the cheapest decent generator, so the benchmark measures the cache, not it.
std::uint64_t next_random(std::uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

std::string url(const char* kind, std::size_t i) {
  return std::string("http://origin.example:8080/static/") + kind + "/object-" + std::to_string(i) +
         ".bin";
}

/// Objects are charged 256 B to 100 KiB, lognormal around a median of 5 KiB (mean about 8 KiB),
/// roughly the shape of web objects.
std::shared_ptr<const CachedResponse> object(std::uint64_t& random, std::string_view key) {
  const double u1 = (static_cast<double>(next_random(random) >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(next_random(random) >> 11) * 0x1.0p-53;
  const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  const double size = std::clamp(5000.0 * std::exp(normal), 256.0, double(kMaxObject));
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n";
  const std::size_t body =
      static_cast<std::size_t>(size) - std::min<std::size_t>(size, key.size() + head.size());
  return std::make_shared<const CachedResponse>(CachedResponse{head, std::string(body, 'x')});
}

/// The keys and objects every run shares, built once.
struct Corpus {
  std::vector<std::string> hot_keys;
  std::vector<std::shared_ptr<const CachedResponse>> hot;
  std::vector<std::string> cold_keys;
  std::vector<std::shared_ptr<const CachedResponse>> cold;

  Corpus() {
    std::uint64_t random = 42;
    // The hot set must stay resident in every subject, the sharded ones included, where each
    // key may only use its own shard's share: a key whose shard is already at kHotShare of
    // its share is left out of the hot set.
    const auto sharded = make_concurrent_cache("lru", kShards, kCapacity, kMaxObject);
    const auto& router = dynamic_cast<const ShardedCache&>(*sharded);
    std::vector<std::size_t> shard_bytes(kShards, 0);
    const double shard_budget = kHotShare * double(kCapacity) / double(kShards);
    std::size_t bytes = 0;
    for (std::size_t i = 0; bytes < kHotShare * kCapacity && i < 100'000; ++i) {
      std::string key = url("hot", i);
      auto response = object(random, key);
      const std::size_t charge = entry_bytes(key, *response);
      std::size_t& in_shard = shard_bytes[router.shard_index(key)];
      if (double(in_shard + charge) > shard_budget) continue;
      in_shard += charge;
      bytes += charge;
      hot_keys.push_back(std::move(key));
      hot.push_back(std::move(response));
    }
    for (std::size_t i = 0; i < kColdKeys; ++i) {
      cold_keys.push_back(url("cold", i));
      // The cache does not care that cold keys share objects; it saves building 160 MB.
      if (cold.size() < 256) cold.push_back(object(random, cold_keys.back()));
    }
  }
};

const Corpus& corpus() {
  static const Corpus instance;
  return instance;
}

using Maker = std::function<std::unique_ptr<Cache>()>;

// The cache under test, built by thread 0 before the timed loop; Google Benchmark starts the
// loop in every thread only after all have reached it, so the others see it complete.
std::unique_ptr<Cache> g_cache;

void run(benchmark::State& state, const Maker& make, bool with_misses) {
  const Corpus& data = corpus();
  if (state.thread_index() == 0) {
    g_cache = make();
    for (std::size_t i = 0; i < data.hot_keys.size(); ++i) {
      g_cache->insert(data.hot_keys[i], data.hot[i]);
    }
  }
  // Each worker parses its own copy of a request's key; sharing one set of key strings among
  // the threads would put them on cache lines next to other threads' writes.
  const std::vector<std::string> hot_keys = data.hot_keys;
  const std::vector<std::string> cold_keys = data.cold_keys;
  std::uint64_t random = 0x9e3779b97f4a7c15ULL * (state.thread_index() + 1);
  std::uint64_t finds = 0;
  std::uint64_t hits = 0;
  std::uint64_t inserts = 0;
  for (auto _ : state) {
    const std::uint64_t r = next_random(random);
    const bool cold = with_misses && r % 10 == 0;
    const std::size_t i = (r >> 8) % (cold ? cold_keys.size() : hot_keys.size());
    const std::string& key = cold ? cold_keys[i] : hot_keys[i];
    std::shared_ptr<const CachedResponse> found = g_cache->find(key);
    ++finds;
    if (found) {
      ++hits;
    } else {
      g_cache->insert(key, cold ? data.cold[i % data.cold.size()] : data.hot[i]);
      ++inserts;
    }
    benchmark::DoNotOptimize(found);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(finds + inserts));
  state.counters["lookups"] = benchmark::Counter(double(finds), benchmark::Counter::kIsRate);
  state.counters["inserts"] = benchmark::Counter(double(inserts), benchmark::Counter::kIsRate);
  state.counters["hit_ratio"] = benchmark::Counter(finds ? double(hits) / double(finds) : 0.0,
                                                   benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) {
    // Every thread has left the loop (Google Benchmark waits for all of them) before this.
    g_cache.reset();
  }
}

struct Subject {
  std::string wrapper;
  std::string policy;
  Maker make;
  bool thread_safe;
};

std::vector<Subject> subjects() {
  std::vector<Subject> list;
  for (const std::string policy : {"lru", "lfu", "sieve"}) {
    list.push_back(
        {"plain", policy, [policy] { return make_cache(policy, kCapacity, kMaxObject); }, false});
  }
  for (const std::string policy : {"lru", "lfu", "sieve"}) {
    list.push_back({"locked", policy,
                    [policy] {
                      return std::make_unique<LockedCache>(
                          make_cache(policy, kCapacity, kMaxObject));
                    },
                    true});
  }
  list.push_back({"shared-lock", "sieve",
                  [] { return std::make_unique<ConcurrentSieveCache>(kCapacity, kMaxObject); },
                  true});
  for (const std::string policy : {"lru", "lfu", "sieve"}) {
    list.push_back(
        {"sharded" + std::to_string(kShards), policy,
         [policy] { return make_concurrent_cache(policy, kShards, kCapacity, kMaxObject); }, true});
  }
  return list;
}

void register_benchmarks() {
  for (const bool with_misses : {false, true}) {
    for (const Subject& subject : subjects()) {
      const std::string name =
          std::string(with_misses ? "mix90/" : "hits/") + subject.wrapper + "/" + subject.policy;
      auto* bench = benchmark::RegisterBenchmark(
          name.c_str(), [make = subject.make, with_misses](benchmark::State& state) {
            run(state, make, with_misses);
          });
      bench->UseRealTime();
      // A plain policy is not thread-safe: it runs single-threaded, as the baseline.
      if (subject.thread_safe) {
        bench->Threads(1)->Threads(2)->Threads(4)->Threads(8);
      } else {
        bench->Threads(1);
      }
    }
  }
}

}  // namespace
}  // namespace proxy

int main(int argc, char** argv) {
  // 0.2 s per benchmark keeps the whole run under a minute; --benchmark_min_time overrides it.
  std::vector<char*> args(argv, argv + argc);
  bool min_time_given = false;
  for (int i = 1; i < argc; ++i) {
    min_time_given |= std::string(argv[i]).rfind("--benchmark_min_time", 0) == 0;
  }
  std::string default_min_time = "--benchmark_min_time=0.2";
  if (!min_time_given) args.push_back(default_min_time.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  proxy::register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
