// A pool stage that hangs with clients waiting (a lost wakeup, a predicate never made true)
// looks the same from outside every time: a client's request sits unread in a socket the stage
// accepted, and a worker that should have taken it sleeps. A correct pool cannot stay in that
// state: a free worker takes the client (and is runnable, not asleep, from the moment it is
// woken), and a busy one holds a connection to the origin. So a test need not wait out a
// 20-60 s deadline to call a hang a hang; this watch sees one of two states last a few seconds
// and judges progress, not elapsed time (no speed threshold: a runnable thread, a thread that
// wakes, an origin connection or a byte read from the client ends the window):
//  - nothing moves: every thread asleep, no request to the origin in flight, a request unread;
//  - a worker never woken beside busy ones: every thread asleep, a request of which the stage
//    has read no byte, and a thread other than main asleep in a futex wait (a condition
//    variable or a mutex) that has not run once in the window -- even while other workers wait
//    on the origin (three workers on stalled origins and a fourth that never woke). A correct
//    pool's idle worker sleeps only while the queue is empty, and a client the stage has not
//    touched is in the queue (or in an accept loop blocked on a full queue, when no worker is
//    idle); a client a busy worker holds has had its head read.
// Seen, it says so and kills the stage so that every blocking step of the test returns at once.
// Read from /proc (proc(5): /proc/PID/task/TID/{stat,status,wchan,syscall}, /proc/PID/fd,
// /proc/PID/net/tcp) and, for "read no byte", the socket itself (pidfd_getfd(2), TCP_INFO's
// tcpi_bytes_received against FIONREAD); where either is refused, that state is not seen and the
// test's own deadline applies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/socket.h"

namespace testing_support {

/// One look at a stage from outside.
struct StageSnapshot {
  bool readable = false;           ///< /proc had the process (false once it exited)
  bool all_asleep = false;         ///< every thread in state S (none runnable, none in D)
  bool origin_in_flight = false;   ///< a socket of the stage is connected to the origin's port
  unsigned long unread_client = 0; ///< inode of an accepted client socket with unread bytes, or 0
  std::size_t unread_bytes = 0;    ///< how many bytes sit unread in that socket
  std::size_t threads = 0;         ///< threads of the stage
  std::size_t origin_connections = 0;  ///< sockets of the stage connected to the origin's port
  /// Threads other than main asleep in a futex wait (a condition variable or a contended
  /// mutex), each with its context switches so far (voluntary + involuntary): unchanged
  /// between two looks, the thread has not run once in between.
  std::vector<std::pair<pid_t, unsigned long>> futex_sleepers;
  /// Accepted clients with unread bytes of which the stage has read none yet (inode, bytes
  /// unread); filled only when a `pidfd` is given and there are futex_sleepers.
  std::vector<std::pair<unsigned long, std::size_t>> untouched_clients;
};

/// Looks at process `pid`, a stage listening on `proxy_port` whose origin listens on
/// `origin_port` (both 127.0.0.1 or ::1); `pidfd` (pidfd_open(2) of `pid`, or -1) lets it look
/// into the stage's client sockets for untouched_clients. Never throws: what cannot be read
/// stays false / 0 / empty.
StageSnapshot look_at_stage(pid_t pid, std::uint16_t proxy_port, std::uint16_t origin_port,
                            int pidfd = -1);

/// Watches a stage on a thread of its own, every 200 ms, from construction to destruction.
/// When one of the two states above (one client's request unread, every thread asleep, and
/// either no origin request in flight or a thread in a futex wait that never runs) lasts
/// `window`, it records the hang (hang(); the fixture's TearDown
/// fails the test with it) and SIGKILLs the stage through a pidfd (never another process, even
/// once the stage is reaped).
/// Thread-safety: hang() and hung() may be called from any thread.
class HangWatch {
 public:
  HangWatch(pid_t pid, std::uint16_t proxy_port, std::uint16_t origin_port, std::string stage,
            std::chrono::milliseconds window = std::chrono::seconds(3));
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  /// Stops watching (joins the thread); idempotent. Call before the stage is stopped.
  void stop();
  /// The hang's description once seen (the evidence, the likely trap, the handout's section),
  /// else "".
  [[nodiscard]] std::string hang() const;
  [[nodiscard]] bool hung() const;

 private:
  void watch(const std::stop_token& token);

  pid_t pid_;
  std::uint16_t proxy_port_;
  std::uint16_t origin_port_;
  std::string stage_;
  std::chrono::milliseconds window_;
  proxy::Socket pidfd_;  // pidfd_open(2) of the stage: a kill that can never hit another process

  mutable std::mutex mutex_;  // guards hang_
  std::string hang_;
  std::jthread thread_;  // last: started once the fields above are set
};

}  // namespace testing_support
