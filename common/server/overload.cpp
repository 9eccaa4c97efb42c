#include "server/overload.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "server/log.h"

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

// Under overload every refusal would be a line on stderr — tens of thousands a second, each a
// blocking write from the very thread that must stay quick (stage 4's poller, stage 3's accept
// loop), and a stalled stderr would stall the proxy. So: one line per second at most, saying how
// many refusals it stands for. Returns whether to log now and how many went unlogged before.
bool log_slot(std::uint64_t& unlogged) noexcept {
  static std::atomic<std::int64_t> next_ms{0};
  static std::atomic<std::uint64_t> skipped{0};
  const std::int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t due = next_ms.load(std::memory_order_relaxed);
  if (now < due || !next_ms.compare_exchange_strong(due, now + 1'000, std::memory_order_relaxed)) {
    skipped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  unlogged = skipped.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace

void reply_overloaded(Socket client, ProxyStats& stats, std::string_view reason,
                      std::string_view detail) noexcept {
  stats.errors.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t unlogged = 0;
  if (log_slot(unlogged)) {
    try {
      std::string line = "client " + peer_address(client) + ": 503 " + std::string(reason);
      if (!detail.empty()) line.append(": ").append(detail);
      if (unlogged > 0) {
        line += " (and " + std::to_string(unlogged) + " more 503s not logged since the last line)";
      }
      log_line(line);
    } catch (...) {
      log_line("503: cannot serve a client (and out of memory while saying why)");
    }
  }
  if (client.write_all(kResponse, kWriteTimeout).status != IoStatus::ok) return;
  // Take the request bytes that already arrived, without waiting for more (drain_and_close).
  client.drain_and_close(Millis{0}, kMaxDrainBytes);
}

}  // namespace proxy
