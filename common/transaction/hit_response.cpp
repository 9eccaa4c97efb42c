// A hit's response (transaction.h: hit_head, send_cached): the stored head with this hop's Age,
// framing, Via, Connection and X-Cache, and the body, sent whole. serve_http (proxy.cpp) sends
// it from a worker; serve_hit_now (serve_hit_now.cpp) builds it on stage 4's poller.
#include <string>

#include "http/http_cache_rules.h"
#include "transaction/transaction.h"

namespace proxy {

std::string hit_head(const Context& ctx, const CachedResponse& cached) {
  std::string head;
  head.reserve(cached.head.size() + 160 +
               (cached.body.size() <= kOneWriteBytes ? cached.body.size() : 0));
  head += cached.head;
  // A response from a cache says how old it is (RFC 9111 §5.1).
  head += "Age: " + std::to_string(current_age(cached.freshness, unix_now())) + "\r\n";
  head += "Content-Length: " + std::to_string(cached.body.size()) + "\r\n" +
          via_field(ctx, 1) + connection_field(ctx) + "X-Cache: HIT\r\n\r\n";
  return head;
}

void send_cached(Context& ctx, const CachedResponse& cached) {
  std::string head = hit_head(ctx, cached);
  // One write for a small entry: a hit is the proxy's fastest path, and two sends would cost
  // a second system call and, on a persistent connection, a delayed ACK (Nagle).
  if (cached.body.size() <= kOneWriteBytes) {
    head += cached.body;
    if (ctx.client.write_all(head, ctx.options.write_timeout).status != IoStatus::ok) {
      ctx.persistent = false;
    }
    return;
  }
  if (ctx.client.write_all(head, ctx.options.write_timeout).status != IoStatus::ok ||
      ctx.client.write_all(cached.body, ctx.options.write_timeout).status != IoStatus::ok) {
    ctx.persistent = false;
  }
}

}  // namespace proxy
