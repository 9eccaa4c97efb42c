// The reference policy: least recently used, in O(1) per operation with a list and a hash map.
#pragma once

#include <list>
#include <string>
#include <unordered_map>

#include "cache/cache.h"

namespace proxy {

/// Byte-bounded LRU cache. A hit moves the entry to the front; insertion evicts from the back
/// until the new entry fits. Sizes in bytes as charged by entry_bytes().
/// Thread-safety: none — every call, find() included, modifies the recency list. Share it
/// between threads only behind a lock.
class LruCache final : public BoundedCache {
 public:
  using BoundedCache::BoundedCache;

  std::shared_ptr<const CachedResponse> find(std::string_view key) override;
  bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) override;
  void erase(std::string_view key) override;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CachedResponse> response;
    std::size_t bytes;
  };
  // Heterogeneous lookup: find() takes a string_view without building a std::string.
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view key) const noexcept {
      return std::hash<std::string_view>{}(key);
    }
  };
  using Recency = std::list<Entry>;  // front = most recently used

  void remove(Recency::iterator it);

  Recency recency_;
  std::unordered_map<std::string, Recency::iterator, KeyHash, std::equal_to<>> index_;
};

}  // namespace proxy
