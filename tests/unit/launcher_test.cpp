// harness::Process, with /bin/sh standing in for a server: the launcher must find the port in
// the `listening on` line, stop what it started, and fail loudly when a child never gets ready.
#include "launcher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "net/socket.h"

namespace {

using namespace std::chrono_literals;

harness::Process shell(const std::string& script, const harness::ProcessOptions& options = {}) {
  return harness::Process({"/bin/sh", "-c", script}, options);
}

TEST(Launcher, FindsThePortAndStopsTheChild) {
  harness::Process child =
      shell("echo starting up; echo listening on 127.0.0.1:1234; exec sleep 100");
  EXPECT_EQ(child.port(), 1234);
  EXPECT_EQ(child.host(), "127.0.0.1");
  EXPECT_EQ(child.address(), "127.0.0.1:1234");
  EXPECT_EQ(child.startup_output(), "starting up\nlistening on 127.0.0.1:1234\n");
  EXPECT_GT(child.pid(), 0);
  EXPECT_TRUE(child.running());

  harness::ExitStatus status = child.stop();
  EXPECT_EQ(status.signal, SIGTERM);
  EXPECT_FALSE(status.killed);
  EXPECT_LT(status.elapsed, 5s);
  EXPECT_FALSE(child.running());
  EXPECT_EQ(child.stop().signal, SIGTERM);  // idempotent
}

TEST(Launcher, KeepsTheOutputAfterTheListeningLine) {
  harness::Process child = shell(
      "trap 'echo stats: requests=0; exit 0' TERM; echo 'listening on [::1]:8080'; echo ready;"
      " while :; do sleep 0.05; done");
  EXPECT_EQ(child.host(), "::1");
  EXPECT_EQ(child.address(), "[::1]:8080");
  EXPECT_EQ(child.read_line(10s), "ready");
  harness::ExitStatus status = child.stop();
  EXPECT_TRUE(status.clean());
  EXPECT_EQ(status.output, "ready\nstats: requests=0\n");
}

TEST(Launcher, KillsAChildThatIgnoresSigterm) {
  harness::Process child = shell("trap '' TERM; echo listening on 127.0.0.1:1; exec sleep 100");
  harness::ExitStatus status = child.stop(200ms);
  EXPECT_TRUE(status.killed);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_GE(status.elapsed, 200ms);
}

TEST(Launcher, ThrowsWhenTheChildExitsWithoutTheLine) {
  try {
    shell("echo something else; exit 3");
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("something else"), std::string::npos) << message;
    EXPECT_NE(message.find("status 3"), std::string::npos) << message;
  }
}

TEST(Launcher, ThrowsWhenTheDeadlinePasses) {
  harness::ProcessOptions options;
  options.ready_timeout = 200ms;
  EXPECT_THROW(shell("echo listening soon; exec sleep 100", options), std::runtime_error);
}

TEST(Launcher, ThrowsWhenTheProgramDoesNotExist) {
  EXPECT_THROW(harness::Process({"/nonexistent/program"}), std::runtime_error);
}

TEST(Launcher, DoesNotLeakOurDescriptorsIntoTheChild) {
  // A descriptor without close-on-exec, as a careless test might hold one.
  proxy::Socket leaky(::dup(STDIN_FILENO));
  ASSERT_TRUE(leaky.valid());
  harness::Process child = shell("test -e /proc/self/fd/" + std::to_string(leaky.fd()) +
                                 " && echo leaked; echo listening on 127.0.0.1:9; exec sleep 100");
  EXPECT_EQ(child.startup_output().find("leaked"), std::string::npos);
}

TEST(Launcher, RunsTheOriginBinaryEndToEnd) {
  auto origin = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "origin";
  if (!std::filesystem::exists(origin)) GTEST_SKIP() << origin << " not built";
  harness::Process child({origin.string(), "--port", "0"});
  ASSERT_NE(child.port(), 0);
  auto connected = proxy::connect_tcp(child.host(), child.port(), 10s);
  ASSERT_EQ(connected.error, proxy::ConnectError::none) << connected.message;
  ASSERT_EQ(connected.socket.write_all("GET /bytes/3 HTTP/1.0\r\n\r\n", 10s).status,
            proxy::IoStatus::ok);
  std::string response;
  char buffer[4096];
  for (;;) {
    auto got = connected.socket.read_some(buffer, 10s);
    if (got.status != proxy::IoStatus::ok) break;
    response.append(buffer, got.bytes);
  }
  EXPECT_TRUE(response.starts_with("HTTP/1.1 200 OK\r\n")) << response;
  harness::ExitStatus status = child.stop();
  EXPECT_TRUE(status.clean());
  EXPECT_EQ(status.output, "stats: {\"/bytes/3\":1}\n");
}

}  // namespace
