#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "server/log.h"

#if defined(__SANITIZE_THREAD__)
#define PROXY_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PROXY_THREAD_SANITIZER 1
#endif
#endif
#ifndef PROXY_THREAD_SANITIZER
#define PROXY_THREAD_SANITIZER 0
#endif

namespace proxy {
namespace {

std::atomic<int> g_cancel_fd{-1};

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// Waits until `fd` is ready for `events`, the deadline passes, or shutdown cuts in-flight I/O
// — or, when `hangup_fd` is a socket, its peer hangs up (both end the wait as cancelled).
IoStatus wait_for(int fd, short events, Clock::time_point deadline, int hangup_fd = -1) {
  for (;;) {
    pollfd fds[3] = {{fd, events, 0},
                     {g_cancel_fd.load(std::memory_order_relaxed), POLLIN, 0},
                     {hangup_fd, POLLRDHUP, 0}};
    // poll ignores a negative fd, so the three slots can stay in place.
    int ready = ::poll(fds, 3, remaining_ms(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return IoStatus::error;
    }
    if (fds[1].revents & POLLIN) return IoStatus::cancelled;
    if (fds[2].revents & (POLLRDHUP | POLLHUP | POLLERR)) return IoStatus::cancelled;
    if (ready == 0) return IoStatus::timeout;
    // POLLERR / POLLHUP: let the following recv/send report what happened.
    return IoStatus::ok;
  }
}

std::string format_address(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
    port = ntohs(in6.sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

// ---- Name resolution with a deadline ----
// getaddrinfo(3) cannot be cancelled or given a timeout: a resolver that does not answer holds
// the calling worker for resolv.conf's timeout x attempts x nameservers, and past shutdown's
// 5 s bound. So names are looked up with glibc's getaddrinfo_a(3), which runs the lookup on a
// helper thread of its own, and we stop waiting at the deadline or when shutdown cuts I/O. A
// numeric address never waits on anything and skips the helper thread (AI_NUMERICHOST).

enum class ResolveStatus { ok, failed, timeout, cancelled };

struct Resolved {
  ResolveStatus status = ResolveStatus::failed;
  addrinfo* addresses = nullptr;  // owned by the caller when ok: freeaddrinfo()
  std::string error;
};

// One getaddrinfo_a request and what it points into; glibc keeps pointers to all of it until
// the lookup ends, so an abandoned one must outlive our wait.
struct Lookup {
  std::string host;
  std::string service;
  addrinfo hints{};
  gaicb request{};
};

// Lookups we stopped waiting for that glibc could not cancel. Each is freed by a later
// resolve() once it has finished; any left at exit stay reachable from here (no leak report).
std::mutex g_abandoned_mutex;
std::vector<std::unique_ptr<Lookup>> g_abandoned;  // guarded by g_abandoned_mutex

void abandon(std::unique_ptr<Lookup> lookup) {
  if (::gai_cancel(&lookup->request) == EAI_CANCELED) return;  // glibc let go of it
  std::lock_guard lock(g_abandoned_mutex);
  g_abandoned.push_back(std::move(lookup));
}

void free_finished_abandoned() {
  std::lock_guard lock(g_abandoned_mutex);
  std::erase_if(g_abandoned, [](const std::unique_ptr<Lookup>& lookup) {
    if (::gai_error(&lookup->request) == EAI_INPROGRESS) return false;
    if (lookup->request.ar_result != nullptr) ::freeaddrinfo(lookup->request.ar_result);
    return true;
  });
}

bool cancel_requested() {
  const int fd = g_cancel_fd.load(std::memory_order_relaxed);
  if (fd < 0) return false;
  pollfd cancel{fd, POLLIN, 0};
  return ::poll(&cancel, 1, 0) > 0 && (cancel.revents & POLLIN);
}

Resolved resolve(const std::string& host, const std::string& service,
                 Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICHOST;
  Resolved resolved;
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &resolved.addresses) == 0) {
    resolved.status = ResolveStatus::ok;
    return resolved;
  }

#if PROXY_THREAD_SANITIZER
  // ThreadSanitizer crashes on the threads glibc starts inside getaddrinfo_a (they bypass its
  // pthread_create interceptor), so a TSan build looks names up the blocking way: correct,
  // without the deadline.
  hints.ai_flags = AI_ADDRCONFIG;
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &resolved.addresses); rc != 0) {
    resolved.error = ::gai_strerror(rc);
    return resolved;
  }
  resolved.status = ResolveStatus::ok;
  return resolved;
#endif
  free_finished_abandoned();
  auto lookup = std::make_unique<Lookup>();
  lookup->host = host;
  lookup->service = service;
  lookup->hints = hints;
  lookup->hints.ai_flags = AI_ADDRCONFIG;
  lookup->request.ar_name = lookup->host.c_str();
  lookup->request.ar_service = lookup->service.c_str();
  lookup->request.ar_request = &lookup->hints;
  gaicb* list[1] = {&lookup->request};
  if (int rc = ::getaddrinfo_a(GAI_NOWAIT, list, 1, nullptr); rc != 0) {
    resolved.error = ::gai_strerror(rc);
    return resolved;
  }
  // Wait in short slices, so shutdown's cut (a readable fd, which gai_suspend cannot watch)
  // is noticed within 50 ms.
  for (;;) {
    const int state = ::gai_error(&lookup->request);
    if (state != EAI_INPROGRESS) {
      if (state == 0) {
        resolved.status = ResolveStatus::ok;
        resolved.addresses = lookup->request.ar_result;
      } else {
        resolved.error = ::gai_strerror(state);
      }
      return resolved;  // finished: glibc holds nothing of `lookup` any more
    }
    if (cancel_requested()) {
      resolved.status = ResolveStatus::cancelled;
      abandon(std::move(lookup));
      return resolved;
    }
    const int left = remaining_ms(deadline);
    if (left <= 0) {
      resolved.status = ResolveStatus::timeout;
      abandon(std::move(lookup));
      return resolved;
    }
    const int slice = std::min(left, 50);
    timespec wait{slice / 1000, static_cast<long>(slice % 1000) * 1'000'000L};
    const gaicb* waiting[1] = {&lookup->request};
    ::gai_suspend(waiting, 1, &wait);  // returns early when done; EAI_AGAIN on timeout
  }
}

}  // namespace

