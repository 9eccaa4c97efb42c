// How the scripted origin behaves past its capacity: the downstream bottleneck a proxy's
// concurrency meets. "The thread pool, measured" saw throughput climb past the cores, peak and
// then collapse as workers were added; an origin that only queues (FIFO) shows the climb and a
// plateau, never the collapse. These laws give the sweep and stage 4's limiter every kind of
// downstream: one that queues, one that thrashes, one that fails. Pure arithmetic, unit-tested
// (tests/unit/downstream_test.cpp); origin_server.cpp applies them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace harness {

/// What an origin with a capacity K does with the requests past it.
enum class Overload {
  /// At most K in service; the rest wait in FIFO order. Throughput rises to K / delay, then
  /// stays flat: more concurrency only adds waiting (a pool of K threads with a queue).
  queue,
  /// Every request is served at once, but service slows as more are in service together (a
  /// database or disk that thrashes): n in service, each takes delay × max(1, (n/K)²), so
  /// throughput n / service time peaks at n = K and falls as K²/n past it — at 2K, half.
  /// Latency spreads before the peak: with chance min(1, n/K)⁴ / 20 (1 in 20 from n = K on) a
  /// request takes 4× as long, so p99 is best well below K while throughput still climbs.
  thrash,
  /// Every request is served at once; one that starts with more than K in service fails: 503
  /// after a tenth of the delay (at least 1 ms). Throughput of good answers is flat at
  /// K / delay; errors grow with n (an origin whose connection or thread pool is exhausted).
  fail,
};

/// "queue", "thrash", "fail" → the law; anything else → nullopt.
std::optional<Overload> parse_overload(std::string_view name);
/// The law's name, as parse_overload takes it.
std::string_view overload_name(Overload law);

/// What the origin does with one request.
struct Service {
  std::uint64_t delay_ms = 0;  ///< how long before the answer starts, in ms
  bool fails = false;          ///< answer 503 instead of the path's reply
};

/// The service a request gets under `law` when it starts with `in_service` requests in service
/// (itself included), capacity `capacity` (> 0) and planned delay `delay_ms` (the path's and
/// --delay-ms together). `uniform` in [0, 1) decides the thrash law's slow requests (a request is
/// slow when uniform < its chance). Under `queue` the caller has already made it wait for its
/// place, so the delay is the plan's. Pure; thread-safe.
Service service_for(Overload law, int capacity, int in_service, std::uint64_t delay_ms,
                    double uniform);

/// The thrash law's mean slowdown at n in service: E[service] / delay. Where throughput peaks
/// and how far it falls (n / (delay × slowdown(n))) follows from it; the sizing simulator and
/// docs/results.md use it.
double thrash_slowdown(int capacity, int in_service);

}  // namespace harness
