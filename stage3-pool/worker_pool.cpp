#include "worker_pool.h"

#include <algorithm>
#include <string>

#include "server/log.h"

namespace proxy {

std::size_t default_worker_count() noexcept {
  // hardware_concurrency() may return 0 when it cannot tell.
  return std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

namespace detail {

void log_handler_failure(std::string_view what) noexcept {
  try {
    log_line("worker: a transaction failed: " + std::string(what) + "; the worker carries on");
  } catch (...) {
    // Most likely std::bad_alloc again: say so without allocating.
    log_line("worker: a transaction failed; the worker carries on");
  }
}

}  // namespace detail
}  // namespace proxy
