// relay_body (common/transaction/body_relay.h) through a real socket pair: what it counts as the
// body's end. A reused origin connection depends on it (RFC 9112 §9.3): bytes past the end mean the
// connection is out of step and must not carry another request.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <string>

#include "transaction/body_relay.h"

namespace proxy {
namespace {

using namespace std::chrono_literals;

struct SocketPair {
  Socket ours;
  Socket theirs;
};

SocketPair socket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  return {Socket(fds[0]), Socket(fds[1])};
}

// Relays a `length`-byte Content-Length body whose source sends `wire` (after `buffered`).
BodySink relay(std::uint64_t length, const std::string& buffered, const std::string& wire,
               std::string& body) {
  SocketPair pair = socket_pair();
  EXPECT_EQ(pair.theirs.write_all(wire, 1s).status, IoStatus::ok);
  BodyReader reader(BodyFraming{BodyKind::content_length, length});
  BodySink sink;
  sink.capture = &body;
  sink.capture_limit = 1 << 20;
  EXPECT_EQ(relay_body(pair.ours, buffered, reader, sink, 5s, 5s), BodyOutcome::complete);
  return sink;
}

TEST(RelayBody, CountsNoSurplusWhenTheSourceStopsAtTheBodysEnd) {
  std::string body;
  EXPECT_EQ(relay(5, "", "hello", body).surplus, 0u);
  EXPECT_EQ(body, "hello");
}

TEST(RelayBody, CountsBytesPastTheBodysEndAsSurplusAndDropsThem) {
  std::string body;
  EXPECT_EQ(relay(5, "", "helloEXTRA", body).surplus, 5u);
  EXPECT_EQ(body, "hello");
  std::string from_buffer;
  EXPECT_EQ(relay(5, "helloHTTP/1.1 200 OK\r\n", "", from_buffer).surplus, 17u)
      << "bytes read with the head count too";
  EXPECT_EQ(from_buffer, "hello");
}

}  // namespace
}  // namespace proxy
