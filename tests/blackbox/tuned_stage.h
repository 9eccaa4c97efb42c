// The fixture and helpers stage 4's black-box tests share (stage4_tuned_test.cpp,
// stage4_paths_test.cpp): reading keep-alive responses by their framing, a strict parse of
// /metrics' Prometheus text, and TunedStage, a StageTest that can ask the stage for /metrics.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "http/body_reader.h"
#include "stage_fixture.h"

namespace testing_support {

// Generous: a loaded 2-core machine under TSan.
inline constexpr auto kDeadline = std::chrono::seconds(30);

/// Reads `count` responses from one connection, in order, each delimited by its framing
/// (Content-Length or chunked), as a keep-alive client must. Fewer when the connection ends or
/// `timeout` passes first.
inline std::vector<HttpResponse> read_framed(const proxy::Socket& socket, std::size_t count,
                                             std::chrono::milliseconds timeout) {
  std::vector<HttpResponse> responses;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string raw;
  std::array<char, 65536> chunk;
  while (responses.size() < count) {
    proxy::ResponseHead head;
    auto parsed = proxy::parse_response_head(raw, head);
    if (parsed.status == proxy::ParseStatus::complete) {
      auto framing = proxy::response_body_framing(head, "GET");
      if (framing && framing->kind != proxy::BodyKind::close_delimited) {
        proxy::BodyReader reader(*framing);
        HttpResponse r;
        auto fed = reader.feed(std::string_view(raw).substr(parsed.consumed), r.body);
        if (!fed.error && reader.done()) {
          r.status = head.status;
          r.fields = head.fields;
          r.complete = true;
          const std::size_t end = parsed.consumed + fed.consumed;
          r.raw = raw.substr(0, end);
          raw.erase(0, end);
          responses.push_back(std::move(r));
          continue;
        }
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto got = socket.read_some(chunk, left);
    if (got.status != proxy::IoStatus::ok) break;
    raw.append(chunk.data(), got.bytes);
  }
  return responses;
}

/// True once the peer has closed `socket` (EOF or reset) within `timeout`, discarding data.
inline bool closed_by_peer(const proxy::Socket& socket, std::chrono::milliseconds timeout) {
  std::array<char, 4096> buf;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    auto got = socket.read_some(buf, left);
    if (got.status == proxy::IoStatus::eof || got.status == proxy::IoStatus::error) return true;
    if (got.status != proxy::IoStatus::ok) return false;
  }
}

/// One parsed exposition: sample name (with labels) → value, and each family's TYPE.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::map<std::string, std::string> helps;
  double operator[](const std::string& name) const {
    auto it = samples.find(name);
    return it == samples.end() ? std::nan("") : it->second;
  }
};

/// Parses Prometheus text format 0.0.4 strictly enough to fail on anything malformed: every
/// line is a HELP, a TYPE or `name[{labels}] value`; every sample belongs to a family with
/// HELP and TYPE declared before it.
inline Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, rest;
      words >> name;
      std::getline(words, rest);
      EXPECT_FALSE(name.empty()) << line;
      EXPECT_FALSE(rest.empty()) << line;
      (line[2] == 'H' ? out.helps : out.types)[name] = rest.substr(rest.find_first_not_of(' '));
      continue;
    }
    EXPECT_NE(line[0], '#') << "unknown comment: " << line;
    const std::size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos) continue;
    const std::string name = line.substr(0, space);
    std::size_t used = 0;
    const double value = std::stod(line.substr(space + 1), &used);
    EXPECT_EQ(space + 1 + used, line.size()) << "trailing text: " << line;
    std::string family = name.substr(0, name.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (family.size() > s.size() && family.ends_with(s) &&
          out.types.count(family.substr(0, family.size() - s.size())) != 0) {
        family.resize(family.size() - s.size());
      }
    }
    EXPECT_EQ(out.types.count(family), 1u) << "no TYPE before " << line;
    EXPECT_EQ(out.helps.count(family), 1u) << "no HELP before " << line;
    out.samples[name] = value;
  }
  return out;
}

class TunedStage : public StageTest {
 public:
  // For the helpers the liveness tests share.
  std::uint16_t port() const { return proxy_port(); }
  std::string url(const std::string& path) const { return origin_url(path); }
  harness::OriginServer& origin() { return *origin_; }
  /// Polls /metrics until sample `name` is at least `value`, within kDeadline.
  bool wait_for_metric(const std::string& name, double value) {
    return metrics_until([&](const Exposition& m) { return m[name] >= value; },
                         [](const Exposition&) {}, kDeadline);
  }

 protected:
  /// Asks as a monitoring client does (keep-alive), so the poller answers it whatever the load;
  /// with metrics_by_worker_ set, with Connection: close, which a worker answers (and a stage
  /// shedding load may refuse with 503).
  Exposition metrics() {
    HttpResponse r = exchange(proxy_port(), metrics_by_worker_
                                                ? "GET /metrics HTTP/1.1\r\nHost: proxy\r\n"
                                                  "Connection: close\r\n\r\n"
                                                : "GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n");
    EXPECT_EQ(r.status, 200);
    EXPECT_THAT(r.field("Content-Type"), ::testing::HasSubstr("text/plain; version=0.0.4"));
    return parse_exposition(r.body);
  }

  /// Polls /metrics until `condition` holds for a snapshot, for at most `deadline`; every
  /// snapshot seen is also handed to `each` (bound checks).
  bool metrics_until(const std::function<bool(const Exposition&)>& condition,
                     const std::function<void(const Exposition&)>& each,
                     std::chrono::milliseconds deadline) {
    const auto until = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      Exposition m = metrics();
      each(m);
      if (condition(m)) return true;
      if (std::chrono::steady_clock::now() > until) return false;
      // Polling another process's state: nothing to wait on.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  bool metrics_by_worker_ = false;  // metrics() asks with Connection: close
};

}  // namespace testing_support
