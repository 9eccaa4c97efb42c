// The scripted origin's connection loop: epoll loops that accept, parse requests, carry out the
// Plan a route made (origin_routes.cpp) — delay, capacity slot, reply — and write the replies.
#include "origin_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http/body_reader.h"
#include "http/http_message.h"
#include "http/uri.h"
#include "origin_routes.h"
#include "server/log.h"

namespace harness {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t kPatternPeriod = 256;  // (i * 31 + 7) & 0xFF repeats every 256 bytes
constexpr std::size_t kWritePiece = std::size_t{64} * 1024;  // most bytes handed to one send()
constexpr std::size_t kChunkSize = std::size_t{4} * 1024;    // /stream-bytes chunk size
constexpr std::size_t kReadPiece = std::size_t{16} * 1024;
// Read-ahead bound while a response is pending: pipelining clients cannot grow us unboundedly.
constexpr std::size_t kMaxBuffered = std::size_t{64} * 1024;
constexpr std::size_t kMaxRequestBody = std::size_t{16} * 1024 * 1024;
// Generated bodies up to this size go out with the head in one send(): one syscall per small
// response is what lets a single loop keep up with wrk.
constexpr std::size_t kInlineBody = std::size_t{16} * 1024;
// After a closing response, how long we drain the client's leftovers before closing, so
// unread pipelined bytes do not turn our FIN into a RST that could destroy the response.
constexpr auto kLingerTime = 2s;
constexpr auto kAcceptRetry = 100ms;
constexpr std::uint64_t kListenerId = 0;  // epoll/timer ids below kFirstConnectionId
constexpr std::uint64_t kWakeId = 1;
constexpr std::uint64_t kFirstConnectionId = 2;
constexpr std::string_view kTrailerName = "X-Origin-Trailer";

// One period of the pattern repeated past kWritePiece, so any piece of any body is a single
// contiguous slice starting at (offset % 256): large bodies are sent without copying.
const std::string& pattern() {
  static const std::string bytes = deterministic_bytes(kWritePiece + kPatternPeriod);
  return bytes;
}

// RFC 9112 §9.3: 1.1 persists unless "close"; 1.0 only with "keep-alive".
bool wants_keep_alive(const proxy::Request& request) {
  if (proxy::field_has_token(request.fields, "Connection", "close")) return false;
  if (request.version_minor == 0) {
    return proxy::field_has_token(request.fields, "Connection", "keep-alive");
  }
  return true;
}

// The header lines of a head as received: everything between the request line and the empty
// line. parse_request may skip empty lines before the request line (RFC 9112 §2.2), so do too.
std::string_view raw_field_lines(std::string_view head) {
  std::size_t start = 0;
  while (head.substr(start).starts_with("\r\n")) start += 2;
  auto line_end = head.find("\r\n", start);
  if (line_end == std::string_view::npos || head.size() < line_end + 4) return {};
  return head.substr(line_end + 2, head.size() - (line_end + 2) - 2);
}

}  // namespace

std::string deterministic_bytes(std::size_t n) {
  std::string bytes(n, '\0');
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 31 + 7) & 0xFF);
  return bytes;
}

// ---------------------------------------------------------------------------------------------

/// The downstream bottleneck (downstream.h): counts the requests in service, and under the
/// queue law keeps at most `capacity` of them in service, the rest waiting in FIFO order for a
/// freed place, handed over through their loop's grant(). The law and capacity may change at
/// run time (/__load). Thread-safe.
class OriginServer::Downstream {
 public:
  Downstream(Overload law, int capacity) : law_(law), capacity_(capacity) {}

  /// Takes a place in service and returns how many are in service with it (itself included);
  /// 0 when queued instead — grant(id) follows once a place frees.
  int acquire(Loop& loop, std::uint64_t connection_id);
  /// Gives a place back, handing it straight to the oldest waiter if there is one.
  void release();
  /// The service a request that just took a place with `in_service` in service gets.
  Service service(int in_service, std::uint64_t delay_ms, double uniform) const;
  /// Changes the law and/or the capacity (0: unlimited); waiters a larger capacity or another
  /// law lets in are granted at once.
  void set(std::optional<Overload> law, std::optional<int> capacity);
  /// {"law":...,"capacity":K,"in_service":N,"peak_in_service":M,"waiting":W}; `reset_peak`
  /// starts the peak again from the number in service now.
  std::string json(bool reset_peak);

