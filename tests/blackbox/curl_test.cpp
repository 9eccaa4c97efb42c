// Real clients: the system `curl` through every stage — GET, HEAD (`curl -I`), POST
// with a Content-Length and chunked, and CONNECT (`curl -p`) to a local TLS origin: nginx with a
// throw-away certificate made by openssl for this test, run in the foreground from a temp dir.
// Bytes are compared exactly. Without curl (or nginx/openssl for CONNECT) a test is skipped
// with the reason: scripts/install-deps test installs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "../test_support.h"
#include "net/socket.h"
#include "spawn_setup.h"
#include "stage_fixture.h"

namespace testing_support {
namespace {

using test_support::read_file;

using namespace std::chrono_literals;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The program's path when it is installed (searched in PATH, then the sbin folders that a
// non-root PATH leaves out, where Debian puts nginx); empty when it is not.
std::string find_program(const std::string& name) {
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin";
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string quote(const std::string& text) { return "'" + text + "'"; }

// A directory of its own under the test temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "methods-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs a shell command line; its exit status (-1 when it did not exit normally).
int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// nginx serving `files` over TLS on 127.0.0.1, with a certificate for "localhost" made here.
// Runs in the foreground (daemon off, no master process) with every path in the temp dir, so it
// needs no root and leaves nothing behind; stopped with SIGTERM and reaped in the destructor.
class TlsOrigin {
 public:
  TlsOrigin(const std::string& nginx, const std::string& openssl, const fs::path& dir)
      : dir_(dir) {
    fs::create_directories(dir_ / "www");
    fs::create_directories(dir_ / "tmp");
    const int made = run(quote(openssl) + " req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                         "-nodes -days 1 -subj /CN=localhost -addext subjectAltName=DNS:localhost "
                         "-keyout " + quote((dir_ / "key.pem").string()) + " -out " +
                         quote(cert().string()) + " >" + quote((dir_ / "openssl.log").string()) +
                         " 2>&1");
    if (made != 0) throw std::runtime_error("openssl req failed: " + read_file(dir_ / "openssl.log"));
    // A free port: bind port 0, read it, let it go. Another process could take it in between;
    // then nginx fails to start and the constructor says so.
    {
      proxy::Socket probe = proxy::listen_tcp("127.0.0.1", 0);
      port_ = proxy::local_port(probe);
    }
    const std::string d = dir_.string();
    write_file(dir_ / "nginx.conf",
               "daemon off;\nmaster_process off;\nworker_processes 1;\npid " + d + "/nginx.pid;\n"
               "error_log " + d + "/error.log;\nevents { worker_connections 64; }\n"
               "http {\n  access_log off;\n  client_body_temp_path " + d + "/tmp;\n"
               "  proxy_temp_path " + d + "/tmp;\n  fastcgi_temp_path " + d + "/tmp;\n"
               "  uwsgi_temp_path " + d + "/tmp;\n  scgi_temp_path " + d + "/tmp;\n"
               "  server {\n    listen 127.0.0.1:" + std::to_string(port_) + " ssl;\n"
               "    server_name localhost;\n    ssl_certificate " + cert().string() + ";\n"
               "    ssl_certificate_key " + d + "/key.pem;\n    root " + d + "/www;\n  }\n}\n");
    harness::SpawnSetup spawn;
    const std::string log = (dir_ / "nginx.out").string();
    ::posix_spawn_file_actions_addopen(&spawn.actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_adddup2(&spawn.actions, 1, 2);
    spawn.close_inherited_and_reset_signals();
    std::vector<std::string> args{nginx, "-p", d, "-c", d + "/nginx.conf", "-e", d + "/error.log"};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid_, nginx.c_str(), &spawn.actions, &spawn.attr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + nginx);
    }
    // Ready when it accepts a connection; it may also die (port taken, bad config).
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (proxy::connect_tcp("127.0.0.1", port_, 1s).error == proxy::ConnectError::none) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("nginx exited: " + read_file(dir_ / "error.log") +
                                 read_file(dir_ / "nginx.out"));
      }
      std::this_thread::sleep_for(20ms);  // polling a socket until it accepts, bounded
    }
    throw std::runtime_error("nginx did not listen on port " + std::to_string(port_));
  }
  ~TlsOrigin() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  TlsOrigin(const TlsOrigin&) = delete;
  TlsOrigin& operator=(const TlsOrigin&) = delete;

  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] fs::path cert() const { return dir_ / "cert.pem"; }
  /// Puts a file in the served root.
  void serve(const std::string& name, const std::string& bytes) const {
    write_file(dir_ / "www" / name, bytes);
  }

 private:
  fs::path dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

