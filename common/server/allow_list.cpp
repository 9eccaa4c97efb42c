#include "server/allow_list.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "server/log.h"

namespace proxy {
namespace {

using Bytes = std::array<std::uint8_t, 16>;

constexpr std::array<std::uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

Bytes mapped(const in_addr& v4) {
  Bytes out{};
  std::memcpy(out.data(), kMappedPrefix.data(), kMappedPrefix.size());
  std::memcpy(out.data() + 12, &v4, 4);
  return out;
}

// A numeric IPv4 or IPv6 address as 16 bytes (IPv4 mapped) and whether it was IPv4.
bool parse_address(const std::string& text, Bytes& out, bool& v4) {
  in_addr a4{};
  if (::inet_pton(AF_INET, text.c_str(), &a4) == 1) {
    out = mapped(a4);
    v4 = true;
    return true;
  }
  in6_addr a6{};
  if (::inet_pton(AF_INET6, text.c_str(), &a6) == 1) {
    std::memcpy(out.data(), &a6, 16);
    v4 = false;
    return true;
  }
  return false;
}

constexpr std::string_view kForbidden =
    "HTTP/1.1 403 Forbidden\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 55\r\n"
    "Connection: close\r\n"
    "X-Cache: MISS\r\n"
    "\r\n"
    "403 Forbidden: this proxy does not serve your address.\n";
static_assert(kForbidden.size() - kForbidden.find("\r\n\r\n") - 4 == 55,
              "update Content-Length in kForbidden");

constexpr Millis kWriteTimeout{1'000};
constexpr std::size_t kMaxDrainBytes = std::size_t{64} * 1024;

}  // namespace

void AllowList::add(std::string_view cidr) {
  const std::string text(cidr);
  const std::size_t slash = text.find('/');
  Bytes network{};
  bool v4 = false;
  if (!parse_address(text.substr(0, slash), network, v4)) {
    throw std::invalid_argument("--allow " + text + ": not a numeric IPv4 or IPv6 address");
  }
  const int max_bits = v4 ? 32 : 128;
  int bits = max_bits;
  if (slash != std::string::npos) {
    const std::string length = text.substr(slash + 1);
    if (length.empty() || length.size() > 3 ||
        length.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(length) > max_bits) {
      throw std::invalid_argument("--allow " + text + ": the prefix length must be 0.." +
                                  std::to_string(max_bits));
    }
    bits = std::stoi(length);
  }
  Range range;
  range.prefix_bits = v4 ? 96 + bits : bits;
  // Clear the host bits, so "10.1.2.3/8" means 10.0.0.0/8.
  for (int i = 0; i < 16; ++i) {
    const int keep = std::min(8, std::max(0, range.prefix_bits - i * 8));
    const auto mask = static_cast<std::uint8_t>(keep == 0 ? 0 : 0xff << (8 - keep));
    range.network[static_cast<std::size_t>(i)] = network[static_cast<std::size_t>(i)] & mask;
  }
  ranges_.push_back(range);
}

bool AllowList::contains(const Bytes& address) const noexcept {
  for (const Range& range : ranges_) {
    bool match = true;
    for (int i = 0; i < 16 && match; ++i) {
      const int keep = std::min(8, std::max(0, range.prefix_bits - i * 8));
      if (keep == 0) break;
      const auto mask = static_cast<std::uint8_t>(0xff << (8 - keep));
      match = (address[static_cast<std::size_t>(i)] & mask) == range.network[static_cast<std::size_t>(i)];
    }
    if (match) return true;
  }
  return false;
}

bool AllowList::allows(const sockaddr_storage& address) const noexcept {
  if (ranges_.empty()) return true;
  Bytes bytes{};
  if (address.ss_family == AF_INET) {
    bytes = mapped(reinterpret_cast<const sockaddr_in&>(address).sin_addr);
  } else if (address.ss_family == AF_INET6) {
    std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, 16);
  } else {
    return false;
  }
  return contains(bytes);
}

bool AllowList::allows_peer(const Socket& client) const noexcept {
  if (ranges_.empty()) return true;
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(client.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return false;
  }
  return allows(address);
}

bool AllowList::allows(std::string_view numeric_address) const {
  if (ranges_.empty()) return true;
  Bytes bytes{};
  bool v4 = false;
  return parse_address(std::string(numeric_address), bytes, v4) && contains(bytes);
}

void reply_forbidden(Socket client, ProxyStats& stats) noexcept {
  stats.errors.fetch_add(1, std::memory_order_relaxed);
  try {
    log_line("client " + peer_address(client) + ": 403 not in --allow");
  } catch (...) {
    log_line("403: refused a client not in --allow");
  }
  if (client.write_all(kForbidden, kWriteTimeout).status != IoStatus::ok) return;
  // The request may still be arriving: read until the client closes (it has its answer) or a
  // second passes, so our close never turns into a reset that destroys the 403.
  client.drain_and_close(kWriteTimeout, kMaxDrainBytes);
}

}  // namespace proxy
