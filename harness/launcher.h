// Process: runs a server binary (a stage, the origin) as a child for tests, the grader and
// benchmarks, and learns its port from the `listening on HOST:PORT` line it prints, so nobody
// ever guesses a port.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"

namespace harness {

/// How a Process starts.
struct ProcessOptions {
  /// How long the child has to print `listening on HOST:PORT`.
  std::chrono::milliseconds ready_timeout{10'000};
  /// Empty: the child inherits our stderr. Otherwise its stderr goes to this file (created or
  /// truncated), e.g. so a test can show a server's log only when it fails.
  std::string stderr_path;
  /// When set, the child's limit on open file descriptors (RLIMIT_NOFILE, soft and hard),
  /// applied with prlimit(2) right after it starts and before it can accept a client — how a
  /// test runs a server under `ulimit -n 64` (hardening_faults_test). Linux only; the constructor throws
  /// when the limit cannot be set.
  std::optional<unsigned long> max_open_files;
};

/// How a child ended, as stop() reports it.
struct ExitStatus {
  int exit_code = -1;                    ///< the exit status when it exited normally, else -1
  int signal = 0;                        ///< the signal that ended it, else 0
  bool killed = false;                   ///< stop() had to send SIGKILL after the grace period
  std::chrono::milliseconds elapsed{0};  ///< from stop()'s SIGTERM until it was reaped; 0 if
                                         ///< it had already exited
  std::string output;  ///< all stdout after the `listening on` line (e.g. the final stats line)

  /// Exited with status 0, not by a signal.
  [[nodiscard]] bool clean() const noexcept { return signal == 0 && exit_code == 0; }
};

/// The emulator's words that Process and shell_command put before `program`: none on a native
/// build; in a cross build tested under emulation (make cross-check, docs/raspberry-pi.md), the
/// configured emulator (qemu-aarch64 -L ...) when `program` is a file built for the target,
/// which the kernel cannot exec. A test uses it to tell what emulation changes (qemu-user runs
/// a thread of its own in each process, ignores a guest's RLIMIT_AS).
std::vector<std::string> emulator_for(const std::string& program);

/// `program` as words for sh -c (popen, std::system), each single-quoted, after
/// emulator_for(program): a shell given a target binary would read its ELF header as a script.
std::string shell_command(const std::string& program);

/// A running child process whose stdout is captured through a pipe. The constructor returns
/// once the child has printed `listening on HOST:PORT`; the destructor stops it if still
/// running. A background thread drains stdout all along, so a chatty child never blocks on a
/// full pipe.
/// Thread-safety: use a Process from one thread at a time (read_line and output() may run
/// while the child writes; the capture is internally locked).
class Process {
 public:
  /// Starts argv[0] (searched in PATH when it has no '/') with argv, our environment, stdout
  /// piped to us, a default signal mask and dispositions, and no fd of ours but 0-2
  /// (closefrom at spawn on glibc >= 2.34; before that, only close-on-exec fds are kept out).
  /// Throws std::runtime_error — with the stdout seen so far and how it ended — when it cannot
  /// be started, exits, or does not print the line within options.ready_timeout; the child is
  /// killed and reaped first.
  explicit Process(std::vector<std::string> argv, const ProcessOptions& options = {});
  /// Stops the child (stop() with the default grace) if stop() was not called.
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  /// The host from the `listening on` line, IPv6 without brackets (ready for connect_tcp).
  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  /// HOST:PORT exactly as printed (an IPv6 host keeps its brackets).
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  /// Stdout up to and including the `listening on` line.
  [[nodiscard]] const std::string& startup_output() const noexcept { return startup_output_; }

  /// Stdout after the `listening on` line, captured so far.
  [[nodiscard]] std::string output() const;
  /// The next whole stdout line after the `listening on` line (without its newline), waiting
  /// at most `timeout`; nullopt on timeout or when stdout ended first.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);

  /// Sends `signal` to the child; does nothing once it has been reaped.
  void send_signal(int signal);
  /// True while the child has not exited (reaps it if it has).
  bool running();
  /// SIGTERM, up to `grace` for the child to exit, then SIGKILL; reaps it and collects the
  /// rest of its stdout. Idempotent: later calls return the same status.
  ExitStatus stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  void read_stdout(const std::stop_token& token);
  bool find_listening_line();
  bool wait_for_exit(std::chrono::steady_clock::time_point deadline);
  void reap_blocking();
  ExitStatus finish(std::chrono::milliseconds elapsed, bool killed);

  pid_t pid_ = -1;
  bool reaped_ = false;
  int wait_status_ = 0;
  std::optional<ExitStatus> final_status_;
  std::string host_;
  std::uint16_t port_ = 0;
  std::string address_;
  std::string startup_output_;
  std::size_t read_cursor_ = 0;  // read_line's position in output_, past listen_end_

  proxy::Socket stdout_pipe_;  // our read end
  proxy::Socket reader_wake_;  // eventfd: tells the reader to give up on the pipe

  mutable std::mutex mutex_;  // guards output_, stdout_ended_, listen_end_
  std::condition_variable changed_;
  std::string output_;  // everything read from stdout
  bool stdout_ended_ = false;
  std::size_t listen_end_ = 0;  // offset just past the `listening on` line

  std::jthread reader_;  // last: stops and joins before the fields it uses go away
};

}  // namespace harness
