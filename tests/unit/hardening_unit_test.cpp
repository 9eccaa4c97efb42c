// Unit tests for the pieces hardening (docs/hardening.md) added outside the parsers: connect_tcp's name
// lookup with a deadline (common/net/socket.h) and the launcher's descriptor limit
// (harness::ProcessOptions::max_open_files).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "launcher.h"
#include "net/socket.h"

namespace {

using namespace std::chrono_literals;

TEST(ConnectTcp, ConnectsToANumericAddressWithoutALookup) {
  proxy::Socket listener = proxy::listen_tcp("127.0.0.1", 0);
  auto connected = proxy::connect_tcp("127.0.0.1", proxy::local_port(listener), 5s);
  EXPECT_EQ(connected.error, proxy::ConnectError::none) << connected.message;
}

TEST(ConnectTcp, LooksUpANameAndConnects) {
  // "localhost" is a name, so it goes through the asynchronous lookup (getaddrinfo_a).
  proxy::Socket listener = proxy::listen_tcp("127.0.0.1", 0);
  auto connected = proxy::connect_tcp("localhost", proxy::local_port(listener), 5s);
  EXPECT_EQ(connected.error, proxy::ConnectError::none) << connected.message;
}

TEST(ConnectTcp, ReportsANameThatDoesNotResolve) {
  // RFC 6761 §6.4: names under .invalid never resolve.
  auto connected = proxy::connect_tcp("no-such-host.invalid", 80, 10s);
  EXPECT_EQ(connected.error, proxy::ConnectError::resolve) << connected.message;
  EXPECT_NE(connected.message.find("no-such-host.invalid"), std::string::npos);
}

TEST(ConnectTcp, ManyLookupsInARowLeaveNothingBehind) {
  // Every finished lookup is freed; run under make asan, a leak would be reported at exit.
  proxy::Socket listener = proxy::listen_tcp("127.0.0.1", 0);
  for (int i = 0; i < 50; ++i) {
    auto connected = proxy::connect_tcp("localhost", proxy::local_port(listener), 5s);
    ASSERT_EQ(connected.error, proxy::ConnectError::none) << connected.message;
  }
}

// The soft and hard "Max open files" of a process, from /proc/PID/limits.
std::string open_files_limit(pid_t pid) {
  std::ifstream limits("/proc/" + std::to_string(pid) + "/limits");
  for (std::string line; std::getline(limits, line);) {
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream fields(line.substr(14));
      std::string soft;
      std::string hard;
      fields >> soft >> hard;
      return soft + " " + hard;
    }
  }
  return "?";
}

TEST(Launcher, LimitsTheChildsOpenFilesWhenAsked) {
  harness::ProcessOptions options;
  options.max_open_files = 48;
  harness::Process child({"/bin/sh", "-c", "echo listening on 127.0.0.1:1; exec sleep 100"},
                         options);
  EXPECT_EQ(open_files_limit(child.pid()), "48 48");
  harness::Process unlimited({"/bin/sh", "-c", "echo listening on 127.0.0.1:1; exec sleep 100"});
  EXPECT_NE(open_files_limit(unlimited.pid()), "48 48");
}

}  // namespace
