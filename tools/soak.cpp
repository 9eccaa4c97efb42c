// soak: runs a mixed load — hits, misses, origin errors, a stalled origin, slow clients and
// clients that hang up mid-body — against stage binaries for a set time, and checks that each
// stays up, that its resident memory and open descriptors stay flat once warmed up, and that it
// stops cleanly. `make soak` runs it against stages 3 and 4 (those that exist); see docs/hardening.md.
//
//   soak [--seconds N] [--clients N] [--bin-dir DIR] [--stages stage3-pool,stage4-tuned]
//        [--valgrind-stages stage1-sequential,...|none]
//
// Then it stops each stage in --valgrind-stages under Valgrind's memcheck with four large
// transfers in flight, and fails on any memory error or lost block.
//
// Prints one line per sample and a verdict per stage; exits 1 when any stage fails.
#include <CLI/CLI.hpp>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher.h"
#include "net/socket.h"
#include "origin_server.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Resident memory of a process, in KiB (VmRSS), or -1.
long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

/// Open descriptors of a process, or -1.
int open_fds(pid_t pid) {
  std::error_code error;
  int count = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", error), end;
       !error && it != end; it.increment(error)) {
    ++count;
  }
  return error ? -1 : count;
}

/// What the load did, summed over every client thread.
struct LoadCounts {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> answered{0};   // a status line came back
  std::atomic<std::uint64_t> failures{0};   // could not connect, or nothing came back in time
};

// Reads until the peer closes or `timeout` passes; returns the bytes.
std::string read_all(const proxy::Socket& socket, std::chrono::milliseconds timeout) {
  std::string out;
  std::array<char, 65536> buf;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) return out;
    auto got = socket.read_some(buf, left);
    if (got.status != proxy::IoStatus::ok) return out;
    out.append(buf.data(), got.bytes);
  }
}

// One client's loop: a weighted mix of the ways a proxy is used and misused.
void client_loop(std::uint16_t port, const std::string& origin, std::uint16_t dead_port,
                 unsigned seed, std::atomic<bool>& stop, LoadCounts& counts) {
  std::mt19937 random(seed);
  std::uint64_t unique = 0;
  while (!stop.load()) {
    const int kind = static_cast<int>(random() % 100);
    std::string url;
    bool hang_up = false;
    bool trickle = false;
    if (kind < 50) {
      url = origin + "/bytes/4000?hot=" + std::to_string(random() % 20);  // mostly hits
    } else if (kind < 70) {
      url = origin + "/bytes/" + std::to_string(1000 + random() % 60000) + "?u=" +
            std::to_string(seed) + "-" + std::to_string(unique++);  // misses, some evict
    } else if (kind < 76) {
      url = origin + "/status/" + std::to_string(500 + random() % 4);
    } else if (kind < 80) {
      url = "http://127.0.0.1:" + std::to_string(dead_port) + "/refused";
    } else if (kind < 84) {
      url = origin + "/truncate/20000?u=" + std::to_string(unique++);
    } else if (kind < 87) {
      url = origin + "/stall";  // answered 504 after --origin-timeout-ms
    } else if (kind < 93) {
      url = origin + "/bytes/2000000?u=" + std::to_string(unique++);
      hang_up = true;
    } else {
      url = origin + "/bytes/500?slow=" + std::to_string(random() % 5);
      trickle = true;
    }
    const std::string request = "GET " + url + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    counts.requests++;
    auto connected = proxy::connect_tcp("127.0.0.1", port, 5s);
    if (connected.error != proxy::ConnectError::none) {
      counts.failures++;
      continue;
    }
    proxy::Socket& socket = connected.socket;
    bool sent = true;
    if (trickle) {
      for (std::size_t at = 0; at < request.size() && sent; at += 7) {
        sent = socket.write_all(std::string_view(request).substr(at, 7), 5s).status ==
               proxy::IoStatus::ok;
      }
    } else {
      sent = socket.write_all(request, 5s).status == proxy::IoStatus::ok;
    }
    if (!sent) {
      counts.failures++;
      continue;
    }
    if (hang_up) {
      std::array<char, 16384> buf;
      socket.read_some(buf, 10s);
      socket.reset();
      counts.answered++;
      continue;
    }
    std::string response = read_all(socket, 20s);
    if (response.rfind("HTTP/1.1 ", 0) == 0) {
      counts.answered++;
    } else {
      counts.failures++;
    }
  }
}

