// Every byte of a response reaches a client that reads slowly. Stage 4 sends a hit without ever
// blocking: the poller answers a small one itself with one non-blocking send (serve_hit_now)
// and keeps what the client's socket did not take until epoll says it is writable; a worker
// sends a large one with blocking writes. The kernel grows a send buffer to megabytes, so a
// send stops short only once a client has left that much unread: a stage that drops the rest
// then loses nothing a quick client, or a few hits, would show. So each connection here asks
// for more hits than its socket can hold and reads nothing for a moment, then reads slowly;
// many connections ask one request at a time, one pipelines them all. The planted bug
// hit-drops-unsent (grader/mutants/) drops the rest of a hit on the poller; traps.cpp names it
// from this check's evidence: the next response's head where a body should have gone on.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <thread>

#include "check_support.h"
#include "http/body_reader.h"
#include "origin_server.h"

namespace grader {

using namespace std::chrono_literals;

namespace {

/// One client connection of the check: the hits it asked for, in order, and what came back.
struct SlowReader {
  proxy::Socket socket;
  std::vector<std::size_t> bodies;  ///< each request's body size, in the order asked
  std::size_t answered = 0;         ///< responses received whole, byte-exact, in order
  std::string raw;                  ///< bytes received past the last whole response
  std::size_t bytes = 0;            ///< every byte received
  std::string problem;              ///< why it stopped short, "" while it is fine
  bool done = false;                ///< every response in, or a problem: no more reading
};

/// A client connected with a small receive buffer (set before connect, so the window the
/// handshake advertises is small too): the proxy's send fills it at once. Throws when it cannot
/// connect.
proxy::Socket connect_small_window(std::uint16_t port, int rcvbuf) {
  proxy::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) throw std::runtime_error("socket() failed");
  proxy::set_int_option(s, SOL_SOCKET, SO_RCVBUF, rcvbuf);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    throw std::runtime_error("cannot connect to the stage on port " + std::to_string(port));
  }
  return s;
}

/// "a 60000-byte body, small enough for the poller to send" or "..., sent by a worker": which of
/// stage 4's paths a body of this size takes in the reference (serve_hit_now sends at most
/// kOneWriteBytes, 64 KiB, of body).
std::string which_body(std::size_t size) {
  return "a " + std::to_string(size) + "-byte body" +
         (size <= 64 * 1024 ? ", small enough for the poller to send" : ", sent by a worker");
}

