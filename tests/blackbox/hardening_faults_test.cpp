// Hardening, faults in the proxy's own world (docs/hardening.md), against every stage: a client that
// hangs up mid-response, running out of file descriptors, a queue under overload, and a stop
// with transfers in flight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hardening_support.h"
#include "stage_fixture.h"
#include "../test_support.h"

namespace testing_support {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

class HardeningFaults : public StageTest {};

// CPU time (user + system) a process has used so far, in clock ticks (/proc/PID/stat).
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt: fields 3-13
  long utime = 0;
  long stime = 0;
  fields >> utime >> stime;
  return utime + stime;
}

// A client that resets the connection after the first 64 KiB of a large, storable body: the
// proxy must neither die of SIGPIPE nor store the part it relayed.
TEST_P(HardeningFaults, SurvivesAClientHangingUpMidResponseAndStoresNothing) {
  start_stage({"--max-object-bytes", "40000000", "--cache-bytes", "80000000"});
  const std::string url = origin_url("/bytes/20000000");
  for (bool reset : {true, false}) {
    proxy::Socket client = send_request(proxy_port(), closing_request(url));
    std::array<char, 65536> buf;
    std::size_t got_bytes = 0;
    while (got_bytes < 65536) {
      auto got = client.read_some(buf, 20s);
      ASSERT_EQ(got.status, proxy::IoStatus::ok);
      got_bytes += got.bytes;
    }
    if (reset) {
      client.reset();
    } else {
      client.close();  // unread bytes make the kernel reset it anyway; the next write fails
    }
  }
  HttpResponse whole = closing_fetch(proxy_port(), url, 60s);
  EXPECT_EQ(whole.field("X-Cache"), "MISS") << "a body the client hung up on was stored";
  EXPECT_TRUE(whole.complete);
  EXPECT_EQ(whole.body.size(), 20000000u);
  EXPECT_TRUE(stage_->running());
}

// `ulimit -n 64` with 200 clients at once: accept fails with EMFILE, and the stage must neither
// crash nor spin on it. Once the clients are answered and gone, it serves as before.
TEST_P(HardeningFaults, SurvivesRunningOutOfFileDescriptorsWithoutSpinning) {
  if (sequential()) {
    GTEST_SKIP() << "stage 1 serves one client at a time and so never holds more than a few "
                    "descriptors; 200 clients only queue in its listen backlog";
  }
  harness::ProcessOptions options;
  options.max_open_files = 64;
  options.stderr_path = ::testing::TempDir() + "fd-exhaustion-" + std::to_string(::getpid()) + ".log";
  options.ready_timeout = 30s;
  harness::Process stage({binary_path(GetParam()), "--port", "0"}, options);

  constexpr int kClients = 200;
  const long ticks_before = cpu_ticks(stage.pid());
  const auto started = std::chrono::steady_clock::now();
  std::vector<proxy::Socket> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(send_request(stage.port(), closing_request(origin_url("/delay/20/bytes/100"))));
  }
  int ok = 0;
  int refused = 0;  // 503: no descriptor for the origin, or load shed
  int cut = 0;      // closed or reset without an answer: accepted while out of descriptors
  for (auto& client : clients) {
    try {
      auto r = read_response(client, 60s);
      ASSERT_TRUE(r.has_value()) << "a client got no answer in 60 s";
      if (r->status == 200 && r->body == harness::deterministic_bytes(100)) {
        ++ok;
      } else {
        ++refused;
        // Out of descriptors is the proxy's own overload: 503 with Retry-After, never a 502
        // that blames a healthy origin.
        EXPECT_EQ(r->status, 503) << r->body;
        EXPECT_EQ(r->field("Retry-After"), "1");
      }
    } catch (const std::runtime_error&) {
      ++cut;
    }
    client.close();
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double cpu_s = static_cast<double>(cpu_ticks(stage.pid()) - ticks_before) /
                       static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::cout << "[ INFO     ] " << kClients << " clients under ulimit -n 64: " << ok << " ok, "
            << refused << " refused (503), " << cut << " cut; stage CPU " << cpu_s
            << " s in " << wall_s << " s" << std::endl;
  EXPECT_GT(ok, 0) << ok << " ok, " << refused << " refused, " << cut << " cut";
  // A busy loop on EMFILE would burn a whole CPU for the whole time; real work is a few ms per
  // request. (Not a speed threshold: a bound on wasted CPU with a wide margin.)
  EXPECT_LT(cpu_s, 0.5 * wall_s + 0.5) << "the stage used " << cpu_s << " s of CPU in " << wall_s
                                       << " s: it spins while out of descriptors";
  // Service resumes: a fresh request is served, and the descriptors were given back.
  HttpResponse after = closing_fetch(stage.port(), origin_url("/bytes/10"));
  EXPECT_EQ(after.status, 200);
  EXPECT_LT(static_cast<int>(test_support::fd_count(stage.pid())), 32) << "descriptors leaked";
  harness::ExitStatus status = stage.stop(10s);
  EXPECT_TRUE(status.clean()) << status.exit_code << " " << status.signal;
}