struct Verdict {
  bool ok = true;
  std::string why;
};

// What the stage's memory and descriptors did during the load.
struct Samples {
  bool exited = false;  // the stage exited during the load
  long warm_rss = -1;   // KiB, the first sample after warm-up
  long max_rss_after_warm = 0;
  int max_fds = 0;
};

// Samples the stage once a second for `seconds`, printing each sample. Warm-up is the first
// fifth (caches fill, threads and allocator arenas appear); after it, memory and descriptors
// may wobble but not climb.
Samples sample_under_load(harness::Process& stage, int seconds, const LoadCounts& counts) {
  const auto start = Clock::now();
  const auto warm = start + std::chrono::seconds(std::max(1, seconds / 5));
  const auto end = start + std::chrono::seconds(seconds);
  Samples samples;
  while (Clock::now() < end) {
    std::this_thread::sleep_for(1s);  // a sampling period, not a wait for an event
    if (!stage.running()) {
      samples.exited = true;
      break;
    }
    const long rss = rss_kib(stage.pid());
    const int fds = open_fds(stage.pid());
    const auto t = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count();
    std::cout << "  t=" << t << "s rss_kib=" << rss << " fds=" << fds
              << " requests=" << counts.requests << " failures=" << counts.failures << std::endl;
    if (Clock::now() >= warm) {
      if (samples.warm_rss < 0) samples.warm_rss = rss;
      samples.max_rss_after_warm = std::max(samples.max_rss_after_warm, rss);
    }
    samples.max_fds = std::max(samples.max_fds, fds);
  }
  return samples;
}

// Once the load has stopped: the descriptors must be back to what an idle stage holds, memory
// must not have climbed past warm-up, something must have been answered, and SIGTERM must stop
// the stage cleanly.
Verdict judge_when_quiet(harness::Process& stage, const Samples& samples, const LoadCounts& counts) {
  const int idle_fds = open_fds(stage.pid());
  // Resident memory may grow while the cache fills (1 MB by default) and arenas settle; a
  // leak of even a few hundred bytes per request would exceed this over a long soak.
  const long allowed_growth = std::max(16L * 1024, samples.warm_rss / 4);
  std::ostringstream why;
  if (samples.max_rss_after_warm - samples.warm_rss > allowed_growth) {
    why << "RSS grew from " << samples.warm_rss << " KiB after warm-up to "
        << samples.max_rss_after_warm << " KiB; ";
  }
  if (idle_fds > 16) why << idle_fds << " descriptors open once idle (peak " << samples.max_fds << "); ";
  if (counts.answered == 0) why << "no request was answered; ";
  harness::ExitStatus status = stage.stop(10s);
  if (!status.clean() || status.killed) why << "did not stop cleanly on SIGTERM; ";
  std::cout << "  idle fds=" << idle_fds << " warm rss_kib=" << samples.warm_rss
            << " max rss_kib after warm-up=" << samples.max_rss_after_warm
            << " answered=" << counts.answered << " failures=" << counts.failures
            << " stop=" << status.elapsed.count() << " ms\n  " << status.output;
  if (!why.str().empty()) return {false, why.str()};
  return {};
}

Verdict soak_stage(const std::string& binary, int seconds, int clients) {
  harness::OriginServer origin;
  const std::string origin_url = "http://127.0.0.1:" + std::to_string(origin.port());
  std::uint16_t dead_port;
  {
    proxy::Socket probe = proxy::listen_tcp("127.0.0.1", 0);
    dead_port = proxy::local_port(probe);
  }
  harness::ProcessOptions options;
  options.stderr_path = (std::filesystem::temp_directory_path() /
                         (std::filesystem::path(binary).filename().string() + "-soak.log"))
                            .string();
  harness::Process stage({binary, "--port", "0", "--origin-timeout-ms", "1000",
                          "--client-timeout-ms", "2000"},
                         options);
  std::cout << "soak: " << binary << " on port " << stage.port() << " for " << seconds << " s, "
            << clients << " clients; log in " << options.stderr_path << std::endl;

  LoadCounts counts;
  std::atomic<bool> stop{false};
  std::vector<std::jthread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      client_loop(stage.port(), origin_url, dead_port, 1000u + static_cast<unsigned>(c), stop, counts);
    });
  }
  const Samples samples = sample_under_load(stage, seconds, counts);
  stop = true;
  threads.clear();  // joins: every client finishes its current request

  const Verdict verdict = samples.exited ? Verdict{false, "the stage exited during the load"}
                                         : judge_when_quiet(stage, samples, counts);
  std::cout << "soak: " << std::filesystem::path(binary).filename().string() << ": "
            << (verdict.ok ? "PASS" : "FAIL: " + verdict.why) << std::endl;
  return verdict;
}

