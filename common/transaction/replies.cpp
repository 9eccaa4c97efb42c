// The responses the proxy makes itself, and its log lines: errors (4xx, 5xx) and the metrics
// page. Every one carries X-Cache: MISS, like every response the proxy sends.
#include "server/log.h"
#include "transaction/transaction.h"

namespace proxy {

void reply_error(Context& ctx, int status, std::string_view detail) {
  ctx.stats.errors.fetch_add(1, std::memory_order_relaxed);
  if (ctx.status_out != nullptr) *ctx.status_out = status;
  ctx.persistent = false;  // after an error, the rest of the connection's bytes are suspect
  log_failure(ctx, std::to_string(status) + " " + std::string(detail));
  const std::string reason(reason_phrase(status));
  std::string body = std::to_string(status) + " " + reason + ": " + std::string(detail) + "\n";
  std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                         "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
                         std::to_string(body.size()) +
                         // Our own overload: the client may retry (RFC 9110 §10.2.3).
                         (status == 503 ? "\r\nRetry-After: 1" : "") +
                         "\r\nConnection: close\r\nX-Cache: MISS\r\n\r\n";
  // RFC 9110 §9.3.2: the answer to a HEAD is the head a GET would get, its Content-Length
  // included, and no content: a client reading one must not find the body as its next response.
  if (!ctx.head_method) response += body;
  send_to_client(ctx, response);
}

IoStatus send_to_client(Context& ctx, std::string_view bytes) {
  if (ctx.out != nullptr) {
    ctx.out->append(bytes);
    return IoStatus::ok;
  }
  return ctx.client.write_all(bytes, ctx.options.write_timeout).status;
}

std::string metrics_response(const Context& ctx, const std::string& text) {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
         "charset=utf-8\r\nCache-Control: no-store\r\nContent-Length: " +
         std::to_string(text.size()) + "\r\n" + connection_field(ctx) + "X-Cache: MISS\r\n\r\n" +
         text;
}

void send_metrics(Context& ctx, const std::string& text) {
  const std::string response = metrics_response(ctx, text);
  if (ctx.client.write_all(response, ctx.options.write_timeout).status != IoStatus::ok) {
    ctx.persistent = false;
  }
}

void log_failure(const Context& ctx, std::string_view message) {
  std::string line = "client " + ctx.peer;
  if (!ctx.what.empty()) line += " " + ctx.what;
  line += ": ";
  line += message;
  log_line(line);
}

std::string connection_field(const Context& ctx) {
  if (!ctx.persistent) return "Connection: close\r\n";
  return ctx.version_minor == 0 ? "Connection: keep-alive\r\n" : std::string();
}

// This hop's Via field line (RFC 9110 §7.6.3), for a message received as HTTP/1.<minor>. It
// goes after any Via the message carried, which is how a list field is appended to.
std::string via_field(const Context& ctx, int version_minor) {
  return "Via: 1." + std::to_string(version_minor) + " " + ctx.options.via_name + "\r\n";
}

}  // namespace proxy