// A stage that queues keeps its queue bounded under a burst of slow requests: every client is
// answered (200, or 503 where the stage sheds load), and the stats line never shows more queued
// than --queue allows.
TEST_P(HardeningFaults, KeepsItsQueueBoundedUnderABurst) {
  if (GetParam() == "stage1-sequential" || GetParam() == "stage2-per-thread") {
    GTEST_SKIP() << GetParam() << " has no queue: stage 1 leaves clients in the listen backlog, "
                                  "stage 2 starts a thread for each";
  }
  start_stage({"--workers", "2", "--queue", "4"});
  constexpr int kClients = 60;
  std::vector<proxy::Socket> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(send_request(proxy_port(), closing_request(origin_url("/delay/10/bytes/100"))));
  }
  int ok = 0;
  int shed = 0;
  for (auto& client : clients) {
    auto r = read_response(client, 60s);
    ASSERT_TRUE(r.has_value());
    if (r->status == 200) ++ok;
    if (r->status == 503) ++shed;
  }
  EXPECT_EQ(ok + shed, kClients);
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean());
  const auto at = status.output.find("peak_queued=");
  if (at != std::string::npos) {
    EXPECT_LE(std::stoul(status.output.substr(at + 12)), 4u) << status.output;
  }
}

// SIGTERM with ten clients in the middle of large downloads they read slowly: the stage exits
// within 5 s, cleanly, and the clients see their transfers end.
TEST_P(HardeningFaults, StopsWithin5SecondsWithTransfersInFlight) {
  start_stage();
  std::vector<proxy::Socket> clients;
  const int count = sequential() ? 1 : 10;
  for (int i = 0; i < count; ++i) {
    clients.push_back(send_request(
        proxy_port(), closing_request(origin_url("/bytes/20000000?c=" + std::to_string(i)))));
  }
  // In flight: the origin is sending at least one of them (a pool may still queue the rest).
  ASSERT_TRUE(origin_->wait_for_requests("/bytes/20000000", 1, 20s));
  harness::ExitStatus status = stage_->stop(10s);
  EXPECT_TRUE(status.clean()) << status.exit_code << " " << status.signal;
  EXPECT_FALSE(status.killed);
  EXPECT_LT(status.elapsed, 5s);
  for (auto& client : clients) {
    std::array<char, 65536> buf;
    proxy::IoResult got;
    while ((got = client.read_some(buf, 20s)).status == proxy::IoStatus::ok) {
    }
    EXPECT_NE(got.status, proxy::IoStatus::timeout) << "a transfer outlived its stage";
  }
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HardeningFaults);
INSTANTIATE_TEST_SUITE_P(Stages, HardeningFaults, ::testing::ValuesIn(built_stages()), stage_name);

}  // namespace
}  // namespace testing_support