Socket::~Socket() { close(); }

Socket::Socket(Socket&& other) noexcept : fd_(other.release()) {}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() noexcept {
  if (fd_ >= 0) {
    // Linux releases the fd even when close() fails with EINTR, so it is never retried.
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::reset() noexcept {
  if (fd_ >= 0) {
    linger hard{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    close();
  }
}

int Socket::release() noexcept {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

IoResult Socket::read_some(std::span<char> buf, Millis timeout) const {
  return read_some(buf, timeout, -1);
}

IoResult Socket::read_some(std::span<char> buf, Millis timeout, int hangup_fd) const {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    // Try first, wait only when nothing is buffered: most reads on a busy proxy find data ready.
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) return {IoStatus::ok, static_cast<std::size_t>(n), 0};
    if (n == 0) return {IoStatus::eof, 0, 0};
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return {IoStatus::error, 0, errno};
    IoStatus waited = wait_for(fd_, POLLIN, deadline, hangup_fd);
    if (waited != IoStatus::ok) return {waited, 0, 0};
  }
}

IoResult Socket::write_all(std::string_view data, Millis timeout) const {
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return {IoStatus::error, sent, errno};
    // The deadline restarts whenever the peer drains something: a slow reader is fine, a
    // stalled one is not.
    IoStatus waited = wait_for(fd_, POLLOUT, Clock::now() + timeout);
    if (waited != IoStatus::ok) return {waited, sent, 0};
  }
  return {IoStatus::ok, sent, 0};
}

IoResult Socket::read_now(std::span<char> buf) const {
  for (;;) {
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) return {IoStatus::ok, static_cast<std::size_t>(n), 0};
    if (n == 0) return {IoStatus::eof, 0, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoStatus::timeout, 0, 0};
    return {IoStatus::error, 0, errno};
  }
}

IoResult Socket::read_now(std::span<char> buf, std::int64_t& received_ns) const {
  iovec io{buf.data(), buf.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(timespec))> control{};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  for (;;) {
    const ssize_t n = ::recvmsg(fd_, &message, MSG_DONTWAIT);
    if (n == 0) return {IoStatus::eof, 0, 0};
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoStatus::timeout, 0, 0};
      return {IoStatus::error, 0, errno};
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec at{};
        std::memcpy(&at, CMSG_DATA(c), sizeof at);
        received_ns = static_cast<std::int64_t>(at.tv_sec) * 1'000'000'000 + at.tv_nsec;
      }
    }
    return {IoStatus::ok, static_cast<std::size_t>(n), 0};
  }
}

IoResult Socket::write_now(std::string_view data) const {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n =
        ::send(fd_, data.data() + sent, data.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return {IoStatus::timeout, sent, 0};
    } else {
      return {IoStatus::error, sent, n < 0 ? errno : 0};
    }
  }
  return {IoStatus::ok, sent, 0};
}

