#include "hang_watch.h"

#include <linux/tcp.h>  // struct tcp_info with tcpi_bytes_received (glibc's lacks it)
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stop_token>

namespace testing_support {
namespace {

namespace fs = std::filesystem;

/// The socket inodes among `pid`'s descriptors ("socket:[INODE]" links in /proc/PID/fd), each
/// with the descriptor number that holds it.
std::map<unsigned long, int> socket_inodes(pid_t pid) {
  std::map<unsigned long, int> inodes;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code link_ec;
    const std::string target = fs::read_symlink(it->path(), link_ec).string();
    if (!link_ec && target.rfind("socket:[", 0) == 0) {
      inodes.emplace(std::stoul(target.substr(8)), std::stoi(it->path().filename().string()));
    }
  }
  return inodes;
}

/// The first line of `path` (proc(5) files are one line or several), or "".
std::string first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// Whether thread `task` (/proc/PID/task/TID) sleeps in a futex wait: its wait channel names a
/// futex function (futex_wait_queue_me, futex_wait_queue, futex_do_wait, by kernel version), or
/// where the wait channel reads "0" (hidden), the system call it sleeps in is futex.
bool in_futex_wait(const fs::path& task) {
  const std::string wchan = first_line(task / "wchan");
  if (wchan.find("futex") != std::string::npos) return true;
#if defined(SYS_futex)
  if (wchan.empty() || wchan == "0") {
    std::istringstream syscall(first_line(task / "syscall"));
    long number = -1;
    return (syscall >> number) && number == SYS_futex;
  }
#endif
  return false;
}

/// Context switches of thread `task` so far, voluntary and involuntary (/proc/.../status).
unsigned long context_switches(const fs::path& task) {
  std::ifstream in(task / "status");
  unsigned long total = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("ctxt_switches:") != std::string::npos) {
      total += std::stoul(line.substr(line.find(':') + 1));
    }
  }
  return total;
}

/// Whether the stage has read none of the bytes a client sent on its descriptor `fd`: a copy of
/// the descriptor (pidfd_getfd(2)) shows the bytes received in all (TCP_INFO) equal to the bytes
/// still unread (FIONREAD). False when the copy or either query is refused.
bool untouched(int pidfd, int fd) {
#if defined(SYS_pidfd_getfd)
  proxy::Socket copy(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0)));
  if (!copy.valid()) return false;
  tcp_info info{};
  socklen_t length = sizeof info;
  int unread = 0;
  if (::getsockopt(copy.fd(), IPPROTO_TCP, TCP_INFO, &info, &length) != 0 ||
      length < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received ||
      ::ioctl(copy.fd(), FIONREAD, &unread) != 0) {
    return false;
  }
  return unread > 0 && info.tcpi_bytes_received == static_cast<std::uint64_t>(unread);
#else
  (void)pidfd;
  (void)fd;
  return false;
#endif
}

/// Every thread's state letter (proc(5): the field after the parenthesized name), or "" when
/// the process is gone; the threads other than main asleep in a futex wait go to `sleepers`.
std::string thread_states(pid_t pid, std::vector<std::pair<pid_t, unsigned long>>& sleepers) {
  std::string states;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string line = first_line(it->path() / "stat");
    const std::size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= line.size()) continue;
    const char state = line[paren + 2];
    states += state;
    const pid_t tid = static_cast<pid_t>(std::stol(it->path().filename().string()));
    if (state == 'S' && tid != pid && in_futex_wait(it->path())) {
      sleepers.emplace_back(tid, context_switches(it->path()));
    }
  }
  return states;
}

/// Reads /proc/PID/net/tcp and tcp6 (proc(5)) for the rows of `inodes`.
void scan_connections(pid_t pid, const std::map<unsigned long, int>& inodes,
                      std::uint16_t proxy_port, std::uint16_t origin_port, int pidfd,
                      StageSnapshot& s) {
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      std::istringstream row(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long inode = 0;
      if (!(row >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode) ||
          !inodes.count(inode)) {
        continue;
      }
      auto port_of = [](const std::string& address) {
        const std::size_t colon = address.rfind(':');
        return colon == std::string::npos
                   ? 0ul
                   : std::stoul(address.substr(colon + 1), nullptr, 16);
      };
      if (port_of(remote) == origin_port) {
        s.origin_in_flight = true;
        ++s.origin_connections;
      }
      const std::size_t colon = queues.find(':');
      const std::size_t unread =
          colon == std::string::npos ? 0 : std::stoul(queues.substr(colon + 1), nullptr, 16);
      // 01: ESTABLISHED. A socket on the proxy's port is a client the stage accepted (a
      // connection still in the listen backlog has no descriptor, so no inode of the stage).
      if (port_of(local) != proxy_port || state != "01" || unread == 0) continue;
      if (s.unread_client == 0) {
        s.unread_client = inode;
        s.unread_bytes = unread;
      }
      // Only worth a look inside the socket when some thread could be a worker never woken;
      // a few clients are enough to see one.
      if (pidfd >= 0 && !s.futex_sleepers.empty() && s.untouched_clients.size() < 8 &&
          untouched(pidfd, inodes.at(inode))) {
        s.untouched_clients.emplace_back(inode, unread);
      }
    }
  }
}

}  // namespace

