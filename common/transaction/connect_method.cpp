// CONNECT host:port (RFC 9110 §9.3.6): the proxy checks the target, connects, answers 200 and
// from then on relays bytes both ways (tunnel.h) — TLS, usually, which it cannot read.
#include <algorithm>
#include <atomic>

#include "http/uri.h"
#include "transaction/transaction.h"
#include "transaction/tunnel.h"

namespace proxy {
namespace {

// A place among max_tunnels, given back however the tunnel ends.
class TunnelSlot {
 public:
  explicit TunnelSlot(std::atomic<std::uint64_t>& open)
      : open_(open), now_open_(open.fetch_add(1, std::memory_order_relaxed) + 1) {}
  ~TunnelSlot() {
    if (!handed_over_) open_.fetch_sub(1, std::memory_order_relaxed);
  }
  TunnelSlot(const TunnelSlot&) = delete;
  TunnelSlot& operator=(const TunnelSlot&) = delete;
  [[nodiscard]] std::uint64_t now_open() const noexcept { return now_open_; }
  /// The place goes with the tunnel to ProxyOptions::adopt_tunnel, which gives it back.
  void hand_over() noexcept { handed_over_ = true; }

 private:
  bool handed_over_ = false;
  std::atomic<std::uint64_t>& open_;
  std::uint64_t now_open_;
};

// The target of a CONNECT, or nullopt after answering 400 or 403.
std::optional<AbsoluteUri> allowed_target(Context& ctx, const Request& request) {
  std::optional<AbsoluteUri> target = parse_authority_form(request.target);
  if (!target) {
    reply_error(ctx, 400, "CONNECT needs an authority-form target, such as "
                          "CONNECT example.com:443 HTTP/1.1");
    return std::nullopt;
  }
  const auto& ports = ctx.options.connect_ports;
  if (std::find(ports.begin(), ports.end(), target->port) == ports.end()) {
    // Without this, the proxy would relay to any port: SMTP spam, internal services.
    reply_error(ctx, 403, "CONNECT to port " + std::to_string(target->port) +
                              " is not allowed (--connect-ports)");
    return std::nullopt;
  }
  return target;
}

// Connects to the target and answers the client 200, passing on the bytes it sent after its
// request head. Returns the origin socket of an established tunnel, or nullopt once answered.
std::optional<Socket> establish_tunnel(Context& ctx, const AbsoluteUri& target,
                                       std::string_view early_bytes) {
  std::optional<Socket> origin = connect_to_origin(ctx, target.host, target.port);
  if (!origin) return std::nullopt;
  ctx.stats.tunnels.fetch_add(1, std::memory_order_relaxed);
  // No Content-Length or Transfer-Encoding in a 2xx to CONNECT (RFC 9110 §9.3.6).
  if (ctx.client.write_all("HTTP/1.1 200 Connection Established\r\nX-Cache: MISS\r\n\r\n",
                           ctx.options.write_timeout).status != IoStatus::ok ||
      (!early_bytes.empty() &&
       origin->write_all(early_bytes, ctx.options.write_timeout).status != IoStatus::ok)) {
    origin->reset();
    return std::nullopt;
  }
  return origin;
}

}  // namespace

// With options.adopt_tunnel the relay is handed over after the 200 and `client` left empty.
bool serve_connect(Context& ctx, Socket& client, const Request& request,
                   std::string_view early_bytes) {
  std::optional<AbsoluteUri> target = allowed_target(ctx, request);
  if (!target) return true;
  TunnelSlot slot(ctx.stats.tunnels_open);
  if (ctx.options.max_tunnels != 0 && slot.now_open() > ctx.options.max_tunnels) {
    reply_error(ctx, 503, "too many CONNECT tunnels open (--max-tunnels " +
                              std::to_string(ctx.options.max_tunnels) + ")");
    return true;
  }
  std::optional<Socket> origin = establish_tunnel(ctx, *target, early_bytes);
  if (!origin) return true;
  if (ctx.options.adopt_tunnel) {
    slot.hand_over();
    ctx.options.adopt_tunnel(
        EstablishedTunnel{std::move(client), std::move(*origin), ctx.peer, request.target});
    return true;  // `client` is empty now: closing it does nothing
  }
  TunnelResult result = run_tunnel(ctx.client, *origin, ctx.options.tunnel_idle_timeout,
                                   ctx.options.write_timeout);
  switch (result.end) {
    case TunnelEnd::closed:
      return true;
    case TunnelEnd::idle:
      log_failure(ctx, "tunnel idle for " + std::to_string(ctx.options.tunnel_idle_timeout.count()) +
                           " ms; closed");
      return true;
    case TunnelEnd::cancelled:
    case TunnelEnd::error:
      origin->reset();  // neither side may take a cut stream for a finished one
      return false;
  }
  return true;
}

}  // namespace proxy
