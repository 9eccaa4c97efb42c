#include "launcher.h"

#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include "spawn_setup.h"

extern char** environ;

namespace harness {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::string_view kListening = "listening on ";
// After the child is reaped, how long a grandchild that inherited its stdout may keep the pipe
// open before we stop reading.
constexpr auto kStdoutDrainTime = 2s;

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<std::int64_t>(left, 60'000));
}

std::string describe(int wait_status) {
  if (WIFEXITED(wait_status))
    return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return std::string("killed by signal ") + std::to_string(WTERMSIG(wait_status)) + " (" +
           ::strsignal(WTERMSIG(wait_status)) + ")";
  }
  return "ended with wait status " + std::to_string(wait_status);
}

#ifdef PROXY_CHILD_EMULATOR
// The ELF machine (e_machine) of the file at `path`; -1 when it is not an ELF file.
int elf_machine(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char header[EI_NIDENT + 4] = {};
  if (!in.read(reinterpret_cast<char*>(header), sizeof header)) return -1;
  if (std::memcmp(header, ELFMAG, SELFMAG) != 0) return -1;
  // e_machine is the half-word after e_type, in the file's byte order (System V ABI, ch. 4).
  const int low = header[EI_NIDENT + 2];
  const int high = header[EI_NIDENT + 3];
  return header[EI_DATA] == ELFDATA2MSB ? low << 8 | high : high << 8 | low;
}

// A cross build tested under emulation (make cross-check, docs/raspberry-pi.md): the kernel
// cannot run a target program, so one built like us (our own ELF machine; qemu-user shows the
// emulated program as /proc/self/exe) starts through the emulator the build was configured
// with, PROXY_CHILD_EMULATOR (words split on spaces). A host program (/bin/sh, curl, one found
// in PATH) starts as it is.
std::vector<std::string> through_emulator(std::vector<std::string> argv) {
  static const int own_machine = elf_machine("/proc/self/exe");
  if (argv[0].find('/') == std::string::npos || own_machine < 0 ||
      elf_machine(argv[0]) != own_machine) {
    return argv;
  }
  std::vector<std::string> command;
  std::istringstream words(PROXY_CHILD_EMULATOR);
  for (std::string word; words >> word;) command.push_back(word);
  command.insert(command.end(), std::make_move_iterator(argv.begin()),
                 std::make_move_iterator(argv.end()));
  return command;
}
#endif

