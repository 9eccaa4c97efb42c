// Socket: the one owner of a TCP file descriptor, and the blocking-with-deadline I/O every stage
// uses. Nothing here exits the process: a peer's reset is an IoStatus, never a crash.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace proxy {

using Millis = std::chrono::milliseconds;

/// How an I/O call ended. `cancelled` means the process-wide cancel fd (see set_io_cancel_fd)
/// became readable: shutdown's grace period ran out and in-flight work must be cut.
enum class IoStatus { ok, eof, timeout, cancelled, error };

/// Outcome of one read or write. `bytes` counts what was transferred (a write_all that failed
/// part-way reports what got out); `error` is the errno when status == error.
struct IoResult {
  IoStatus status = IoStatus::ok;
  std::size_t bytes = 0;
  int error = 0;
};

/// A move-only owner of one socket fd; the destructor closes it.
/// Thread-safety: a Socket is owned by one thread at a time; hand it over by moving it.
/// I/O calls never raise SIGPIPE (MSG_NOSIGNAL) and retry EINTR and partial writes.
class Socket {
 public:
  Socket() noexcept = default;
  /// Takes ownership of `fd` (which may be -1 for an empty Socket).
  explicit Socket(int fd) noexcept : fd_(fd) {}
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  /// The fd, still owned by this Socket; -1 when empty.
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  /// Closes now (idempotent). Errors from close(2) are ignored: the fd is gone either way.
  void close() noexcept;
  /// Closes with a TCP reset (SO_LINGER 0) instead of an orderly FIN.
  void reset() noexcept;
  /// Gives up ownership and returns the fd; the caller must close it.
  [[nodiscard]] int release() noexcept;

  /// Reads at most buf.size() bytes, waiting at most `timeout` for the first byte.
  /// Returns ok with bytes > 0, eof on an orderly close, or timeout / cancelled / error.
  IoResult read_some(std::span<char> buf, Millis timeout) const;
  /// read_some that also watches the socket `hangup_fd` (-1: none) while it waits: when that
  /// socket's peer hangs up (POLLRDHUP, POLLHUP or POLLERR — a close, a half-close or a reset)
  /// the wait ends with IoStatus::cancelled, as a shutdown does. A worker waiting on an origin
  /// watches its client so, and an abandoned request frees it at once.
  IoResult read_some(std::span<char> buf, Millis timeout, int hangup_fd) const;
  /// Writes every byte of `data`; each wait for the peer to drain is bounded by `timeout`.
  IoResult write_all(std::string_view data, Millis timeout) const;

  // ---- Calls that never wait, for an event loop (stage 4's poller, the tunnel relay) ----
  // Each is one system call (EINTR retried) and returns IoStatus::timeout, as a zero timeout
  // would, when nothing could move without waiting: wait for epoll, then call again. None
  // watches the cancel fd (set_io_cancel_fd): nothing here waits for shutdown to cut.