/// Takes every whole response at the front of `r.raw` and judges it against the object it
/// asked for: 200, a hit, the body byte-exact. Sets `r.problem` (and `r.done`) at the first that
/// is wrong, or `r.done` once every response is in.
void take_responses(SlowReader& r, const std::string& label) {
  while (!r.done && r.answered < r.bodies.size()) {
    const std::string which = label + ": response " + std::to_string(r.answered + 1) + " of " +
                              std::to_string(r.bodies.size()) + " (" +
                              which_body(r.bodies[r.answered]) + ")";
    proxy::ResponseHead head;
    const auto parsed = proxy::parse_response_head(r.raw, head);
    if (parsed.status == proxy::ParseStatus::incomplete) return;
    if (parsed.status != proxy::ParseStatus::complete) {
      r.problem = which + ": no HTTP response head where it should begin: '" +
                  r.raw.substr(0, 40) + "'";
      r.done = true;
      return;
    }
    const auto framing = proxy::response_body_framing(head, "GET");
    if (!framing || framing->kind == proxy::BodyKind::close_delimited) {
      r.problem = which + ": status " + std::to_string(head.status) +
                  ", without a Content-Length or chunked framing a keep-alive client can follow";
      r.done = true;
      return;
    }
    std::string body;
    std::size_t end = 0;
    if (framing->kind == proxy::BodyKind::content_length) {
      // Cheap: this runs after every 4 KB read of a body hundreds of KB long.
      if (r.raw.size() < parsed.consumed + framing->length) return;
      body = r.raw.substr(parsed.consumed, framing->length);
      end = parsed.consumed + framing->length;
    } else {
      proxy::BodyReader reader(*framing);
      const auto fed = reader.feed(std::string_view(r.raw).substr(parsed.consumed), body);
      if (fed.error) {
        r.problem = which + ": a chunked body that does not parse";
        r.done = true;
        return;
      }
      if (!reader.done()) return;
      end = parsed.consumed + fed.consumed;
    }
    const std::string expected = harness::deterministic_bytes(r.bodies[r.answered]);
    const auto x_cache = proxy::find_field(head.fields, "X-Cache");
    if (head.status != 200 || !x_cache || *x_cache != "HIT") {
      r.problem = which + ": status " + std::to_string(head.status) + ", X-Cache '" +
                  (x_cache ? std::string(*x_cache) : std::string()) + "' (a stored object: 200, HIT)";
      // The stage runs with --shed-delay-ms 600000 and a queue that never stands: a 503 here is
      // a submit that sheds by something other than the queueing delay (lab 4's trap 7), not a
      // lost byte.
      if (head.status == 503) {
        r.problem += "; the proxy shed it though no request had waited --shed-delay-ms (600 s "
                     "here): the load shedding (submit) refused a request by something other "
                     "than the queueing delay — see the shedding check";
      }
    } else if (body.size() != expected.size()) {
      r.problem = which + ": a " + std::to_string(body.size()) +
                  "-byte body instead: the response asked for here went missing, or came out "
                  "of order";
    } else if (body != expected) {
      const std::size_t at = static_cast<std::size_t>(
          std::mismatch(body.begin(), body.end(), expected.begin(), expected.end()).first -
          body.begin());
      r.problem = which + ": not byte-exact from body byte " + std::to_string(at) +
                  (body.compare(at, 7, "HTTP/1.") == 0
                       ? ", where the next response's head began: the rest of this response "
                         "was never sent (bytes the client's socket did not take at once, lost)"
                       : std::string(" (") + std::to_string(body.size()) + " bytes of body)");
    }
    if (!r.problem.empty()) {
      r.done = true;
      return;
    }
    r.raw.erase(0, end);
    ++r.answered;
  }
  r.done = true;
}

/// Why `r` got no further when the reading stopped (a close, or `stall` without a byte).
std::string stopped_short(const SlowReader& r, const std::string& label, bool closed,
                          std::chrono::seconds stall) {
  std::string text = label + ": " + std::to_string(r.answered) + " of " +
                     std::to_string(r.bodies.size()) + " responses whole, then " +
                     std::to_string(r.raw.size()) + " bytes of response " +
                     std::to_string(r.answered + 1) + " (" + which_body(r.bodies[r.answered]) + ")";
  return text + (closed ? " and a close" : " and nothing more for " +
                                               std::to_string(stall.count()) + " s");
}

/// The most a stage's socket can hold unsent toward one client: the kernel's largest send buffer
/// (tcp_wmem's third field; 4 MiB when it cannot be read), at most 16 MiB (past that the check
/// would grow for no reader's sake).
std::size_t largest_send_buffer() {
  std::size_t most = 4u << 20;
  std::ifstream in("/proc/sys/net/ipv4/tcp_wmem");
  std::size_t least = 0, initial = 0, largest = 0;
  if (in >> least >> initial >> largest && largest > 0) most = largest;
  return std::min<std::size_t>(most, 16u << 20);
}

/// Reads every connection of `readers` slowly, all at once (poll, at most `piece` bytes per
/// read and a millisecond between rounds, so their receive buffers stay full and the proxy's
/// sends keep stopping short), until each has its responses or a problem, no byte arrives on
/// any for `stall`, or `deadline` passes.
void read_slowly(std::vector<SlowReader>& readers, const std::vector<std::string>& labels,
                 std::size_t piece, std::chrono::seconds stall, CheckClock::time_point deadline) {
  std::vector<char> buf(piece);
  auto last_byte = CheckClock::now();
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < readers.size(); ++i) {
      if (readers[i].done) continue;
      fds.push_back({readers[i].socket.fd(), POLLIN, 0});
      which.push_back(i);
    }
    const auto now = CheckClock::now();
    if (fds.empty() || now - last_byte >= stall || now >= deadline) break;
    const int ready = ::poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) break;
    for (std::size_t k = 0; ready > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      SlowReader& r = readers[which[k]];
      const ssize_t n = ::recv(r.socket.fd(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n > 0) {
        r.raw.append(buf.data(), static_cast<std::size_t>(n));
        r.bytes += static_cast<std::size_t>(n);
        last_byte = CheckClock::now();
        take_responses(r, labels[which[k]]);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        r.problem = stopped_short(r, labels[which[k]], true, stall);
        r.done = true;
      }
    }
    std::this_thread::sleep_for(1ms);  // the slowness under test
  }
  for (std::size_t i = 0; i < readers.size(); ++i) {
    if (!readers[i].done) {
      readers[i].problem = stopped_short(readers[i], labels[i], false, stall);
      readers[i].done = true;
    }
  }
}