// `word` in single quotes for sh; a quote inside becomes '\'' (POSIX Shell Command Language 2.2).
std::string shell_quoted(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

std::vector<std::string> emulator_for(const std::string& program) {
#ifdef PROXY_CHILD_EMULATOR
  std::vector<std::string> words = through_emulator({program});
  words.pop_back();
  return words;
#else
  (void)program;
  return {};
#endif
}

std::string shell_command(const std::string& program) {
  std::vector<std::string> words = emulator_for(program);
  words.push_back(program);
  std::string command;
  for (const std::string& word : words) {
    command += (command.empty() ? "" : " ") + shell_quoted(word);
  }
  return command;
}

Process::Process(std::vector<std::string> argv, const ProcessOptions& options) {
  if (argv.empty()) throw std::runtime_error("Process: empty argv");
#ifdef PROXY_CHILD_EMULATOR
  argv = through_emulator(std::move(argv));
#endif
  if (options.max_open_files) {
    // Set in the child before it runs (the shell's `ulimit -n` sets soft and hard, then execs
    // it in place, same pid): a prlimit from here after posix_spawn races the child's start-up,
    // which reads the limit (stage 4 sizes its connection cap from it).
    std::vector<std::string> wrapped{"/bin/sh", "-c",
                                     "ulimit -n " + std::to_string(*options.max_open_files) +
                                         " && exec \"$0\" \"$@\""};
    wrapped.insert(wrapped.end(), std::make_move_iterator(argv.begin()),
                   std::make_move_iterator(argv.end()));
    argv = std::move(wrapped);
  }
  int fds[2];
  // Close-on-exec, so other children spawned meanwhile (tests run servers side by side) do not
  // hold our pipe open and hide this child's end of output.
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  stdout_pipe_ = proxy::Socket(fds[0]);
  proxy::Socket write_end(fds[1]);
  reader_wake_ = proxy::Socket(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!reader_wake_.valid())
    throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));

  SpawnSetup spawn;
  // dup2 clears close-on-exec on the child's fd 1 only.
  ::posix_spawn_file_actions_adddup2(&spawn.actions, write_end.fd(), STDOUT_FILENO);
  if (!options.stderr_path.empty()) {
    ::posix_spawn_file_actions_addopen(&spawn.actions, STDERR_FILENO, options.stderr_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  spawn.close_inherited_and_reset_signals();

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (auto& arg : argv) args.push_back(arg.data());
  args.push_back(nullptr);
  if (int rc =
          ::posix_spawnp(&pid_, argv[0].c_str(), &spawn.actions, &spawn.attr, args.data(), environ);
      rc != 0) {
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  write_end.close();  // else we would never see end of file
  reader_ = std::jthread([this](const std::stop_token& token) { read_stdout(token); });

  const auto deadline = Clock::now() + options.ready_timeout;
  bool ready = false;
  bool stdout_ended = false;
  {
    std::unique_lock lock(mutex_);
    changed_.wait_until(lock, deadline, [&] {
      ready = find_listening_line();
      return ready || stdout_ended_;
    });
    stdout_ended = stdout_ended_;
  }
  if (ready) return;

  // Its stdout ended: it is most likely exiting, give it a moment so we can say how.
  const bool exited = stdout_ended ? wait_for_exit(Clock::now() + 1s) : !running();
  std::string why = exited ? describe(wait_status_) + " before printing 'listening on HOST:PORT'"
                           : "did not print 'listening on HOST:PORT' within " +
                                 std::to_string(options.ready_timeout.count()) + " ms";
  if (!exited) {
    ::kill(pid_, SIGKILL);
    reap_blocking();
  }
  finish(0ms, false);
  throw std::runtime_error(argv[0] + " " + why + "; its stdout:\n" + output_);
}

Process::~Process() {
  if (!final_status_) stop();
}

void Process::read_stdout(const std::stop_token& token) {
  std::stop_callback wake_on_stop(token, [this] {
    std::uint64_t one = 1;
    [[maybe_unused]] auto written = ::write(reader_wake_.fd(), &one, sizeof one);
  });
  char buffer[4096];
  while (!token.stop_requested()) {
    pollfd fds[2] = {{stdout_pipe_.fd(), POLLIN, 0}, {reader_wake_.fd(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents & POLLIN) break;
    ssize_t n = ::read(stdout_pipe_.fd(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::lock_guard lock(mutex_);
    output_.append(buffer, static_cast<std::size_t>(n));
    changed_.notify_all();
  }
  std::lock_guard lock(mutex_);
  stdout_ended_ = true;
  changed_.notify_all();
}

// Looks for the `listening on HOST:PORT` line among the whole lines read so far. Called with
// mutex_ held.
bool Process::find_listening_line() {
  std::size_t start = 0;
  for (;;) {
    auto newline = output_.find('\n', start);
    if (newline == std::string::npos) return false;
    std::string_view line(output_.data() + start, newline - start);
    if (line.ends_with('\r')) line.remove_suffix(1);
    start = newline + 1;
    if (!line.starts_with(kListening)) continue;
    std::string_view address = line.substr(kListening.size());
    auto colon = address.rfind(':');
    if (colon == std::string_view::npos || colon == 0) continue;
    std::string_view port_text = address.substr(colon + 1);
    unsigned long port = 0;
    if (port_text.empty() || port_text.size() > 5 ||
        port_text.find_first_not_of("0123456789") != std::string_view::npos ||
        (port = std::stoul(std::string(port_text))) == 0 || port > 65535) {
      continue;
    }
    std::string_view host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    host_ = std::string(host);
    port_ = static_cast<std::uint16_t>(port);
    address_ = std::string(address);
    startup_output_ = output_.substr(0, start);
    listen_end_ = start;
    read_cursor_ = start;
    return true;
  }
}

std::string Process::output() const {
  std::lock_guard lock(mutex_);
  return output_.substr(listen_end_);
}

std::optional<std::string> Process::read_line(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  std::size_t newline = std::string::npos;
  changed_.wait_for(lock, timeout, [&] {
    newline = output_.find('\n', read_cursor_);
    return newline != std::string::npos || stdout_ended_;
  });
  if (newline == std::string::npos) return std::nullopt;
  std::string line = output_.substr(read_cursor_, newline - read_cursor_);
  read_cursor_ = newline + 1;
  if (line.ends_with('\r')) line.pop_back();
  return line;
}

void Process::send_signal(int signal) {
  if (!reaped_) ::kill(pid_, signal);
}

bool Process::running() {
  if (reaped_) return false;
  int status = 0;
  pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == pid_) {
    reaped_ = true;
    wait_status_ = status;
  }
  return !reaped_;
}

// Waits until the child exits (and reaps it) or the deadline passes. True when reaped.
bool Process::wait_for_exit(Clock::time_point deadline) {
  if (!running()) return true;
#ifdef SYS_pidfd_open
  // A pidfd turns "wait for exit with a deadline" into one poll (Linux 5.3+).
  proxy::Socket pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
  if (pidfd.valid()) {
    pollfd exit_event{pidfd.fd(), POLLIN, 0};
    while (running()) {
      int left = ms_until(deadline);
      if (left == 0) return false;
      if (::poll(&exit_event, 1, left) < 0 && errno != EINTR) break;
    }
    return !running();
  }
#endif
  // Older kernels: poll the child's state every 10 ms.
  while (running()) {
    if (Clock::now() >= deadline) return false;
    ::poll(nullptr, 0, 10);
  }
  return true;
}

void Process::reap_blocking() {
  while (!reaped_) {
    int status = 0;
    pid_t done = ::waitpid(pid_, &status, 0);
    if (done == pid_) {
      reaped_ = true;
      wait_status_ = status;
    } else if (done < 0 && errno != EINTR) {
      reaped_ = true;  // not our child any more (ECHILD): nothing left to wait for
      wait_status_ = 0;
    }
  }
}

// Collects the rest of stdout once the child is reaped and records the final status.
ExitStatus Process::finish(std::chrono::milliseconds elapsed, bool killed) {
  {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, kStdoutDrainTime, [&] { return stdout_ended_; });
  }
  reader_.request_stop();
  if (reader_.joinable()) reader_.join();

  ExitStatus status;
  if (WIFEXITED(wait_status_)) status.exit_code = WEXITSTATUS(wait_status_);
  if (WIFSIGNALED(wait_status_)) status.signal = WTERMSIG(wait_status_);
  status.killed = killed;
  status.elapsed = elapsed;
  {
    std::lock_guard lock(mutex_);
    status.output = output_.substr(std::min(listen_end_, output_.size()));
  }
  final_status_ = status;
  return status;
}

ExitStatus Process::stop(std::chrono::milliseconds grace) {
  if (final_status_) return *final_status_;
  if (!running()) return finish(0ms, false);
  const auto start = Clock::now();
  ::kill(pid_, SIGTERM);
  bool killed = false;
  if (!wait_for_exit(start + grace)) {
    ::kill(pid_, SIGKILL);
    killed = true;
    reap_blocking();
  }
  return finish(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start),
                killed);
}

}  // namespace harness
