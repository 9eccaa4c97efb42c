// How the LFU and SIEVE caches index their entries: by a view of the key plus its hash.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>
#include <unordered_map>

namespace proxy {

/// A cache key as an index holds it: a view of the key's bytes, which the entry owns, and
/// their hash, computed once. Comparing hashes before bytes matters for URLs, which share long
/// prefixes (the same origin, the same directory), and it keeps libstdc++ from scanning a small
/// table linearly with a full byte comparison per entry, as it does for plain string keys.
struct HashedKey {
  explicit HashedKey(std::string_view key) noexcept
      : text(key), hash(std::hash<std::string_view>{}(key)) {}
  std::string_view text;
  std::size_t hash;
  friend bool operator==(const HashedKey& a, const HashedKey& b) noexcept {
    return a.hash == b.hash && a.text == b.text;
  }
};

/// Hashes a HashedKey by reading the hash it carries.
struct HashedKeyHash {
  std::size_t operator()(const HashedKey& key) const noexcept { return key.hash; }
};

/// An index from keys to `Value`. Its keys view strings owned elsewhere (the entries): an
/// entry must leave the index before its key is freed.
template <typename Value>
using KeyIndex = std::unordered_map<HashedKey, Value, HashedKeyHash>;

}  // namespace proxy
