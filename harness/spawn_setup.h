// posix_spawn's attribute and file-action objects, owned for the length of one spawn: shared by
// the launcher (stage processes) and the wrk runner. Internal to harness/.
#pragma once

#include <spawn.h>

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
};

}  // namespace harness