 private:
  bool has_room() const { return law_ != Overload::queue || capacity_ == 0 || in_use_ < capacity_; }

  mutable std::mutex mutex_;  // guards every field below
  Overload law_;
  int capacity_;
  int in_use_ = 0;
  int peak_ = 0;
  std::deque<std::pair<Loop*, std::uint64_t>> waiting_;
};

/// One epoll loop: accepts from the shared listener and owns every connection it accepted.
/// Only its own thread touches its connections; other threads call just grant() and wake().
class OriginServer::Loop {
 public:
  Loop(OriginServer& server, bool shared_listener);
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  /// Serves until `token` is stopped. Runs on the loop's own thread.
  void run(const std::stop_token& token);
  /// Hands a capacity slot to a queued connection. Thread-safe.
  void grant(std::uint64_t connection_id);
  /// Interrupts epoll_wait. Thread-safe.
  void wake() noexcept;
  /// Asks the loop to close its stalled connections at its next wake-up. Thread-safe.
  void end_stalled() noexcept {
    end_stalled_.store(true);
    wake();
  }

 private:
  enum class Phase { head, body, queued, delayed, writing, stalled, lingering, dropped };

  struct Connection {
    std::uint64_t id = 0;
    proxy::Socket socket;
    Phase phase = Phase::head;
    std::string in;  // received, not yet consumed
    bool peer_eof = false;
    bool write_blocked = false;
    bool reset_on_close = false;
    bool holds_slot = false;
    bool drop_next = false;  // /drop-next answered: the next request is dropped unanswered
    std::uint32_t events = 0;     // the epoll interest currently registered
    std::uint64_t timer_seq = 0;  // only the newest timer of a connection counts

    // The request being read and answered.
    proxy::Request request;
    std::string raw_fields;
    std::optional<proxy::BodyReader> body_reader;
    std::string body;
    bool keep_alive = true;
    std::optional<Plan> plan;

    // The response being written: `out` first, then generated bytes [gen_offset, gen_end).
    std::string out;
    std::size_t out_pos = 0;
    std::uint64_t gen_offset = 0;
    std::uint64_t gen_end = 0;
    bool chunked = false;
    bool last_chunk_sent = false;
    Ending ending = Ending::keep_alive;
  };

  struct Timer {
    Clock::time_point when;
    std::uint64_t id;
    std::uint64_t seq;
    bool operator>(const Timer& other) const { return when > other.when; }
  };

  enum class WriteStatus { done, blocked, failed };
  // What one step of a connection's state machine leaves: go on at once with its new phase, or
  // wait for more events keeping the connection, or close it.
  enum class Next { again, wait, close };

  void accept_clients();
  void on_connection_event(std::uint64_t id, std::uint32_t events);
  void on_grants();
  int fire_timers();
  void on_timer(const Timer& timer);
  void add_timer(Connection& c, Clock::duration after);

  bool read_available(Connection& c);
  bool advance(Connection& c);
  Next read_head(Connection& c);
  Next read_body(Connection& c);
  Next write_response(Connection& c);
  void dispatch(Connection& c);
  Reply load_reply(std::string_view query);
  void begin_delay(Connection& c);
  void start_plan(Connection& c);
  void start_reply(Connection& c, Reply reply);
  void start_error(Connection& c, int status);
  void finish_request(Connection& c);
  WriteStatus pump(Connection& c);
  void refill_chunks(Connection& c);
  void update_interest(Connection& c);
  // Runs `step` (bool(Connection&): false = close) on a connection, then closes it or
  // refreshes its epoll interest.
  template <typename Step>
  void drive(std::uint64_t id, Step&& step);
  void close_connection(std::uint64_t id);
  const std::string& http_date();

  OriginServer& server_;
  const bool shared_listener_;
  proxy::Socket epoll_;
  proxy::Socket wake_;  // an eventfd
  bool listener_armed_ = false;
  bool told_accept_error_ = false;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::atomic<bool> end_stalled_{false};  // set by end_stalled(), from any thread
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::uint64_t next_id_ = kFirstConnectionId;
  std::string read_buffer_ = std::string(kReadPiece, '\0');
  std::time_t date_second_ = 0;
  std::string date_;

