#include "hang_watch.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stop_token>

namespace testing_support {
namespace {

namespace fs = std::filesystem;

/// The socket inodes among `pid`'s descriptors ("socket:[INODE]" links in /proc/PID/fd).
std::set<unsigned long> socket_inodes(pid_t pid) {
  std::set<unsigned long> inodes;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code link_ec;
    const std::string target = fs::read_symlink(it->path(), link_ec).string();
    if (!link_ec && target.rfind("socket:[", 0) == 0) {
      inodes.insert(std::stoul(target.substr(8)));
    }
  }
  return inodes;
}

/// Every thread's state letter (proc(5): the field after the parenthesized name), or "" when
/// the process is gone.
std::string thread_states(pid_t pid) {
  std::string states;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec), end;
       !ec && it != end; it.increment(ec)) {
    std::ifstream in(it->path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const std::size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= line.size()) continue;
    states += line[paren + 2];
  }
  return states;
}

/// Reads /proc/PID/net/tcp and tcp6 (proc(5)) for the rows of `inodes`.
void scan_connections(pid_t pid, const std::set<unsigned long>& inodes, std::uint16_t proxy_port,
                      std::uint16_t origin_port, StageSnapshot& s) {
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
      if (port_of(remote) == origin_port) s.origin_in_flight = true;
      const std::size_t colon = queues.find(':');
      const std::size_t unread =
          colon == std::string::npos ? 0 : std::stoul(queues.substr(colon + 1), nullptr, 16);
      // 01: ESTABLISHED. A socket on the proxy's port is a client the stage accepted (a
      // connection still in the listen backlog has no descriptor, so no inode of the stage).
      if (port_of(local) == proxy_port && state == "01" && unread > 0 && s.unread_client == 0) {
        s.unread_client = inode;
        s.unread_bytes = unread;
      }
    }
  }
}

}  // namespace

StageSnapshot look_at_stage(pid_t pid, std::uint16_t proxy_port, std::uint16_t origin_port) {
  StageSnapshot s;
  try {
    const std::string states = thread_states(pid);
    if (states.empty()) return s;
    s.readable = true;
    s.threads = states.size();
    s.all_asleep = states.find_first_not_of('S') == std::string::npos;
    scan_connections(pid, socket_inodes(pid), proxy_port, origin_port, s);
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

void HangWatch::watch(const std::stop_token& token) {
  using Clock = std::chrono::steady_clock;
  std::mutex sleep_mutex;
  std::condition_variable_any sleeper;
  unsigned long suspect = 0;       // the unread client seen in every look since `since`
  std::size_t suspect_bytes = 0;
  Clock::time_point since;
  while (!token.stop_requested()) {
    const StageSnapshot s = look_at_stage(pid_, proxy_port_, origin_port_);
    const bool stuck = s.readable && s.all_asleep && !s.origin_in_flight && s.unread_client != 0;
    if (!stuck || s.unread_client != suspect || s.unread_bytes != suspect_bytes) {
      suspect = stuck ? s.unread_client : 0;
      suspect_bytes = stuck ? s.unread_bytes : 0;
      since = Clock::now();
    } else if (Clock::now() - since >= window_) {
      std::ostringstream text;
      text << "HUNG: " << stage_ << " accepted a client and left its request ("
           << suspect_bytes << " bytes) unread for "
           << std::chrono::duration_cast<std::chrono::seconds>(window_).count()
           << " s while all " << s.threads
           << " of its threads slept and no request to the origin was in flight: the client "
              "was queued and no worker woke to take it.\n"
              "Likely trap: a lost wakeup (a push that notifies no waiting worker, or notifies "
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
