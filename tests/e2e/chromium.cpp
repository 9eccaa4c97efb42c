#include "chromium.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "spawn_setup.h"
#include "../test_support.h"

extern char** environ;

namespace e2e {
namespace {

using test_support::read_file;

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Flags for a headless browser run as root on a machine without a network beyond loopback:
// --no-sandbox because Chromium's sandbox refuses to run as root; the --disable-* flags stop
// the connections Chromium makes on its own (updates, sync, field trials, safe browsing lists),
// which would be refused here and would otherwise reach the proxy under test too.
const std::vector<std::string> kQuietHeadless = {
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    // No sockets opened ahead of need: a silent preconnected socket holds sequential stage 1
    // for --client-timeout-ms before it serves anyone (tests/e2e/README.md).
    "--disable-features=SpeculativePreconnect",
};

// Google's hosts go around the proxy. Even with the flags above, Chromium 156 asks
// update.googleapis.com (an on-demand component check), accounts.google.com (the account
// reconcilor's ListAccounts) and clients2.google.com (network time) at start-up; through the proxy
// they would show up in the stage's counters and, in stage 1, queue ahead of the page. Loopback
// must be listed with a minus: Chromium never sends loopback to a proxy unless told so.
constexpr const char* kProxyBypass =
    "--proxy-bypass-list=<-loopback>;*.google.com;*.googleapis.com";

// A new empty directory under `parent`, for one run's profile.
fs::path make_temp_dir(const fs::path& parent, const std::string& prefix) {
  std::string pattern = (parent / (prefix + "XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  }
  return pattern;
}

bool is_executable(const std::string& path) {
  std::error_code error;
  return !path.empty() && fs::is_regular_file(path, error) && ::access(path.c_str(), X_OK) == 0;
}

// A running child in its own process group, killed with its group unless waited for.
class Child {
 public:
  // Starts argv with stdout and stderr going to files; throws when it cannot.
  Child(const std::vector<std::string>& argv, const fs::path& stdout_path,
        const fs::path& stderr_path) {
    harness::SpawnSetup spawn;
    ::posix_spawn_file_actions_addopen(&spawn.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_addopen(&spawn.actions, STDOUT_FILENO, stdout_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_addopen(&spawn.actions, STDERR_FILENO, stderr_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    spawn.close_inherited_and_reset_signals();
    // Its own process group: the browser starts a zygote, renderers and utility processes, and
    // a deadline must end them all, not only the browser process.
    short flags = 0;
    ::posix_spawnattr_getflags(&spawn.attr, &flags);
    ::posix_spawnattr_setflags(&spawn.attr, static_cast<short>(flags | POSIX_SPAWN_SETPGROUP));
    ::posix_spawnattr_setpgroup(&spawn.attr, 0);

    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    args.reserve(copy.size() + 1);
    for (auto& arg : copy) args.push_back(arg.data());
    args.push_back(nullptr);
    if (int rc = ::posix_spawn(&pid_, copy[0].c_str(), &spawn.actions, &spawn.attr, args.data(),
                               environ);
        rc != 0) {
      throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
    }
    // A pidfd becomes readable when the child exits: a wait with a deadline and no polling loop.
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd_ < 0) {
      const int error = errno;
      end_group_and_reap();
      throw std::runtime_error(std::string("pidfd_open: ") + std::strerror(error));
    }
  }
  ~Child() {
    if (!reaped_) end_group_and_reap();
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // True when the child exited before `deadline`. Either way its whole process group is then
  // killed and the child reaped; wait_status() says how it ended.
  bool wait_until(Clock::time_point deadline) {
    bool exited = false;
    for (;;) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{pidfd_, POLLIN, 0};
      int rc = ::poll(&p, 1, left < 0 ? 0 : static_cast<int>(left));
      if (rc > 0) {
        exited = true;
        break;
      }
      if (rc == 0) break;
      if (errno != EINTR) break;
    }
    end_group_and_reap();
    return exited;
  }
  [[nodiscard]] int wait_status() const noexcept { return wait_status_; }

 private:
  // The leader is at most a zombie here, so its pid (the group's id) cannot have been reused:
  // the kill reaches only what it left behind.
  void end_group_and_reap() {
    ::kill(-pid_, SIGKILL);
    while (::waitpid(pid_, &wait_status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }

  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool reaped_ = false;
  int wait_status_ = 0;
};

}  // namespace

std::string chromium_path() {
  if (const char* chosen = std::getenv("CHROMIUM"); chosen != nullptr && *chosen != '\0') {
    return is_executable(chosen) ? std::string(chosen) : std::string();
  }
  const std::string debian = "/usr/bin/chromium";
  return is_executable(debian) ? debian : std::string();
}

std::string chromium_version(const std::string& chromium) {
  const fs::path dir = make_temp_dir(fs::temp_directory_path(), "chromium-version-");
  std::string version;
  {
    Child child({chromium, "--version"}, dir / "out", dir / "err");
    if (child.wait_until(Clock::now() + std::chrono::seconds(30))) version = read_file(dir / "out");
  }
  std::error_code error;
  fs::remove_all(dir, error);
  while (!version.empty() && (version.back() == '\n' || version.back() == ' ')) version.pop_back();
  return version;
}

LoadResult load_page(const std::string& chromium, const LoadOptions& options) {
  LoadResult result;
  const fs::path work_dir = options.work_dir;
  const fs::path profile = make_temp_dir(work_dir, "profile-");
  const fs::path dom_path = fs::path(options.screenshot_path).replace_extension(".html");
  const fs::path log_path = fs::path(options.screenshot_path).replace_extension(".log");
  std::error_code error;
  fs::remove(options.screenshot_path, error);

  result.argv = {chromium};
  result.argv.insert(result.argv.end(), kQuietHeadless.begin(), kQuietHeadless.end());
  result.argv.push_back("--user-data-dir=" + profile.string());
  result.argv.push_back("--window-size=" + std::to_string(options.width) + "," +
                        std::to_string(options.height));
  if (!options.proxy.empty()) {
    result.argv.push_back("--proxy-server=" + options.proxy);
    result.argv.push_back(kProxyBypass);
  }
  result.argv.push_back("--screenshot=" + options.screenshot_path);
  result.argv.push_back("--dump-dom");
  result.argv.push_back(options.url);

  const auto start = Clock::now();
  {
    Child child(result.argv, dom_path, log_path);
    result.finished = child.wait_until(start + options.deadline);
    const int status = child.wait_status();
    if (result.finished && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  }
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  result.dom = read_file(dom_path);
  result.screenshot = read_file(options.screenshot_path);
  result.log = read_file(log_path);
  fs::remove_all(profile, error);
  return result;
}

std::string LoadResult::describe() const {
  std::ostringstream text;
  if (!finished) {
    text << "chromium did not finish within its deadline (killed after " << elapsed.count()
         << " ms)\n";
  } else {
    text << "chromium exited with status " << exit_code << (signal ? ", signal " : "")
         << (signal ? std::to_string(signal) : "") << " after " << elapsed.count() << " ms; "
         << dom.size() << " bytes of DOM, " << screenshot.size() << " bytes of screenshot\n";
  }
  text << "command:";
  for (const auto& arg : argv) text << ' ' << arg;
  constexpr std::size_t kTail = 3000;
  text << "\nchromium's log (last " << kTail << " bytes):\n"
       << (log.size() > kTail ? log.substr(log.size() - kTail) : log);
  return text.str();
}

}  // namespace e2e