// SIGTERM with four 20 MB transfers in flight, the stage running under Valgrind's memcheck:
// it must exit 0, with no memory error and no block definitely or indirectly lost.
Verdict valgrind_shutdown(const std::string& binary) {
  harness::OriginServer origin;
  const std::string log = (std::filesystem::temp_directory_path() /
                           (std::filesystem::path(binary).filename().string() + "-valgrind.log"))
                              .string();
  harness::ProcessOptions options;
  options.ready_timeout = 120s;  // Valgrind starts slowly
  harness::Process stage({"valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                          "--errors-for-leak-kinds=definite,indirect", "--error-exitcode=99",
                          "--log-file=" + log, binary, "--port", "0"},
                         options);
  std::vector<proxy::Socket> clients;
  for (int i = 0; i < 4; ++i) {
    auto connected = proxy::connect_tcp("127.0.0.1", stage.port(), 10s);
    if (connected.error != proxy::ConnectError::none) return {false, connected.message};
    connected.socket.write_all("GET http://127.0.0.1:" + std::to_string(origin.port()) +
                                   "/bytes/20000000?v=" + std::to_string(i) +
                                   " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                               10s);
    clients.push_back(std::move(connected.socket));
  }
  if (!origin.wait_for_requests("/bytes/20000000", 1, 60s)) {
    return {false, "no transfer started under Valgrind"};
  }
  harness::ExitStatus status = stage.stop(60s);
  std::cout << "valgrind: " << std::filesystem::path(binary).filename().string() << " exit "
            << status.exit_code << " signal " << status.signal << " after "
            << status.elapsed.count() << " ms; log in " << log << std::endl;
  if (status.exit_code == 99) return {false, "Valgrind reported errors or leaks: see " + log};
  if (!status.clean() || status.killed) return {false, "did not stop cleanly under Valgrind"};
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 60;
  int clients = 8;
  std::string bin_dir = "build/release/bin";
  std::vector<std::string> stages = {"stage3-pool", "stage4-tuned"};
  CLI::App app{"soak: a mixed load against stage binaries; checks RSS and descriptors stay flat",
               "soak"};
  app.add_option("--seconds", seconds, "How long each stage is loaded")
      ->check(CLI::Range(5, 86'400))
      ->capture_default_str();
  app.add_option("--clients", clients, "Concurrent client threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--bin-dir", bin_dir, "Where the stage binaries are")->capture_default_str();
  app.add_option("--stages", stages, "Stages to soak; those not built are skipped")
      ->delimiter(',')
      ->capture_default_str();
  std::vector<std::string> valgrind_stages = {"stage1-sequential", "stage2-per-thread",
                                              "stage3-pool", "stage4-tuned"};
  app.add_option("--valgrind-stages", valgrind_stages,
                 "Stages to stop under Valgrind with transfers in flight (needs valgrind; "
                 "'none' skips)")
      ->delimiter(',')
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  proxy::ignore_sigpipe();

  int failed = 0;
  int ran = 0;
  for (const std::string& name : stages) {
    const std::string binary = bin_dir + "/" + name;
    if (!std::filesystem::exists(binary)) {
      std::cout << "soak: " << name << " is not built here; skipped" << std::endl;
      continue;
    }
    ++ran;
    try {
      if (!soak_stage(binary, seconds, clients).ok) ++failed;
    } catch (const std::exception& e) {
      std::cout << "soak: " << name << ": FAIL: " << e.what() << std::endl;
      ++failed;
    }
  }
  for (const std::string& name : valgrind_stages) {
    const std::string binary = bin_dir + "/" + name;
    if (name == "none" || !std::filesystem::exists(binary)) continue;
    try {
      Verdict verdict = valgrind_shutdown(binary);
      std::cout << "valgrind: " << name << ": " << (verdict.ok ? "PASS" : "FAIL: " + verdict.why)
                << std::endl;
      if (!verdict.ok) ++failed;
    } catch (const std::exception& e) {
      std::cout << "valgrind: " << name << ": FAIL: " << e.what() << std::endl;
      ++failed;
    }
  }
  if (ran == 0) {
    std::cout << "soak: none of the stages was built" << std::endl;
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
