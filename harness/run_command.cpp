#include "run_command.h"

#include <array>
#include <cstdio>

namespace harness {

CommandOutput run_command(const std::string& command, std::size_t limit) {
  CommandOutput out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  out.started = true;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) {
    if (out.text.size() < limit) out.text.append(buf.data(), n);
  }
  out.status = ::pclose(pipe);
  return out;
}

}  // namespace harness