  // Draws the thrash law's slow requests: seeded, so a run repeats when its arrivals do.
  std::mt19937_64 random_{0x5eed};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};

  std::mutex grants_mutex_;  // guards granted_
  std::vector<std::uint64_t> granted_;
};

int OriginServer::Downstream::acquire(Loop& loop, std::uint64_t connection_id) {
  std::lock_guard lock(mutex_);
  if (has_room()) {
    peak_ = std::max(peak_, ++in_use_);
    return in_use_;
  }
  waiting_.emplace_back(&loop, connection_id);
  return 0;
}

void OriginServer::Downstream::release() {
  std::pair<Loop*, std::uint64_t> next;
  {
    std::lock_guard lock(mutex_);
    --in_use_;
    if (waiting_.empty() || !has_room()) return;
    next = waiting_.front();
    waiting_.pop_front();
    ++in_use_;  // the place passes to the waiter without being free a moment: FIFO order holds
  }
  next.first->grant(next.second);
}

Service OriginServer::Downstream::service(int in_service, std::uint64_t delay_ms,
                                          double uniform) const {
  std::lock_guard lock(mutex_);
  return service_for(law_, capacity_, in_service, delay_ms, uniform);
}

void OriginServer::Downstream::set(std::optional<Overload> law, std::optional<int> capacity) {
  std::vector<std::pair<Loop*, std::uint64_t>> granted;
  {
    std::lock_guard lock(mutex_);
    law_ = law.value_or(law_);
    capacity_ = capacity.value_or(capacity_);
    while (!waiting_.empty() && has_room()) {
      granted.push_back(waiting_.front());
      waiting_.pop_front();
      peak_ = std::max(peak_, ++in_use_);
    }
  }
  for (auto& [loop, id] : granted) loop->grant(id);
}

std::string OriginServer::Downstream::json(bool reset_peak) {
  std::lock_guard lock(mutex_);
  nlohmann::json out = {{"law", overload_name(law_)},
                        {"capacity", capacity_},
                        {"in_service", in_use_},
                        {"peak_in_service", peak_},
                        {"waiting", waiting_.size()}};
  if (reset_peak) peak_ = in_use_;
  return out.dump() + "\n";
}

OriginServer::Loop::Loop(OriginServer& server, bool shared_listener)
    : server_(server), shared_listener_(shared_listener) {
  epoll_ = proxy::Socket(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid())
    throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
  wake_ = proxy::Socket(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeId;
  if (::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, wake_.fd(), &event) != 0) {
    throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  event.events = EPOLLIN;
  // Several loops on one listener: wake only one of them per connection (no thundering herd).
  if (shared_listener_) event.events |= EPOLLEXCLUSIVE;
  event.data.u64 = kListenerId;
  if (::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, server_.listener_.fd(), &event) != 0) {
    throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  listener_armed_ = true;
}

void OriginServer::Loop::wake() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto written = ::write(wake_.fd(), &one, sizeof one);
}

void OriginServer::Loop::grant(std::uint64_t connection_id) {
  {
    std::lock_guard lock(grants_mutex_);
    granted_.push_back(connection_id);
  }
  wake();
}

void OriginServer::Loop::run(const std::stop_token& token) {
  std::stop_callback wake_on_stop(token, [this] { wake(); });
  std::array<epoll_event, 256> events{};
  while (!token.stop_requested()) {
    int timeout_ms = fire_timers();
    int ready =
        ::epoll_wait(epoll_.fd(), events.data(), static_cast<int>(events.size()), timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      proxy::log_line(std::string("origin: epoll_wait: ") + std::strerror(errno));
      return;
    }
    for (int i = 0; i < ready; ++i) {
      const std::uint64_t id = events[i].data.u64;
      if (id == kListenerId) {
        accept_clients();
      } else if (id == kWakeId) {
        std::uint64_t count = 0;
        [[maybe_unused]] auto got = ::read(wake_.fd(), &count, sizeof count);
        on_grants();
        if (end_stalled_.exchange(false)) {
          std::vector<std::uint64_t> stalled;
          for (const auto& [cid, c] : connections_) {
            if (c->phase == Phase::stalled) stalled.push_back(cid);
          }
          for (std::uint64_t cid : stalled) close_connection(cid);
        }
      } else {
        on_connection_event(id, events[i].events);
      }
    }
  }
}