StageSnapshot look_at_stage(pid_t pid, std::uint16_t proxy_port, std::uint16_t origin_port,
                            int pidfd) {
  StageSnapshot s;
  try {
    const std::string states = thread_states(pid, s.futex_sleepers);
    if (states.empty()) return s;
    s.readable = true;
    s.threads = states.size();
    s.all_asleep = states.find_first_not_of('S') == std::string::npos;
    scan_connections(pid, socket_inodes(pid), proxy_port, origin_port, pidfd, s);
  } catch (const std::exception&) {
    s.readable = false;  // a row or link that changed under us: no evidence this time
  }
  return s;
}

HangWatch::HangWatch(pid_t pid, std::uint16_t proxy_port, std::uint16_t origin_port,
                     std::string stage, std::chrono::milliseconds window)
    : pid_(pid),
      proxy_port_(proxy_port),
      origin_port_(origin_port),
      stage_(std::move(stage)),
      window_(window),
      pidfd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {
  // Without a pidfd (a kernel before 5.3) the watch still reports the hang; it cannot kill.
  thread_ = std::jthread([this](std::stop_token token) { watch(token); });
}

HangWatch::~HangWatch() { stop(); }

void HangWatch::stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

std::string HangWatch::hang() const {
  std::lock_guard lock(mutex_);
  return hang_;
}

bool HangWatch::hung() const { return !hang().empty(); }

namespace {

/// The part of `kept` also in `now` with the same value: the sleepers that have not run, the
/// clients whose unread bytes have not changed since the window began.
template <typename Key, typename Value>
std::vector<std::pair<Key, Value>> still(const std::vector<std::pair<Key, Value>>& kept,
                                         const std::vector<std::pair<Key, Value>>& now) {
  std::vector<std::pair<Key, Value>> out;
  for (const auto& entry : kept) {
    if (std::find(now.begin(), now.end(), entry) != now.end()) out.push_back(entry);
  }
  return out;
}

}  // namespace

void HangWatch::watch(const std::stop_token& token) {
  using Clock = std::chrono::steady_clock;
  std::mutex sleep_mutex;
  std::condition_variable_any sleeper;
  // State 1, nothing moves: the unread client seen in every look since `since`.
  unsigned long suspect = 0;
  std::size_t suspect_bytes = 0;
  Clock::time_point since;
  // State 2, a worker never woken: the futex sleepers that have not run, and the clients the
  // stage has not touched, in every look since `since_never_woken`.
  std::vector<std::pair<pid_t, unsigned long>> never_woken;
  std::vector<std::pair<unsigned long, std::size_t>> untouched;
  Clock::time_point since_never_woken;
  const long window_s = std::chrono::duration_cast<std::chrono::seconds>(window_).count();
  while (!token.stop_requested()) {
    const StageSnapshot s = look_at_stage(pid_, proxy_port_, origin_port_, pidfd_.fd());
    const Clock::time_point now = Clock::now();
    std::ostringstream text;
    const bool stuck = s.readable && s.all_asleep && !s.origin_in_flight && s.unread_client != 0;
    if (!stuck || s.unread_client != suspect || s.unread_bytes != suspect_bytes) {
      suspect = stuck ? s.unread_client : 0;
      suspect_bytes = stuck ? s.unread_bytes : 0;
      since = now;
    } else if (now - since >= window_) {
      text << "HUNG: " << stage_ << " accepted a client and left its request (" << suspect_bytes
           << " bytes) unread for " << window_s << " s while all " << s.threads
           << " of its threads slept and no request to the origin was in flight: the client "
              "was queued and no worker woke to take it.\n";
    }
    const bool waiting = s.readable && s.all_asleep && !s.futex_sleepers.empty() &&
                         !s.untouched_clients.empty();
    std::vector<std::pair<pid_t, unsigned long>> kept_sleepers;
    std::vector<std::pair<unsigned long, std::size_t>> kept_clients;
    if (waiting && !never_woken.empty()) {
      kept_sleepers = still(never_woken, s.futex_sleepers);
      kept_clients = still(untouched, s.untouched_clients);
    }
    if (kept_sleepers.empty() || kept_clients.empty()) {
      never_woken = waiting ? s.futex_sleepers : decltype(never_woken){};
      untouched = waiting ? s.untouched_clients : decltype(untouched){};
      since_never_woken = now;
    } else {
      never_woken = kept_sleepers;
      untouched = kept_clients;
      if (text.str().empty() && now - since_never_woken >= window_) {
        text << "HUNG: " << stage_ << " accepted a client and left its request ("
             << untouched.front().second << " bytes) unread, not one byte of it read, for "
             << window_s << " s while " << never_woken.size() << " of its "
             << s.threads << " threads slept in a wait on a condition variable or a mutex without once waking"
             << (s.origin_connections > 0
                     ? " (beside " + std::to_string(s.origin_connections) +
                           " requests in flight at the origin)"
                     : std::string())
             << ": the client was queued and an idle worker was never woken to take it.\n";
      }
    }
    if (!text.str().empty()) {
      text << "Likely trap: a lost wakeup (a push that notifies no waiting worker, or notifies "
              "before the item is in the queue) or a wait whose predicate is never made true.\n"
              "See the lab 3 handout (labs/lab3-pool/README.md), \"The traps\". The stage was "
              "killed so that this test ends now instead of at its deadline.\n";
      {
        std::lock_guard lock(mutex_);
        hang_ = text.str();
      }
      if (pidfd_.fd() >= 0) ::syscall(SYS_pidfd_send_signal, pidfd_.fd(), SIGKILL, nullptr, 0);
      return;
    }
    std::unique_lock lock(sleep_mutex);
    sleeper.wait_for(lock, token, std::chrono::milliseconds(200), [] { return false; });
  }
}

}  // namespace testing_support
