// libFuzzer target for `make fuzz`: see check_uri_input in fuzz_checks.h for what it checks.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  proxy_fuzz::check_uri_input(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
