#include "cache/cache.h"

namespace proxy {

std::size_t entry_bytes(std::string_view key, const CachedResponse& response) noexcept {
  std::size_t bytes = key.size() + response.head.size() + response.body.size();
  for (const VaryField& field : response.vary) {
    bytes += field.name.size() + (field.value ? field.value->size() : 0);
  }
  return bytes;
}

}  // namespace proxy
