// Which clients a proxy serves: `--allow CIDR`. An open forward proxy is an open relay — anyone
// who reaches it can make requests that appear to come from this machine — so beyond binding
// to loopback by default, a proxy on a shared network serves only the ranges it is told to.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/socket.h"
#include "transaction/proxy.h"

namespace proxy {

/// A set of client address ranges in CIDR notation (RFC 4632; IPv6 prefixes, RFC 4291 §2.3).
/// Empty means everyone may connect (the listening address is then the only guard). An
/// IPv4-mapped IPv6 peer (::ffff:a.b.c.d, seen on a listener bound to "::") matches IPv4 ranges.
/// Thread-safety: add() before serving; allows() is const and safe from any number of threads.
class AllowList {
 public:
  /// Adds one range: "10.0.0.0/8", "192.168.1.7" (a /32), "::1", "fd00::/8". Host bits past
  /// the prefix are ignored. Throws std::invalid_argument naming the text when it is not a
  /// numeric address with an optional prefix length in range.
  void add(std::string_view cidr);
  /// True when no range was added.
  [[nodiscard]] bool empty() const noexcept { return ranges_.empty(); }
  /// True when the list is empty or `address` lies in one of its ranges. A family other than
  /// AF_INET / AF_INET6 is refused.
  [[nodiscard]] bool allows(const sockaddr_storage& address) const noexcept;
  /// The same for a connected socket's peer; false when the peer's address is unknown (unless
  /// the list is empty).
  [[nodiscard]] bool allows_peer(const Socket& client) const noexcept;
  /// The same for a numeric address ("127.0.0.1", "::1"); false when it does not parse.
  [[nodiscard]] bool allows(std::string_view numeric_address) const;

 private:
  // Every range is kept as IPv6: IPv4 ranges as IPv4-mapped addresses (::ffff:0:0/96 + prefix).
  struct Range {
    std::array<std::uint8_t, 16> network{};
    int prefix_bits = 0;
  };
  [[nodiscard]] bool contains(const std::array<std::uint8_t, 16>& address) const noexcept;
  std::vector<Range> ranges_;
};

/// Answers a client the allow list refuses with `403 Forbidden` (Connection: close,
/// X-Cache: MISS, a one-line body) without reading its request, logs one line naming the peer,
/// counts one error in `stats`, and closes after draining what the client already sent (so the
/// close is not a reset that could destroy the 403). Waits at most 1 s for the client to take
/// the bytes. Thread-safe; never throws.
void reply_forbidden(Socket client, ProxyStats& stats) noexcept;

}  // namespace proxy
