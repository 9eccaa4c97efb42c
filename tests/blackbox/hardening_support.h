// Helpers for the hardening black-box tests (docs/hardening.md): a raw origin that misbehaves exactly as
// a test scripts it and records what reached it, and a request builder that asks for
// `Connection: close`, so the same tests read whole responses from stages with and without
// keep-alive.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/body_reader.h"
#include "http/http_message.h"
#include "http_client.h"
#include "net/socket.h"

namespace testing_support {

/// proxy_get() plus `Connection: close`: every hardening test reads until the proxy closes.
inline std::string closing_request(const std::string& url, std::vector<std::string> extra = {},
                                   int minor = 1, const std::string& method = "GET") {
  extra.push_back("Connection: close");
  return proxy_get(url, extra, minor, method);
}

/// exchange(port, closing_request(url)).
inline HttpResponse closing_fetch(std::uint16_t port, const std::string& url,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return exchange(port, closing_request(url), timeout);
}

/// What a RawOrigin does after sending its canned bytes.
enum class RawEnding {
  close,  ///< an orderly close (FIN)
  reset,  ///< a reset (RST)
  hold,   ///< keeps the connection open, silent, until the RawOrigin is destroyed
};

/// One request as a RawOrigin received it: the head's bytes and the decoded body.
struct ReceivedRequest {
  std::string head;
  std::string body;
};

/// An origin that answers every connection with the same canned bytes, then ends it as told.
/// It reads a whole request first (head, then the body its framing announces), and records it.
/// `reply` may be anything: a cut status line, a body shorter than promised, nothing at all.
/// Thread-safety: the accessors may be called from the test thread while it serves.
class RawOrigin {
 public:
  explicit RawOrigin(std::string reply, RawEnding ending = RawEnding::close)
      : listener_(proxy::listen_tcp("127.0.0.1", 0)), reply_(std::move(reply)), ending_(ending) {
    thread_ = std::jthread([this](std::stop_token) { serve(); });
  }
  ~RawOrigin() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(stop_.fd(), &one, sizeof one);
    thread_ = {};  // joins before the held sockets go
  }
  RawOrigin(const RawOrigin&) = delete;
  RawOrigin& operator=(const RawOrigin&) = delete;

  [[nodiscard]] std::uint16_t port() const { return proxy::local_port(listener_); }
  /// "http://127.0.0.1:PORT" + path
  [[nodiscard]] std::string url(const std::string& path = "/") const {
    return "http://127.0.0.1:" + std::to_string(port()) + path;
  }
  /// Connections accepted so far.
  [[nodiscard]] int connections() const {
    std::lock_guard lock(mutex_);
    return connections_;
  }
  /// Requests read whole so far.
  [[nodiscard]] std::vector<ReceivedRequest> received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }
  /// Waits until `count` connections were accepted; false after `timeout`.
  bool wait_for_connections(int count, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return connections_ >= count; });
  }

 private:
  void serve() {
    using namespace std::chrono_literals;
    while (auto client = proxy::accept_client(listener_, stop_.fd())) {
      {
        std::lock_guard lock(mutex_);
        ++connections_;
      }
      changed_.notify_all();
      ReceivedRequest request;
      if (read_request(*client, request)) {
        std::lock_guard lock(mutex_);
        received_.push_back(std::move(request));
      }
      if (!reply_.empty()) client->write_all(reply_, 2s);
      switch (ending_) {
        case RawEnding::close:
          client->shutdown_write();
          break;
        case RawEnding::reset:
          client->reset();
          break;
        case RawEnding::hold:
          held_.push_back(std::move(*client));
          break;
      }
    }
  }

  // Reads one request head and the body its framing announces, within a few seconds.
  static bool read_request(const proxy::Socket& client, ReceivedRequest& out) {
    using namespace std::chrono_literals;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    std::string buffer;
    std::array<char, 16384> chunk;
    auto read_more = [&] {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      auto got = client.read_some(chunk, std::max(left, std::chrono::milliseconds(0)));
      if (got.status != proxy::IoStatus::ok) return false;
      buffer.append(chunk.data(), got.bytes);
      return true;
    };
    proxy::Request request;
    for (;;) {
      auto parsed = proxy::parse_request(buffer, request);
      if (parsed.status == proxy::ParseStatus::invalid) return false;
      if (parsed.status == proxy::ParseStatus::complete) {
        out.head = buffer.substr(0, parsed.consumed);
        buffer.erase(0, parsed.consumed);
        break;
      }
      if (!read_more()) return false;
    }
    auto framing = proxy::request_body_framing(request);
    if (!framing) return false;
    proxy::BodyReader reader(*framing);
    for (;;) {
      auto r = reader.feed(buffer, out.body);
      if (r.error) return false;
      if (r.done) return true;
      buffer.clear();
      if (!read_more()) return false;
    }
  }

  proxy::Socket listener_;
  proxy::Socket stop_{::eventfd(0, EFD_CLOEXEC)};
  std::string reply_;
  RawEnding ending_;
  std::vector<proxy::Socket> held_;  // only the serving thread touches it, until it is joined

  mutable std::mutex mutex_;  // guards connections_, received_
  mutable std::condition_variable changed_;
  int connections_ = 0;
  std::vector<ReceivedRequest> received_;

  std::jthread thread_;  // last: joins before the fields above go away
};

/// "HTTP/1.1 200 OK" with `body` framed by Content-Length.
inline std::string ok_response(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nContent-Type: application/octet-stream\r\n\r\n" + body;
}

}  // namespace testing_support
