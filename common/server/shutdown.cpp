#include "server/shutdown.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <system_error>

namespace proxy {
namespace {

int make_eventfd() {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  return fd;
}

// An eventfd stays readable once signalled, because nobody reads it: every waiter sees it.
void signal_event(int fd) noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = ::write(fd, &one, sizeof one);
}

bool is_signalled(int fd) noexcept {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace

Shutdown::Shutdown(Millis grace) : grace_(grace) {
  ignore_sigpipe();
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  // Blocked here, in the main thread, before any other thread exists: every thread inherits the
  // mask, so the signals are delivered only through the signalfd below.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal_fd_ = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  stop_fd_ = make_eventfd();
  cut_fd_ = make_eventfd();
  quit_fd_ = make_eventfd();
  set_io_cancel_fd(cut_fd_);
  watcher_ = std::jthread([this](std::stop_token stop) { watch(stop); });
}

Shutdown::~Shutdown() {
  signal_event(quit_fd_);
  watcher_ = {};  // joins
  set_io_cancel_fd(-1);
  for (int fd : {signal_fd_, stop_fd_, cut_fd_, quit_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

bool Shutdown::stop_requested() const noexcept { return is_signalled(stop_fd_); }

void Shutdown::request_stop() noexcept {
  signal_event(stop_fd_);
  stop_source_.request_stop();
}

void Shutdown::watch(std::stop_token stop) {
  // Phase 1: wait for a signal or request_stop(). Phase 2: wait out the grace period (a second
  // signal ends it early), then cut in-flight I/O.
  bool stopping = false;
  auto cut_at = std::chrono::steady_clock::time_point::max();
  while (!stop.stop_requested()) {
    int timeout = -1;
    if (stopping) {
      auto left = std::chrono::duration_cast<Millis>(cut_at - std::chrono::steady_clock::now());
      timeout = left.count() < 0 ? 0 : static_cast<int>(left.count());
    }
    pollfd fds[3] = {{signal_fd_, POLLIN, 0}, {quit_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int ready = ::poll(fds, stopping ? 2 : 3, timeout);
    if (ready < 0 && errno == EINTR) continue;
    if (fds[1].revents & POLLIN) return;  // the owner is being destroyed
    if (ready == 0 && stopping) {
      signal_event(cut_fd_);
      return;
    }
    bool got_signal = false;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        got_signal = true;
      }
    }
    if (!stopping && (got_signal || (fds[2].revents & POLLIN))) {
      stopping = true;
      signal_event(stop_fd_);
      stop_source_.request_stop();
      cut_at = std::chrono::steady_clock::now() + grace_;
    } else if (stopping && got_signal) {
      signal_event(cut_fd_);  // a second Ctrl-C: the user does not want to wait
      return;
    }
  }
}

}  // namespace proxy
