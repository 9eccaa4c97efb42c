// A pool stage that hangs with clients waiting (a lost wakeup, a predicate never made true)
// looks the same from outside every time: a client's request sits unread in a socket the stage
// accepted, no request to the origin is in flight, and every thread of the stage sleeps. A
// correct pool cannot stay in that state: a free worker takes the client (and is runnable, not
// asleep, from the moment it is woken), and a busy one holds a connection to the origin. So a
// test need not wait out a 20-60 s deadline to call a hang a hang; this watch sees that state
// last a few seconds, whatever the machine's load (no speed threshold: a runnable thread, an
// origin connection or a request read ends it), says so, and kills the stage so that every
// blocking step of the test returns at once. Not seen: a hang beside requests legitimately in
// flight at the origin (three workers on stalled origins and a fourth that never woke): the
// origin connection vetoes it, and the test's own deadline applies. Read from /proc (proc(5):
// /proc/PID/task/TID/stat, /proc/PID/fd, /proc/PID/net/tcp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "socket.h"

namespace testing_support {

/// One look at a stage from outside.
struct StageSnapshot {
  bool readable = false;           ///< /proc had the process (false once it exited)
  bool all_asleep = false;         ///< every thread in state S (none runnable, none in D)
  bool origin_in_flight = false;   ///< a socket of the stage is connected to the origin's port
  unsigned long unread_client = 0; ///< inode of an accepted client socket with unread bytes, or 0
  std::size_t unread_bytes = 0;    ///< how many bytes sit unread in that socket
  std::size_t threads = 0;         ///< threads of the stage
};

/// Looks at process `pid`, a stage listening on `proxy_port` whose origin listens on
/// `origin_port` (both 127.0.0.1 or ::1). Never throws: what cannot be read stays false / 0.
StageSnapshot look_at_stage(pid_t pid, std::uint16_t proxy_port, std::uint16_t origin_port);

/// Watches a stage on a thread of its own, every 200 ms, from construction to destruction.
/// When one client's request stays unread for `window` while every thread of the stage sleeps
/// and no origin request is in flight, it records the hang (hang(); the fixture's TearDown
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