  /// Reads at most buf.size() bytes that have already arrived: ok with bytes > 0, eof on an
  /// orderly close, timeout when none are here yet, error (errno in `error`) on a reset.
  IoResult read_now(std::span<char> buf) const;
  /// read_now that also gives the kernel's receive time of the bytes read (SO_TIMESTAMPNS,
  /// CLOCK_REALTIME, ns) in `received_ns`, which is left as it was when the socket does not
  /// have that option on or the bytes carry no stamp.
  IoResult read_now(std::span<char> buf, std::int64_t& received_ns) const;
  /// Sends as much of `data` as the socket takes now: ok when all of it went, timeout when the
  /// socket is full (`bytes`: what went; send the rest once it is writable), error when the peer
  /// is gone (`bytes`: what went before). Never raises SIGPIPE.
  IoResult write_now(std::string_view data) const;
  /// True when the peer has hung up — a close, a half-close (POLLRDHUP) or a reset — or the
  /// socket failed, by now; a poll that does not wait. Bytes still unread do not count.
  [[nodiscard]] bool peer_hung_up() const noexcept;
  /// True when a read would not wait now: bytes, an end of stream or an error are there (or
  /// the poll itself failed, so that nothing can be vouched for).
  [[nodiscard]] bool readable_now() const noexcept;
  /// Half-closes the sending side (shutdown SHUT_WR); the peer sees end of stream.
  void shutdown_write() const noexcept;
  /// Bytes that arrived and were not read yet (FIONREAD); 0 when unknown.
  [[nodiscard]] std::size_t unread_bytes() const noexcept;
  /// Closes after our last reply without letting the close destroy it: closing with unread
  /// input makes the kernel send a reset, which can discard a response the peer has not read
  /// yet. So: half-close, then read and discard what the peer sends until it closes, nothing
  /// arrives within `wait` (after `wait` has passed, when it is not 0), or `max_bytes` were
  /// read; then close. `wait` 0 takes only what has already arrived. Never throws.
  void drain_and_close(Millis wait, std::size_t max_bytes = SIZE_MAX) noexcept;

 private:
  int fd_ = -1;
};

/// Binds and listens on host:port (port 0 picks a free port). `host` is a numeric IPv4 or IPv6
/// address or a name getaddrinfo resolves. Sets SO_REUSEADDR, close-on-exec and non-blocking.
/// Throws std::runtime_error naming the address and the reason when it cannot.
Socket listen_tcp(const std::string& host, std::uint16_t port, int backlog = 1024);

/// "HOST:PORT" of a socket's local end; IPv6 hosts in brackets ("[::1]:8080").
std::string local_address(const Socket& socket);
/// "HOST:PORT" of a connected socket's peer, or "?" when unknown.
std::string peer_address(const Socket& socket);
/// The local port of a bound socket.
std::uint16_t local_port(const Socket& socket);

/// Why connect_tcp failed. `exhausted`: this process is out of descriptors or buffers (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM from socket(2)) — the proxy's own overload, not the origin's fault.
enum class ConnectError { none, resolve, refused, timeout, cancelled, exhausted, other };

/// Outcome of connect_tcp: a connected socket, or the error and a one-line description.
struct ConnectResult {
  Socket socket;
  ConnectError error = ConnectError::none;
  std::string message;
};

/// Resolves host (IPv4 and IPv6) and connects to each address in turn, all within `timeout` in
/// total, resolution included: a name is looked up with getaddrinfo_a(3) so that a resolver
/// that never answers yields ConnectError::timeout at the deadline (and `cancelled` when
/// shutdown cuts I/O) instead of holding the caller; a numeric address is never looked up.
/// Never throws for network errors.
ConnectResult connect_tcp(const std::string& host, std::uint16_t port, Millis timeout);

/// Waits for the next client on a listening socket, or until `stop_fd` becomes readable
/// (returns nullopt). Transient accept errors (ECONNABORTED, EINTR) are retried; running out of
/// descriptors (EMFILE, ENFILE) logs once and waits 100 ms before retrying, so it never spins.
/// Throws std::runtime_error only for errors that mean the listener itself is broken.
std::optional<Socket> accept_client(const Socket& listener, int stop_fd);

/// Makes every Socket I/O wait in the process also watch `fd`; once it is readable those waits
/// return IoStatus::cancelled. -1 turns it off. Set once at start-up, before any I/O thread runs.
void set_io_cancel_fd(int fd) noexcept;

/// The fd set_io_cancel_fd installed, or -1: for code that polls several sockets itself (the
/// CONNECT tunnel) and must be cut by shutdown like every other wait.
int io_cancel_fd() noexcept;

/// Ignores SIGPIPE process-wide: a client that hangs up mid-write must not kill the server.
void ignore_sigpipe() noexcept;

/// Sets a socket option with an int value; returns false (errno set) on failure.
bool set_int_option(const Socket& socket, int level, int name, int value) noexcept;

}  // namespace proxy