// poll(2) with no wait reports the same conditions EPOLLRDHUP, EPOLLHUP and EPOLLERR do.
bool Socket::peer_hung_up() const noexcept {
  pollfd watched{fd_, POLLRDHUP, 0};
  return ::poll(&watched, 1, 0) > 0 && (watched.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool Socket::readable_now() const noexcept {
  pollfd watched{fd_, POLLIN, 0};
  return ::poll(&watched, 1, 0) != 0;  // a failed poll cannot vouch that nothing is there
}

void Socket::shutdown_write() const noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

std::size_t Socket::unread_bytes() const noexcept {
  int unread = 0;
  if (fd_ < 0 || ::ioctl(fd_, FIONREAD, &unread) != 0 || unread < 0) return 0;
  return static_cast<std::size_t>(unread);
}

void Socket::drain_and_close(Millis wait, std::size_t max_bytes) noexcept {
  shutdown_write();
  std::array<char, 4096> sink{};
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (std::size_t drained = 0; drained < max_bytes;) {
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (wait > Millis{0} && left <= Millis{0}) break;
    IoResult got = read_some(sink, std::max(left, Millis{0}));
    if (got.status != IoStatus::ok) break;
    drained += got.bytes;
  }
  close();
}

Socket listen_tcp(const std::string& host, std::uint16_t port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw std::runtime_error("cannot resolve bind address " + host + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no addresses";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Socket socket(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                           ai->ai_protocol));
    if (!socket.valid()) {
      last_error = std::strerror(errno);
      continue;
    }
    set_int_option(socket, SOL_SOCKET, SO_REUSEADDR, 1);
    if (::bind(socket.fd(), ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::listen(socket.fd(), backlog) == 0) {
      ::freeaddrinfo(found);
      return socket;
    }
    last_error = std::strerror(errno);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("cannot listen on " + host + ":" + service + ": " + last_error);
}

std::string local_address(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  return format_address(address);
}

std::string peer_address(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  return format_address(address);
}

std::uint16_t local_port(const Socket& socket) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return 0;
}

ConnectResult connect_tcp(const std::string& host, std::uint16_t port, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string service = std::to_string(port);
  Resolved resolved = resolve(host, service, deadline);
  switch (resolved.status) {
    case ResolveStatus::ok:
      break;
    case ResolveStatus::timeout:
      return {Socket(), ConnectError::timeout,
              "resolving " + host + " took longer than " + std::to_string(timeout.count()) + " ms"};
    case ResolveStatus::cancelled:
      return {Socket(), ConnectError::cancelled, "resolving cancelled by shutdown"};
    case ResolveStatus::failed:
      return {Socket(), ConnectError::resolve, "cannot resolve " + host + ": " + resolved.error};
  }
  addrinfo* found = resolved.addresses;
  ConnectResult result{Socket(), ConnectError::other, "no addresses for " + host};
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Socket socket(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                           ai->ai_protocol));
    if (!socket.valid()) {
      const int error = errno;
      const bool exhausted =
          error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
      result = {Socket(), exhausted ? ConnectError::exhausted : ConnectError::other,
                std::string("socket: ") + std::strerror(error)};
      continue;
    }
    int rc = ::connect(socket.fd(), ai->ai_addr, ai->ai_addrlen);
    int error = rc == 0 ? 0 : errno;
    if (rc != 0 && errno == EINPROGRESS) {
      IoStatus waited = wait_for(socket.fd(), POLLOUT, deadline);
      if (waited == IoStatus::timeout) {
        result = {Socket(), ConnectError::timeout, "connect to " + host + ":" + service + " timed out"};
        break;
      }
      if (waited == IoStatus::cancelled) {
        result = {Socket(), ConnectError::cancelled, "connect cancelled by shutdown"};
        break;
      }
      socklen_t length = sizeof error;
      ::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    }
    if (error == 0) {
      set_int_option(socket, IPPROTO_TCP, TCP_NODELAY, 1);
      result = {std::move(socket), ConnectError::none, ""};
      break;
    }
    result = {Socket(), error == ECONNREFUSED ? ConnectError::refused : ConnectError::other,
              "connect to " + host + ":" + service + ": " + std::strerror(error)};
  }
  ::freeaddrinfo(found);
  return result;
}

std::optional<Socket> accept_client(const Socket& listener, int stop_fd) {
  bool told_about_fds = false;
  for (;;) {
    pollfd fds[2] = {{listener.fd(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int ready = ::poll(fds, stop_fd >= 0 ? 2 : 1, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll on listener: ") + std::strerror(errno));
    }
    if (stop_fd >= 0 && (fds[1].revents & POLLIN)) return std::nullopt;
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket client(fd);
      set_int_option(client, IPPROTO_TCP, TCP_NODELAY, 1);
      return client;
    }
    switch (errno) {
      case EAGAIN:
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
        continue;
      case EMFILE:
      case ENFILE:
      case ENOBUFS:
      case ENOMEM: {
        if (!told_about_fds) {
          log_line("accept: " + std::string(std::strerror(errno)) + "; retrying every 100 ms");
          told_about_fds = true;
        }
        // The pending connection stays in the backlog, so poll would report it again at once:
        // wait out the shortage instead of spinning.
        pollfd stop{stop_fd, POLLIN, 0};
        if (::poll(&stop, stop_fd >= 0 ? 1 : 0, 100) > 0) return std::nullopt;
        continue;
      }
      default:
        throw std::runtime_error(std::string("accept: ") + std::strerror(errno));
    }
  }
}

void set_io_cancel_fd(int fd) noexcept { g_cancel_fd.store(fd, std::memory_order_relaxed); }

int io_cancel_fd() noexcept { return g_cancel_fd.load(std::memory_order_relaxed); }

void ignore_sigpipe() noexcept { std::signal(SIGPIPE, SIG_IGN); }

bool set_int_option(const Socket& socket, int level, int name, int value) noexcept {
  return ::setsockopt(socket.fd(), level, name, &value, sizeof value) == 0;
}

}  // namespace proxy
