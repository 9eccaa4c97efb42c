#include "overload.h"

#include <array>
#include <string>

#include "log.h"

namespace proxy {
namespace {

constexpr std::string_view kBody =
    "503 Service Unavailable: the proxy cannot take this connection now; retry shortly\n";
// A constant, so refusing a connection costs no allocation (RFC 9110 §15.6.4, §10.2.3).
constexpr std::string_view kResponse =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 82\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\n"
    "X-Cache: MISS\r\n"
    "\r\n"
    "503 Service Unavailable: the proxy cannot take this connection now; retry shortly\n";
static_assert(kBody.size() == 82, "update Content-Length in kResponse");
static_assert(kResponse.ends_with(kBody));

// A fresh connection's send buffer is empty, so the write normally completes at once; the bound
// only matters for a peer that never reads, and it must not hold a stage's accept loop for long.
constexpr Millis kWriteTimeout{1'000};
// Enough to swallow any request head the proxy would accept (8 KiB request line, 32 KiB of
// fields) without letting a client that keeps sending hold us.
constexpr std::size_t kMaxDrainBytes = std::size_t{64} * 1024;

}  // namespace

void reply_overloaded(Socket client, ProxyStats& stats, std::string_view reason,
                      std::string_view detail) noexcept {
  stats.errors.fetch_add(1, std::memory_order_relaxed);
  try {
    std::string line = "client " + peer_address(client) + ": 503 " + std::string(reason);
    if (!detail.empty()) line.append(": ").append(detail);
    log_line(line);
  } catch (...) {
    log_line("503: cannot serve a client (and out of memory while saying why)");
  }
  if (client.write_all(kResponse, kWriteTimeout).status != IoStatus::ok) return;
  client.shutdown_write();
  // Closing with unread input makes the kernel answer with a reset, which may destroy the 503
  // before the client reads it: take what has already arrived, without waiting for more.
  std::array<char, 4096> sink{};
  for (std::size_t drained = 0; drained < kMaxDrainBytes;) {
    IoResult got = client.read_some(sink, Millis{0});
    if (got.status != IoStatus::ok) break;
    drained += got.bytes;
  }
}  // `client` closes here

}  // namespace proxy
