// posix_spawn's attribute and file-action objects, owned for the length of one spawn: shared by
// the launcher (stage processes) and the wrk runner. Internal to harness/.
#pragma once

#include <spawn.h>

#include <csignal>

namespace harness {

/// Initialises posix_spawn's attribute and file-action objects and destroys them with the
/// scope. Not copyable; one per spawn, on one thread.
struct SpawnSetup {
  posix_spawnattr_t attr{};
  posix_spawn_file_actions_t actions{};
  SpawnSetup() {
    ::posix_spawnattr_init(&attr);
    ::posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attr);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  /// The last file action and the attributes every harness child gets: descriptors 3 and up
  /// closed (a socket a test opened without close-on-exec must not outlive it in a server it
  /// started; glibc 2.34+), and the signal mask and dispositions reset, because a parent that
  /// blocks SIGTERM to sigwait, or ignores SIGPIPE, must not pass that on — the child would
  /// shrug off a stop. Call after the dup2/open actions for fds 0–2.
  void close_inherited_and_reset_signals() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    sigset_t none;
    sigset_t defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int signal : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD}) {
      sigaddset(&defaults, signal);
    }
    ::posix_spawnattr_setsigmask(&attr, &none);
    ::posix_spawnattr_setsigdefault(&attr, &defaults);
    ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  }
};

}  // namespace harness