void OriginServer::Loop::accept_clients() {
  // Bounded so a connection storm cannot starve the connections already open.
  for (int i = 0; i < 256; ++i) {
    int fd = ::accept4(server_.listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (!told_accept_error_) {
        proxy::log_line(std::string("origin: accept: ") + std::strerror(errno) +
                        "; retrying every 100 ms");
        told_accept_error_ = true;
      }
      // The listener stays readable while the backlog holds connections: step back from it
      // for a while instead of spinning (EMFILE and friends clear only as connections close).
      ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, server_.listener_.fd(), nullptr);
      listener_armed_ = false;
      timers_.push({Clock::now() + kAcceptRetry, kListenerId, 0});
      return;
    }
    server_.accepted_.fetch_add(1, std::memory_order_relaxed);
    auto c = std::make_unique<Connection>();
    c->id = next_id_++;
    c->socket = proxy::Socket(fd);
    proxy::set_int_option(c->socket, IPPROTO_TCP, TCP_NODELAY, 1);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = c->id;
    if (::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, fd, &event) != 0) continue;  // c closes fd
    c->events = EPOLLIN;
    connections_.emplace(c->id, std::move(c));
  }
}

template <typename Step>
void OriginServer::Loop::drive(std::uint64_t id, Step&& step) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  bool keep = false;
  try {
    keep = step(c);
  } catch (const std::exception& error) {
    // A surprise in one connection (allocation failure, say) ends that connection only.
    proxy::log_line(std::string("origin: connection dropped: ") + error.what());
  }
  if (keep) {
    update_interest(c);
  } else {
    close_connection(id);
  }
}

void OriginServer::Loop::on_connection_event(std::uint64_t id, std::uint32_t events) {
  drive(id, [&](Connection& c) {
    // Reset by the peer, or both directions finished: nothing more can be said.
    if (events & (EPOLLERR | EPOLLHUP)) return false;
    if (events & EPOLLOUT) c.write_blocked = false;
    if ((events & EPOLLIN) && !read_available(c)) return false;
    return advance(c);
  });
}

void OriginServer::Loop::on_grants() {
  std::vector<std::uint64_t> granted;
  {
    std::lock_guard lock(grants_mutex_);
    granted.swap(granted_);
  }
  for (std::uint64_t id : granted) {
    auto it = connections_.find(id);
    if (it == connections_.end() || it->second->phase != Phase::queued) {
      // Its client left while waiting: pass the place on.
      server_.downstream_->release();
      continue;
    }
    drive(id, [&](Connection& c) {
      c.holds_slot = true;
      begin_delay(c);
      return advance(c);
    });
  }
}