class CurlClient : public StageTest {
 protected:
  void SetUp() override {
    StageTest::SetUp();
    curl_ = find_program("curl");
    if (curl_.empty()) GTEST_SKIP() << "curl is not installed (scripts/install-deps test)";
  }
  // curl through the proxy, ignoring ~/.curlrc (-q), quiet but for errors, bounded in time.
  [[nodiscard]] std::string curl(const std::string& args) const {
    return quote(curl_) + " -q -sS --max-time 60 -x http://127.0.0.1:" +
           std::to_string(proxy_port()) + " " + args;
  }
  std::string curl_;
  TempDir temp_;
};

std::string binary_file(std::size_t n) {
  std::string body;
  for (std::size_t i = 0; i < n; ++i) body.push_back(static_cast<char>((i * 197 + 5) & 0xFF));
  return body;
}

TEST_P(CurlClient, GetHeadAndPostThroughTheProxyAreByteExact_Rfc9110_9_3) {
  start_stage();
  const fs::path dir = temp_.path();
  const std::string out = (dir / "out").string();

  ASSERT_EQ(run(curl("-o " + quote(out) + " " + origin_url("/bytes/300000"))), 0);
  EXPECT_TRUE(read_file(out) == harness::deterministic_bytes(300000)) << "GET body changed";
  ASSERT_EQ(run(curl("-o " + quote(out) + " " + origin_url("/bytes/300000"))), 0);
  EXPECT_TRUE(read_file(out) == harness::deterministic_bytes(300000)) << "GET body changed on a hit";

  // curl -I fails (exit 18) if a body follows a HEAD response it was told is 5000 bytes long.
  ASSERT_EQ(run(curl("-I -o " + quote(out) + " " + origin_url("/bytes/5000"))), 0);
  const std::string head = read_file(out);
  EXPECT_THAT(head, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 5000"));
  EXPECT_THAT(head, HasSubstr("Via: 1.1 " + GetParam()));

  // Small (read whole before the origin is contacted) and 3 MB (streamed) uploads, framed by
  // Content-Length and chunked; curl sends Expect: 100-continue for the large ones.
  for (std::size_t size : {std::size_t{1000}, std::size_t{3'000'000}}) {
    const fs::path upload = dir / ("upload-" + std::to_string(size));
    write_file(upload, binary_file(size));
    ASSERT_EQ(run(curl("--data-binary @" + quote(upload.string()) + " -o " + quote(out) + " " +
                       origin_url("/echo"))), 0);
    EXPECT_TRUE(read_file(out) == read_file(upload)) << size << "-byte POST changed on the way";
    ASSERT_EQ(run(curl("-H 'Transfer-Encoding: chunked' --data-binary @" + quote(upload.string()) +
                       " -o " + quote(out) + " " + origin_url("/echo"))), 0);
    EXPECT_TRUE(read_file(out) == read_file(upload)) << size << "-byte chunked POST changed";
  }
  EXPECT_EQ(origin_->request_count("/echo"), 4u);
}

TEST_P(CurlClient, ConnectTunnelsTlsToALocalOriginByteExact_Rfc9110_9_3_6) {
  const std::string nginx = find_program("nginx");
  const std::string openssl = find_program("openssl");
  if (nginx.empty() || openssl.empty()) {
    GTEST_SKIP() << "nginx or openssl is not installed (scripts/install-deps test)";
  }
  TlsOrigin tls(nginx, openssl, temp_.path() / "tls");
  const std::string file = binary_file(500'000);
  tls.serve("file", file);
  start_stage({"--connect-ports", std::to_string(tls.port())});
  const std::string out = (temp_.path() / "out").string();
  const std::string url = "https://localhost:" + std::to_string(tls.port()) + "/file";
  ASSERT_EQ(run(curl("-p --cacert " + quote(tls.cert().string()) + " -o " + quote(out) + " " + url)), 0)
      << stage_log();
  EXPECT_TRUE(read_file(out) == file) << "the file changed through the tunnel";
  // Twice: a tunnel is never cached, and each one is a connection of its own.
  ASSERT_EQ(run(curl("-p --cacert " + quote(tls.cert().string()) + " -o " + quote(out) + " " + url)), 0);
  EXPECT_TRUE(read_file(out) == file);
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CurlClient);
INSTANTIATE_TEST_SUITE_P(Stages, CurlClient, ::testing::ValuesIn(built_stages()), stage_name);

}  // namespace
}  // namespace testing_support
