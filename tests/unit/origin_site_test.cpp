// The origin's static-site route (OriginOptions::site_dir, `origin --site DIR`), which serves the
// browser check's page: files by path with their Content-Type, nothing outside the directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "http/http_message.h"
#include "net/socket.h"
#include "origin_server.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto kTimeout = 10s;  // generous: a hang fails the test instead of blocking it

struct SiteReply {
  int status = 0;
  proxy::HeaderFields fields;
  std::string body;  // everything after the head, read until the origin closes
};

// GET `target` with `Connection: close`, read to end of file.
SiteReply get(const harness::OriginServer& origin, const std::string& target) {
  auto connected = proxy::connect_tcp("127.0.0.1", origin.port(), kTimeout);
  if (connected.error != proxy::ConnectError::none) throw std::runtime_error(connected.message);
  const std::string request =
      "GET " + target + " HTTP/1.1\r\nHost: origin\r\nConnection: close\r\n\r\n";
  if (connected.socket.write_all(request, kTimeout).status != proxy::IoStatus::ok) {
    throw std::runtime_error("cannot send the request");
  }
  std::string received;
  std::string buffer(std::size_t{16} * 1024, '\0');
  for (;;) {
    auto got = connected.socket.read_some(buffer, kTimeout);
    if (got.status != proxy::IoStatus::ok) break;
    received.append(buffer.data(), got.bytes);
  }
  proxy::ResponseHead head;
  auto parsed = proxy::parse_response_head(received, head);
  if (parsed.status != proxy::ParseStatus::complete) throw std::runtime_error("no response head");
  return {head.status, head.fields, received.substr(parsed.consumed)};
}

std::string field(const SiteReply& reply, std::string_view name) {
  return std::string(proxy::find_field(reply.fields, name).value_or(""));
}

// A site of a few files in a fresh temporary directory, removed with the fixture; a file beside
// it (outside the site) that no request may reach.
class OriginSite : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "origin-site-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    fs::create_directories(root_ / "site" / "img");
    write(root_ / "site" / "index.html", "<!DOCTYPE html><p>home</p>\n");
    write(root_ / "site" / "style.css", "p { color: red; }\n");
    write(root_ / "site" / "app.js", "document.title = 'x';\n");
    write(root_ / "site" / "img" / "dot.png", std::string("\x89PNG\r\n\x1a\n\0\0", 10));
    write(root_ / "site" / "data.bin", "raw");
    write(root_ / "secret.txt", "outside the site\n");
    origin_ = std::make_unique<harness::OriginServer>(
        harness::OriginOptions{.site_dir = (root_ / "site").string()});
  }
  void TearDown() override {
    origin_.reset();
    std::error_code error;
    fs::remove_all(root_, error);
  }
  static void write(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

  fs::path root_;
  std::unique_ptr<harness::OriginServer> origin_;
};

TEST_F(OriginSite, ServesEachFileByteExactWithTheContentTypeOfItsExtension) {
  struct Case {
    std::string target;
    std::string type;
    std::string body;
  };
  for (const Case& c :
       {Case{"/site/index.html", "text/html; charset=utf-8", "<!DOCTYPE html><p>home</p>\n"},
        Case{"/site/style.css", "text/css; charset=utf-8", "p { color: red; }\n"},
        Case{"/site/app.js", "text/javascript; charset=utf-8", "document.title = 'x';\n"},
        Case{"/site/img/dot.png", "image/png", std::string("\x89PNG\r\n\x1a\n\0\0", 10)},
        Case{"/site/data.bin", "application/octet-stream", "raw"}}) {
    SiteReply reply = get(*origin_, c.target);
    EXPECT_EQ(reply.status, 200) << c.target;
    EXPECT_EQ(field(reply, "Content-Type"), c.type) << c.target;
    EXPECT_EQ(reply.body, c.body) << c.target;
    EXPECT_EQ(field(reply, "Content-Length"), std::to_string(c.body.size())) << c.target;
    // Fresh for an hour, so a shared cache may store it (RFC 9111 §4.2.1).
    EXPECT_EQ(field(reply, "Cache-Control"), "max-age=3600") << c.target;
  }
  EXPECT_EQ(origin_->request_count("/site/"), 5u);
}

TEST_F(OriginSite, ADirectoryPathServesItsIndex) {
  SiteReply reply = get(*origin_, "/site/?v=1");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "<!DOCTYPE html><p>home</p>\n");
}

TEST_F(OriginSite, NothingOutsideTheDirectoryAndNoMissingFileIsServed) {
  for (const char* target :
       {"/site/../secret.txt", "/site/img/../../secret.txt", "/site/%2e%2e/secret.txt",
        "/site//etc/passwd", "/site/./index.html", "/site/missing.css", "/site/img", "/secret.txt",
        "/sitex/index.html"}) {
    SiteReply reply = get(*origin_, target);
    EXPECT_EQ(reply.status, 404) << target;
    EXPECT_EQ(reply.body.find("outside the site"), std::string::npos) << target;
  }
}

TEST(OriginSiteOptions, AMissingDirectoryIsRefusedAtStartUp) {
  EXPECT_THROW(harness::OriginServer(harness::OriginOptions{.site_dir = "/nonexistent/site"}),
               std::runtime_error);
}

TEST(OriginSiteOptions, WithoutASiteDirectorySitePathsAre404) {
  harness::OriginServer origin;
  EXPECT_EQ(get(origin, "/site/index.html").status, 404);
}

}  // namespace