int OriginServer::Loop::fire_timers() {
  for (;;) {
    if (timers_.empty()) return -1;
    const auto now = Clock::now();
    const Timer top = timers_.top();
    if (top.when > now) {
      // Round up: waking a millisecond early would only spin once more.
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(top.when - now).count();
      return static_cast<int>(std::min<std::int64_t>(wait, 60'000));
    }
    timers_.pop();
    on_timer(top);
  }
}

void OriginServer::Loop::on_timer(const Timer& timer) {
  if (timer.id == kListenerId) {
    if (listener_armed_) return;
    epoll_event event{};
    event.events = shared_listener_ ? (EPOLLIN | EPOLLEXCLUSIVE) : EPOLLIN;
    event.data.u64 = kListenerId;
    if (::epoll_ctl(epoll_.fd(), EPOLL_CTL_ADD, server_.listener_.fd(), &event) == 0) {
      listener_armed_ = true;
    }
    return;
  }
  drive(timer.id, [&](Connection& c) {
    if (timer.seq != c.timer_seq) return true;  // superseded
    if (c.phase == Phase::lingering) return false;
    if (c.phase == Phase::delayed) start_plan(c);
    return advance(c);
  });
}

void OriginServer::Loop::add_timer(Connection& c, Clock::duration after) {
  timers_.push({Clock::now() + after, c.id, ++c.timer_seq});
}

// Reads whatever the socket holds, up to the read-ahead bound. False on a read error.
bool OriginServer::Loop::read_available(Connection& c) {
  while (!c.peer_eof && c.in.size() < kMaxBuffered) {
    ssize_t n = ::recv(c.socket.fd(), read_buffer_.data(), read_buffer_.size(), MSG_DONTWAIT);
    if (n > 0) {
      // Nothing a stalled or closing connection sends will be answered: drop it.
      if (c.phase != Phase::stalled && c.phase != Phase::lingering) {
        c.in.append(read_buffer_.data(), static_cast<std::size_t>(n));
      }
      continue;
    }
    if (n == 0) {
      c.peer_eof = true;
      return true;
    }
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

// Runs the connection's state machine as far as the bytes at hand allow. False when the
// connection is finished and must be closed.
bool OriginServer::Loop::advance(Connection& c) {
  for (;;) {
    Next next = Next::again;
    switch (c.phase) {
      case Phase::head:
        next = read_head(c);
        break;
      case Phase::body:
        next = read_body(c);
        break;
      case Phase::queued:
      case Phase::delayed:
        return true;
      case Phase::stalled:
      case Phase::lingering:
        return !c.peer_eof;
      case Phase::dropped:
        return false;
      case Phase::writing:
        next = write_response(c);
        break;
    }
    if (next != Next::again) return next == Next::wait;
  }
}

// Phase::head: parses the request head once it is whole, then reads its body, dispatches it,
// or answers an error.
OriginServer::Loop::Next OriginServer::Loop::read_head(Connection& c) {
  const Next more = c.peer_eof ? Next::close : Next::wait;  // a head cut short by EOF is never answered
  if (c.in.empty()) return more;
  auto parsed = proxy::parse_request(c.in, c.request);
  if (parsed.status == proxy::ParseStatus::invalid) {
    start_error(c, parsed.error_status != 0 ? parsed.error_status : 400);
    return Next::again;
  }
  if (parsed.status == proxy::ParseStatus::incomplete) {
    if (c.in.size() < kMaxBuffered) return more;
    start_error(c, 431);
    return Next::again;
  }
  c.raw_fields = std::string(raw_field_lines(std::string_view(c.in).substr(0, parsed.consumed)));
  c.in.erase(0, parsed.consumed);
  c.keep_alive = wants_keep_alive(c.request);
  auto framing = proxy::request_body_framing(c.request);
  if (!framing) {
    start_error(c, 400);
  } else if (framing->kind == proxy::BodyKind::none) {
    dispatch(c);
  } else if (framing->kind == proxy::BodyKind::content_length && framing->length > kMaxRequestBody) {
    start_error(c, 413);
  } else {
    c.body_reader.emplace(*framing);
    c.phase = Phase::body;
    if (c.request.version_minor == 1 &&
        proxy::field_has_token(c.request.fields, "Expect", "100-continue")) {
      // Nothing else is queued for output while a request is read, so this small write
      // cannot interleave with a response; if it does not fit, the client's own
      // Expect timeout sends the body anyway.
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      [[maybe_unused]] auto sent = ::send(c.socket.fd(), kContinue.data(), kContinue.size(),
                                          MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
  return Next::again;
}

// Phase::body: feeds the body reader; a whole body is dispatched, a malformed or too large one
// answered 400 or 413.
OriginServer::Loop::Next OriginServer::Loop::read_body(Connection& c) {
  auto fed = c.body_reader->feed(c.in, c.body);
  c.in.erase(0, fed.consumed);
  if (fed.error || c.body.size() > kMaxRequestBody) {
    start_error(c, fed.error ? 400 : 413);
    return Next::again;
  }
  if (!fed.done) return c.peer_eof ? Next::close : Next::wait;
  c.body_reader.reset();
  dispatch(c);
  return Next::again;
}

// Phase::writing: sends what the socket takes; a finished response ends as its plan says
// (kept alive, closed after a linger, or reset).
OriginServer::Loop::Next OriginServer::Loop::write_response(Connection& c) {
  if (c.write_blocked) return Next::wait;
  WriteStatus status = pump(c);
  if (status == WriteStatus::failed) return Next::close;
  if (status == WriteStatus::blocked) {
    c.write_blocked = true;
    return Next::wait;
  }
  const Ending ending = c.ending;
  finish_request(c);
  if (ending == Ending::reset) {
    c.reset_on_close = true;
    return Next::close;
  }
  if (ending == Ending::close) {
    c.socket.shutdown_write();
    c.phase = Phase::lingering;
    c.in.clear();
    add_timer(c, kLingerTime);
  }
  return Next::again;
}

// /__load[?law=L&capacity=K][&reset_peak=1]: changes the law and capacity when given, then
// answers the downstream's state as JSON; 400 for a law or capacity it does not know.
Reply OriginServer::Loop::load_reply(std::string_view query) {
  std::optional<Overload> law;
  std::optional<int> capacity;
  bool reset_peak = false;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = pair.find('=');
    const std::string_view name = pair.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (name == "law") {
      law = parse_overload(value);
      if (!law) return text_reply(400, "law: queue, thrash or fail\n");
    } else if (name == "capacity") {
      int k = -1;
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), k);
      if (error != std::errc() || end != value.data() + value.size() || k < 0) {
        return text_reply(400, "capacity: a whole number, 0 for unlimited\n");
      }
      capacity = k;
    } else if (name == "reset_peak") {
      reset_peak = value == "1";
    }
  }
  if (law || capacity) server_.downstream_->set(law, capacity);
  Reply reply = text_reply(200, server_.downstream_->json(reset_peak));
  reply.content_type = "application/json";
  return reply;
}

void OriginServer::Loop::dispatch(Connection& c) {
  std::string_view target = c.request.target;
  std::string origin_form;
  if (!target.starts_with('/')) {
    auto uri = proxy::parse_absolute_uri(target);
    if (!uri) {
      start_error(c, 400);
      return;
    }
    origin_form = uri->path_and_query;
    target = origin_form;
  }
  const auto question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);

  auto extra_delay = query_delay(query);
  if (!extra_delay) {
    start_error(c, 400);
    return;
  }
  std::optional<Plan> plan =
      plan_for(path, RequestView{c.request, c.raw_fields, c.body}, server_.options_.site_dir);
  if (!plan) {
    plan.emplace();
    plan->reply = text_reply(404, "no such path: " + std::string(path) + "\n");
  }
  if (path == "/__load") {
    // The downstream's own control (downstream.h): read, and change at run time, with no delay,
    // no place in service and not counted, like /__stats.
    plan.emplace();
    plan->reply = load_reply(query);
    c.plan = std::move(plan);
    start_plan(c);
    return;
  }
  if (plan->stats) {
    // Monitoring must see the origin as it is: no delay, no slot, not counted itself.
    c.plan = std::move(plan);
    start_plan(c);
    return;
  }
  server_.count_request(path);
  if (c.drop_next) {
    c.phase = Phase::dropped;  // advance() closes it: no answer, no slot taken
    return;
  }
  c.drop_next = plan->drop_next;
  plan->delay_ms += *extra_delay + static_cast<std::uint64_t>(server_.options_.default_delay_ms);
  c.plan = std::move(plan);
  const int in_service = server_.downstream_->acquire(*this, c.id);
  if (in_service == 0) {
    c.phase = Phase::queued;
    return;
  }
  c.holds_slot = true;
  const Service service =
      server_.downstream_->service(in_service, c.plan->delay_ms, uniform_(random_));
  c.plan->delay_ms = service.delay_ms;
  if (service.fails) {
    c.plan->reply = text_reply(503, "overloaded: more requests in service than the capacity\n");
    c.plan->reply.fields.emplace_back("Retry-After", "1");
  }
  begin_delay(c);
}

void OriginServer::Loop::begin_delay(Connection& c) {
  if (c.plan->delay_ms == 0) {
    start_plan(c);
    return;
  }
  c.phase = Phase::delayed;
  add_timer(c, std::chrono::milliseconds(c.plan->delay_ms));
}

void OriginServer::Loop::start_plan(Connection& c) {
  if (c.plan->stall) {
    c.phase = Phase::stalled;
    c.in.clear();
    return;
  }
  if (c.plan->stats) c.plan->reply.body = server_.stats_json() + "\n";
  start_reply(c, std::move(c.plan->reply));
}

void OriginServer::Loop::start_error(Connection& c, int status) {
  // After a framing error the rest of the stream cannot be trusted: answer and close.
  Reply reply = text_reply(status, std::string(proxy::reason_phrase(status)) + "\n");
  reply.ending = Ending::close;
  c.in.clear();
  c.body_reader.reset();
  start_reply(c, std::move(reply));
}

void OriginServer::Loop::start_reply(Connection& c, Reply reply) {
  const bool head_only = c.request.method == "HEAD";
  if (!c.keep_alive && reply.ending == Ending::keep_alive) reply.ending = Ending::close;
  c.ending = reply.ending;

  std::string& out = c.out;
  out.clear();
  c.out_pos = 0;
  out += reply.interim;
  out += "HTTP/1.1 ";
  out += std::to_string(reply.status);
  out += ' ';
  out += proxy::reason_phrase(reply.status);
  out += "\r\nServer: harness-origin\r\nDate: ";
  out += http_date();
  out += "\r\n";
  if (reply.framing != Framing::none) {
    out += "Content-Type: ";
    out += reply.content_type;
    out += "\r\n";
  }
  for (const auto& [name, value] : reply.fields) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (reply.framing == Framing::content_length) {
    out += "Content-Length: ";
    out += std::to_string(reply.promised_length.value_or(reply.body.size() + reply.generated));
    out += "\r\n";
  } else if (reply.framing == Framing::chunked) {
    out += "Transfer-Encoding: chunked\r\nTrailer: ";
    out += kTrailerName;
    out += "\r\n";
  }
  if (reply.ending != Ending::keep_alive) {
    out += "Connection: close\r\n";
  } else if (c.request.version_minor == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";

  c.gen_offset = 0;
  c.gen_end = 0;
  c.chunked = false;
  c.last_chunk_sent = false;
  if (!head_only && reply.framing != Framing::none) {
    out += reply.body;
    if (reply.framing == Framing::chunked) {
      c.chunked = true;
      c.gen_end = reply.generated;
    } else if (reply.generated <= kInlineBody) {
      out.append(pattern(), 0, reply.generated);
    } else {
      c.gen_end = reply.generated;
    }
  }
  c.phase = Phase::writing;
}

void OriginServer::Loop::finish_request(Connection& c) {
  if (c.holds_slot) {
    c.holds_slot = false;
    server_.downstream_->release();
  }
  c.request = proxy::Request{};
  c.raw_fields.clear();
  c.body.clear();
  c.plan.reset();
  c.out.clear();
  c.out_pos = 0;
  c.phase = Phase::head;
}

// Writes as much of the response as the socket takes.
OriginServer::Loop::WriteStatus OriginServer::Loop::pump(Connection& c) {
  const int fd = c.socket.fd();
  for (;;) {
    ssize_t n = 0;
    if (c.out_pos < c.out.size()) {
      n = ::send(fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos,
                 MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<std::size_t>(n);
        continue;
      }
    } else if (c.chunked && (c.gen_offset < c.gen_end || !c.last_chunk_sent)) {
      refill_chunks(c);
      continue;
    } else if (c.gen_offset < c.gen_end) {
      const auto piece =
          static_cast<std::size_t>(std::min<std::uint64_t>(kWritePiece, c.gen_end - c.gen_offset));
      const char* from = pattern().data() + c.gen_offset % kPatternPeriod;
      n = ::send(fd, from, piece, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c.gen_offset += static_cast<std::uint64_t>(n);
        continue;
      }
    } else {
      return WriteStatus::done;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return WriteStatus::blocked;
    return WriteStatus::failed;
  }
}

// Fills `out` with the next chunks of a /stream-bytes body (RFC 9112 §7.1). The first chunk
// carries an extension and the last-chunk a trailer field, so decoders meet both.
void OriginServer::Loop::refill_chunks(Connection& c) {
  c.out.clear();
  c.out_pos = 0;
  char size[32];
  while (c.gen_offset < c.gen_end && c.out.size() < kWritePiece) {
    const auto length =
        static_cast<std::size_t>(std::min<std::uint64_t>(kChunkSize, c.gen_end - c.gen_offset));
    auto [end, error] = std::to_chars(size, size + sizeof size, length, 16);
    c.out.append(size, end);
    if (c.gen_offset == 0) c.out += ";origin-ext=\"first chunk\"";
    c.out += "\r\n";
    c.out.append(pattern(), c.gen_offset % kPatternPeriod, length);
    c.out += "\r\n";
    c.gen_offset += length;
  }
  if (c.gen_offset == c.gen_end && !c.last_chunk_sent) {
    c.out += c.gen_end == 0 ? "0;origin-ext=\"first chunk\"\r\n" : "0\r\n";
    c.out += kTrailerName;
    c.out += ": done\r\n\r\n";
    c.last_chunk_sent = true;
  }
}

void OriginServer::Loop::update_interest(Connection& c) {
  std::uint32_t want = 0;
  if (!c.peer_eof && c.in.size() < kMaxBuffered) want |= EPOLLIN;
  if (c.phase == Phase::writing && c.write_blocked) want |= EPOLLOUT;
  if (want == c.events) return;
  epoll_event event{};
  event.events = want;
  event.data.u64 = c.id;
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_MOD, c.socket.fd(), &event);
  c.events = want;
}

void OriginServer::Loop::close_connection(std::uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  if (c.holds_slot) server_.downstream_->release();
  ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, c.socket.fd(), nullptr);
  if (c.reset_on_close) c.socket.reset();
  connections_.erase(it);  // the Socket closes the fd; a queued slot grant finds it gone
}

const std::string& OriginServer::Loop::http_date() {
  std::time_t now = std::time(nullptr);
  if (now != date_second_) {
    date_second_ = now;
    std::tm utc{};
    ::gmtime_r(&now, &utc);
    char text[64];
    std::size_t length = std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &utc);
    date_.assign(text, length);
  }
  return date_;
}

// ---------------------------------------------------------------------------------------------

OriginServer::OriginServer(OriginOptions options) : options_(std::move(options)) {
  if (options_.threads < 1 || options_.capacity < 0 || options_.default_delay_ms < 0) {
    throw std::runtime_error("origin: threads must be >= 1, capacity and delay >= 0");
  }
  if (!options_.site_dir.empty() && !std::filesystem::is_directory(options_.site_dir)) {
    throw std::runtime_error("origin: site directory not found: " + options_.site_dir);
  }
  // A deep backlog: a benchmark opens a thousand connections at once.
  listener_ = proxy::listen_tcp(options_.bind, options_.port, 4096);
  port_ = proxy::local_port(listener_);
  address_ = proxy::local_address(listener_);
  downstream_ = std::make_unique<Downstream>(options_.overload, options_.capacity);
  for (int i = 0; i < options_.threads; ++i) {
    loops_.push_back(std::make_unique<Loop>(*this, options_.threads > 1));
  }
  for (auto& loop : loops_) {
    threads_.emplace_back([&loop = *loop](const std::stop_token& token) { loop.run(token); });
  }
}

void OriginServer::end_stalled() {
  std::lock_guard lock(stop_mutex_);  // stop() clears loops_
  for (auto& loop : loops_) loop->end_stalled();
}

std::string OriginServer::load_json(bool reset_peak) {
  return downstream_->json(reset_peak);
}

OriginServer::~OriginServer() {
  stop();
}

void OriginServer::stop() {
  std::lock_guard lock(stop_mutex_);
  if (stopped_) return;
  stopped_ = true;
  for (auto& thread : threads_) thread.request_stop();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  loops_.clear();  // closes every connection
  downstream_.reset();
  listener_.close();
}

void OriginServer::count_request(std::string_view path) {
  {
    std::lock_guard lock(counts_mutex_);
    auto it = counts_.find(path);
    if (it == counts_.end()) it = counts_.emplace(std::string(path), 0).first;
    ++it->second;
  }
  counted_.notify_all();
}

std::uint64_t OriginServer::request_count(std::string_view path_prefix) const {
  std::lock_guard lock(counts_mutex_);
  return count_locked(path_prefix);
}

bool OriginServer::wait_for_requests(std::string_view path_prefix, std::uint64_t count,
                                     std::chrono::milliseconds timeout) const {
  std::unique_lock lock(counts_mutex_);
  return counted_.wait_for(lock, timeout, [&] { return count_locked(path_prefix) >= count; });
}

std::uint64_t OriginServer::count_locked(std::string_view path_prefix) const {
  std::uint64_t total = 0;
  // Keys sharing a prefix are contiguous in a sorted map.
  for (auto it = counts_.lower_bound(path_prefix);
       it != counts_.end() && std::string_view(it->first).starts_with(path_prefix); ++it) {
    total += it->second;
  }
  return total;
}

std::string OriginServer::stats_json() const {
  nlohmann::json counts = nlohmann::json::object();
  {
    std::lock_guard lock(counts_mutex_);
    for (const auto& [path, count] : counts_) counts[path] = count;
  }
  return counts.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace harness
