// run_tunnel (CONNECT's byte relay, RFC 9110 §9.3.6) over socket pairs, and the authority-form
// target parser (RFC 9112 §3.2.3).
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <array>
#include <chrono>
#include <future>
#include <string>

#include "http/uri.h"
#include "net/socket.h"
#include "transaction/tunnel.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;

std::pair<Socket, Socket> socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair");
  return {Socket(fds[0]), Socket(fds[1])};
}

std::string read_exactly(const Socket& socket, std::size_t n) {
  std::string out;
  std::array<char, 4096> buf;
  while (out.size() < n) {
    IoResult got = socket.read_some(std::span<char>(buf.data(), std::min(buf.size(), n - out.size())), 5s);
    if (got.status != IoStatus::ok) break;
    out.append(buf.data(), got.bytes);
  }
  return out;
}

TEST(Tunnel, RelaysBothWaysAndPassesEachHalfCloseOn) {
  auto [client_app, client_side] = socket_pair();
  auto [origin_side, origin_app] = socket_pair();
  auto tunnel = std::async(std::launch::async, [&cs = client_side, &os = origin_side] {
    return run_tunnel(cs, os, 10s, 5s);
  });
  ASSERT_EQ(client_app.write_all("hello", 5s).status, IoStatus::ok);
  EXPECT_EQ(read_exactly(origin_app, 5), "hello");
  client_app.shutdown_write();  // the client is done sending...
  std::array<char, 16> buf;
  EXPECT_EQ(origin_app.read_some(buf, 5s).status, IoStatus::eof) << "EOF not passed on";
  // ...but the other direction still carries bytes until the origin is done too.
  ASSERT_EQ(origin_app.write_all("world!", 5s).status, IoStatus::ok);
  EXPECT_EQ(read_exactly(client_app, 6), "world!");
  origin_app.shutdown_write();
  EXPECT_EQ(client_app.read_some(buf, 5s).status, IoStatus::eof);
  ASSERT_EQ(tunnel.wait_for(5s), std::future_status::ready) << "tunnel did not end";
  TunnelResult result = tunnel.get();
  EXPECT_EQ(result.end, TunnelEnd::closed);
  EXPECT_EQ(result.to_origin, 5u);
  EXPECT_EQ(result.to_client, 6u);
}

TEST(Tunnel, EndsAfterTheIdleTimeoutWithNoByteEitherWay) {
  auto [client_app, client_side] = socket_pair();
  auto [origin_side, origin_app] = socket_pair();
  TunnelResult result = run_tunnel(client_side, origin_side, 50ms, 1s);
  EXPECT_EQ(result.end, TunnelEnd::idle);
}

TEST(AuthorityForm, ParsesHostAndRequiredPort) {
  auto plain = parse_authority_form("Example.com:443");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host, "example.com");
  EXPECT_EQ(plain->port, 443);
  auto v6 = parse_authority_form("[::1]:8443");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 8443);
  for (const char* bad : {"example.com", "example.com:", "example.com:0", "example.com:65536",
                          "http://example.com:443", "example.com:443/x", "user@example.com:443",
                          ":443", "", "exa mple.com:443"}) {
    EXPECT_FALSE(parse_authority_form(bad)) << bad;
  }
}

}  // namespace
}  // namespace proxy