/// "874 of 874 responses whole and byte-exact (66.7 MB received for 66.6 MB of bodies)" for
/// readers[first, first + count), then each connection's problem (at most `most`); `all` says
/// whether none had one.
std::string tally(const std::vector<SlowReader>& readers, std::size_t first, std::size_t count,
                  std::size_t most, bool& all) {
  std::size_t whole = 0, asked = 0, got = 0, expected = 0, listed = 0;
  std::string problems;
  all = true;
  for (std::size_t i = first; i < first + count; ++i) {
    const SlowReader& r = readers[i];
    whole += r.answered;
    asked += r.bodies.size();
    got += r.bytes;
    for (std::size_t b : r.bodies) expected += b;
    if (r.problem.empty()) continue;
    all = false;
    if (listed++ < most) problems += "\n         " + r.problem;
  }
  if (listed > most) problems += "\n         (and " + std::to_string(listed - most) + " more)";
  char mb[64];
  std::snprintf(mb, sizeof mb, " (%.1f MB received for %.1f MB of bodies)", got / 1e6,
                expected / 1e6);
  return std::to_string(whole) + " of " + std::to_string(asked) +
         " responses whole and byte-exact" + mb + problems;
}

}  // namespace

RunOutcome check_slow_reader(const CheckSpec& spec, const StageInfo& stage, const CheckContext& ctx) {
  const auto small = spec.params.value<std::size_t>("small_bytes", 60'000);
  const auto large = spec.params.value<std::size_t>("large_bytes", 300'000);
  const int clients = spec.params.value("clients", 12);
  const int pause_ms = spec.params.value("pause_ms", 500);
  const int rcvbuf = spec.params.value("rcvbuf", 4096);
  const std::chrono::seconds stall(spec.params.value("stall_s", 10));
  harness::OriginServer origin;
  const std::string base = "http://127.0.0.1:" + std::to_string(origin.port());
  const std::string small_url = base + "/bytes/" + std::to_string(small);
  const std::string large_url = base + "/bytes/" + std::to_string(large);
  // Room for both objects; the large one goes out from a worker, which blocks on its slow
  // client, so --workers 4 and no shedding (requests queued behind the blocked workers are no
  // standing queue to refuse here: the check is not about load); and an idle timeout far past
  // the pause, so that a loaded machine's delays are never the stage's right to close.
  Launched proxy = launch(stage, "release",
                          {"--cache-bytes", std::to_string(4 * (small + large)),
                           "--max-object-bytes", std::to_string(2 * large), "--workers", "4",
                           "--shed-delay-ms", "600000", "--idle-timeout-ms", "60000"},
                          ctx, "slow-reader");
  const std::uint16_t port = proxy.process->port();
  Verdict v;
  std::string err;
  const auto first_small = try_fetch(port, small_url, err);
  const auto first_large = try_fetch(port, large_url, err);
  const bool stored = first_small && first_small->status == 200 &&
                      first_small->body == harness::deterministic_bytes(small) && first_large &&
                      first_large->status == 200 &&
                      first_large->body == harness::deterministic_bytes(large);
  v.expect(stored,
           "the objects are fetched and stored: " + std::to_string(small) + " and " +
               std::to_string(large) + " bytes, byte-exact",
           first_small && first_large ? describe(*first_small) + "; " + describe(*first_large)
                                      : err);
  if (!stored) {
    expect_clean_stop(v, proxy);
    return {v.passed(), v.text(), {}};
  }

  // Each connection asks for more than the stage's socket toward it can hold (the kernel grows
  // a send buffer to megabytes, so a few hits would all fit and no send would stop short):
  // the small object (the poller's) and every sixteenth time the large one (a worker's), at a
  // place of its own on each connection. The response that finds the socket full is most
  // likely the poller's (the workers send a quarter of the bytes), on most connections,
  // whatever the kernel's buffer sizes.
  const std::size_t socket_holds = largest_send_buffer();
  auto hits = [&](int place) {
    std::vector<std::size_t> bodies;
    std::size_t bytes = 0;
    for (std::size_t i = 0; bytes < socket_holds + socket_holds / 4 + (256u << 10); ++i) {
      bodies.push_back(i % 16 == static_cast<std::size_t>(place % 16) ? large : small);
      bytes += bodies.back();
    }
    return bodies;
  };
  // `clients` connections whose requests go out one at a time, a millisecond apart: each
  // arrives alone, so the poller answers each small hit itself, and once the socket is full its
  // send stops short. And one connection with all of them pipelined at once, which the poller
  // and the workers take turns to answer.
  std::vector<SlowReader> readers;
  std::vector<std::string> labels;
  for (int c = 0; c <= clients; ++c) {
    SlowReader r;
    r.socket = connect_small_window(port, rcvbuf);
    r.bodies = hits(15 + c);
    readers.push_back(std::move(r));
    labels.push_back(c < clients ? "client " + std::to_string(c + 1) : "the pipelined connection");
  }
  auto request_for = [&](std::size_t body) {
    return testing_support::proxy_get(body == small ? small_url : large_url);
  };
  auto send = [&](SlowReader& r, const std::string& bytes) {
    if (!r.done && r.socket.write_all(bytes, 5s).status != proxy::IoStatus::ok) {
      r.problem = "its requests could not be sent";
      r.done = true;
    }
  };
  std::string all_at_once;
  for (std::size_t b : readers.back().bodies) all_at_once += request_for(b);
  send(readers.back(), all_at_once);
  for (std::size_t i = 0;; ++i) {
    bool sent = false;
    for (int c = 0; c < clients; ++c) {
      SlowReader& r = readers[static_cast<std::size_t>(c)];
      if (i >= r.bodies.size()) continue;
      send(r, request_for(r.bodies[i]));
      sent = true;
    }
    if (!sent) break;
    std::this_thread::sleep_for(1ms);
  }
  // Nobody has read yet: the responses the stage started when the sockets filled stopped short.
  std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  const auto began = CheckClock::now();
  read_slowly(readers, labels, static_cast<std::size_t>(rcvbuf), stall, began + 60s);
  std::size_t asked_bytes = 0;
  for (std::size_t b : readers.back().bodies) asked_bytes += b;
  v.note("  (each connection asked for " + std::to_string(readers.back().bodies.size()) +
         " hits or so, " + std::to_string(asked_bytes / 1000) + " kB of bodies, past the " +
         std::to_string(socket_holds >> 10) + " KiB a send buffer may grow to; read in " +
         std::to_string(static_cast<int>(seconds_since(began) * 1000)) + " ms)");

  bool all = true;
  std::string seen = tally(readers, 0, static_cast<std::size_t>(clients), 5, all);
  v.expect(all,
           std::to_string(clients) + " clients, each asking for its hits one at a time (" +
               std::to_string(small) + "-byte bodies, every sixteenth " + std::to_string(large) +
               ") without reading, then reading slowly after " + std::to_string(pause_ms) +
               " ms, get every response whole and byte-exact",
           seen);
  seen = tally(readers, static_cast<std::size_t>(clients), 1, 1, all);
  v.expect(all,
           "one keep-alive connection with such hits all pipelined at once, not read for " +
               std::to_string(pause_ms) +
               " ms, then read slowly, gets every response whole and byte-exact, in order",
           seen);
  const std::uint64_t asked = origin.request_count("/bytes/");
  v.expect(asked == 2, "every response was a hit: the origin was asked for each object once",
           "the origin was asked " + std::to_string(asked) + " times");
  expect_clean_stop(v, proxy);
  return {v.passed(), v.text(), {}};
}

}  // namespace grader
