#include "cache.h"

namespace proxy {

std::size_t entry_bytes(std::string_view key, const CachedResponse& response) noexcept {
  return key.size() + response.head.size() + response.body.size();
}

}  // namespace proxy
