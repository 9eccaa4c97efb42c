// Graceful shutdown for every stage: SIGINT/SIGTERM first stop the accept loop, then, after a
// grace period, cut whatever I/O is still in flight, so the process ends within a bound.
#pragma once

#include <chrono>
#include <stop_token>
#include <thread>

#include "net/socket.h"

namespace proxy {

/// Owns the process's SIGINT/SIGTERM handling. Create it in main() before starting any other
/// thread: it blocks both signals in the calling thread (new threads inherit the mask) and
/// receives them on a thread of its own through signalfd.
/// On the first signal (or request_stop()) stop_fd() becomes readable. `grace` later — or at a
/// second signal — cut_fd() becomes readable, and it is installed as the I/O cancel fd
/// (set_io_cancel_fd), so every Socket wait returns IoStatus::cancelled.
/// Thread-safety: all members may be called from any thread. One instance per process.
class Shutdown {
 public:
  /// Throws std::system_error when the signal fd or the event fds cannot be created.
  explicit Shutdown(Millis grace);
  ~Shutdown();
  Shutdown(const Shutdown&) = delete;
  Shutdown& operator=(const Shutdown&) = delete;

  /// Readable once a stop has been requested; pass it to accept_client().
  [[nodiscard]] int stop_fd() const noexcept { return stop_fd_; }
  /// Stop requested once a stop has been requested: for waits that are not on an fd, such as
  /// a producer blocked on a full queue (std::condition_variable_any::wait with a stop_token).
  [[nodiscard]] std::stop_token stop_token() const noexcept { return stop_source_.get_token(); }
  /// Readable once in-flight I/O must be cut.
  [[nodiscard]] int cut_fd() const noexcept { return cut_fd_; }
  /// True once a stop has been requested.
  [[nodiscard]] bool stop_requested() const noexcept;
  /// Requests a stop as a signal would (for tests and in-process use).
  void request_stop() noexcept;

 private:
  void watch(std::stop_token stop);

  int signal_fd_ = -1;
  int stop_fd_ = -1;
  int cut_fd_ = -1;
  int quit_fd_ = -1;
  Millis grace_;
  std::stop_source stop_source_;  // requested together with stop_fd_
  std::jthread watcher_;
};

}  // namespace proxy
