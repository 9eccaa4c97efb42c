#include "server/log.h"

#include <unistd.h>

#include <string>

namespace proxy {
namespace {
std::string g_prefix;  // written once at start-up, read-only afterwards
}

void set_log_prefix(std::string_view prefix) { g_prefix = prefix; }

void log_line(std::string_view line) noexcept {
  try {
    std::string text;
    text.reserve(g_prefix.size() + line.size() + 3);
    if (!g_prefix.empty()) text.append(g_prefix).append(": ");
    text.append(line).push_back('\n');
    // One write() per line: POSIX keeps writes to the same pipe atomic up to PIPE_BUF bytes.
    [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  } catch (...) {
    // Logging must never take a connection or the server down.
  }
}

}  // namespace proxy
