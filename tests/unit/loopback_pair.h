// Loopback helpers for the unit tests of what stage 4's poller does without a worker
// (serve_hit_now_test.cpp, serve_miss_now_test.cpp): a connected pair of real sockets, one end
// in a ClientConnection, and readers for what the other end receives.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "transaction/proxy.h"

namespace proxy::loopback {

using namespace std::chrono_literals;

// A connected loopback pair: `server` is the proxy's end (in a ClientConnection), `client` the
// test's. Buffer sizes, when given, are set before the connection exists, so TCP uses them.
struct Pair {
  ClientConnection server{Socket()};
  Socket client;
};

inline Pair connected_pair(int server_sndbuf = 0, int client_rcvbuf = 0) {
  Socket listener = listen_tcp("127.0.0.1", 0);
  if (server_sndbuf != 0) set_int_option(listener, SOL_SOCKET, SO_SNDBUF, server_sndbuf);
  Socket client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (client_rcvbuf != 0) set_int_option(client, SOL_SOCKET, SO_RCVBUF, client_rcvbuf);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(local_port(listener));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(client.fd(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  std::optional<Socket> accepted = accept_client(listener, -1);
  EXPECT_TRUE(accepted.has_value());
  Pair pair;
  pair.server = ClientConnection(std::move(*accepted));
  pair.client = std::move(client);
  return pair;
}

// Reads from `socket` until `bytes` have arrived or 30 s pass.
inline std::string read_exactly(const Socket& socket, std::size_t bytes) {
  std::string out;
  std::array<char, 65536> chunk;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (out.size() < bytes && std::chrono::steady_clock::now() < until) {
    IoResult got = socket.read_some(chunk, 1s);
    if (got.status == IoStatus::ok) out.append(chunk.data(), got.bytes);
    if (got.status == IoStatus::eof || got.status == IoStatus::error) break;
  }
  return out;
}

// Reads until the peer closes, or 30 s pass.
inline std::string read_to_close(const Socket& socket) {
  return read_exactly(socket, std::string::npos);
}

// Reads one response whose body is framed by Content-Length, head and body, as raw text.
inline std::string read_response_text(const Socket& socket) {
  std::string out;
  std::array<char, 65536> chunk;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    const std::size_t blank = out.find("\r\n\r\n");
    const std::size_t length = out.find("Content-Length: ");
    if (blank != std::string::npos && length != std::string::npos && length < blank &&
        out.size() >= blank + 4 + std::stoul(out.substr(length + 16))) {
      break;
    }
    IoResult got = socket.read_some(chunk, 1s);
    if (got.status == IoStatus::ok) out.append(chunk.data(), got.bytes);
    if (got.status == IoStatus::eof || got.status == IoStatus::error) break;
  }
  return out;
}

}  // namespace proxy::loopback
