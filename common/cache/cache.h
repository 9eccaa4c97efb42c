// The cache every stage shares, seen through one interface so that policies (LRU, LFU, SIEVE,
// none) and thread-safety wrappers plug in without touching the stages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace proxy {

/// One request field a stored response's `Vary` names, with the value the request that
/// fetched it carried (all its lines joined by ", "), or nullopt when that request had none.
/// A later request matches the stored variant only when its values are the same (RFC 9111 §4.1).
struct VaryField {
  std::string name;  ///< lower-case field name
  std::optional<std::string> value;
};

/// When a stored response arrived and how long it stays fresh, in whole seconds (RFC 9111
/// §4.2). Filled in by http_cache_rules.h (make_freshness) when the proxy stores a response; the
/// zero default means stale on arrival and never revalidated, i.e. never served.
struct Freshness {
  std::int64_t response_time = 0;          ///< Unix seconds when the response head arrived
  std::int64_t corrected_initial_age = 0;  ///< its age then, seconds (RFC 9111 §4.2.3)
  std::int64_t lifetime = 0;   ///< seconds fresh, counted from its generation (§4.2.1, §4.2.2)
  bool has_validator = false;  ///< `head` holds an ETag or Last-Modified (§4.3.1)
};

/// A complete response as stored: immutable once built and shared by pointer, so an entry
/// evicted while another thread still relays it stays valid until that thread lets go.
struct CachedResponse {
  /// Status line and header fields, each ending in CRLF, without the blank line. Framing
  /// (Content-Length, Transfer-Encoding), hop-by-hop fields, Age and X-Cache are left out: the
  /// proxy adds its own when it serves the entry.
  std::string head;
  /// The decoded body, byte-exact.
  std::string body;
  /// Freshness of this response (RFC 9111 §4.2); see Freshness.
  Freshness freshness{};
  /// The request fields its `Vary` names, as the request that fetched it sent them (§4.1).
  std::vector<VaryField> vary{};
};

/// What a cache charges for an entry against its byte limits: everything it holds — key,
/// head, body and the Vary'd request values it keeps — in bytes, as CS:APP Proxy Lab counts a
/// whole web object. The fixed-size Freshness numbers are not charged.
std::size_t entry_bytes(std::string_view key, const CachedResponse& response) noexcept;

/// True when an entry charged `bytes` may be stored under these limits. A zero limit caches
/// nothing, not even an entry charged 0 bytes (an empty key and response). Every policy's
/// insert() asks this first.
inline bool fits_limits(std::size_t bytes, std::size_t capacity_bytes,
                        std::size_t max_object_bytes) noexcept {
  return capacity_bytes > 0 && max_object_bytes > 0 && bytes <= max_object_bytes &&
         bytes <= capacity_bytes;
}

/// Counters every cache keeps. `bytes` is the sum of entry_bytes over current entries.
struct CacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t insertions = 0;
  std::uint64_t evictions = 0;  ///< entries removed to make room (not replacements or erase)
  std::uint64_t bytes = 0;
  std::uint64_t entries = 0;
};

/// A byte-bounded cache of complete responses, keyed by the normalized absolute URI
/// (AbsoluteUri::cache_key). Thread-safety is each implementation's to state: the plain
/// policies are not thread-safe; wrappers make them so.
class Cache {
 public:
  virtual ~Cache() = default;

  /// The entry for `key`, or nullptr. Counts a hit or a miss and updates the policy's state.
  virtual std::shared_ptr<const CachedResponse> find(std::string_view key) = 0;
  /// Stores `response` under `key`, replacing any entry there, and evicts by policy until the
  /// total fits capacity_bytes(). Returns false, storing and evicting nothing (an entry already
  /// under `key` stays), when the entry alone is larger than max_object_bytes() or
  /// capacity_bytes().
  virtual bool insert(std::string_view key, std::shared_ptr<const CachedResponse> response) = 0;
  /// Removes the entry for `key`, if any (RFC 9111 §4.4 invalidation).
  virtual void erase(std::string_view key) = 0;
  /// A snapshot of the counters.
  [[nodiscard]] virtual CacheStats stats() const = 0;
  /// Total bytes the cache may hold.
  [[nodiscard]] virtual std::size_t capacity_bytes() const = 0;
  /// Largest single entry, in bytes, the cache will store.
  [[nodiscard]] virtual std::size_t max_object_bytes() const = 0;
};

/// What the eviction policies (LruCache, LfuCache, SieveCache) share: the two byte limits and
/// the counters, with the accessors that report them. A policy implements find, insert and
/// erase on top, keeping `stats_` exact as it goes. Not copyable: a policy's index points into
/// its own lists, so a copy would point into the original's. Thread-safety: none of its own.
class BoundedCache : public Cache {
 public:
  /// `capacity_bytes` total and `max_object_bytes` per entry; both may be 0 (caches nothing).
  BoundedCache(std::size_t capacity_bytes, std::size_t max_object_bytes) noexcept
      : capacity_bytes_(capacity_bytes), max_object_bytes_(max_object_bytes) {}
  BoundedCache(const BoundedCache&) = delete;
  BoundedCache& operator=(const BoundedCache&) = delete;

  [[nodiscard]] CacheStats stats() const override { return stats_; }
  [[nodiscard]] std::size_t capacity_bytes() const override { return capacity_bytes_; }
  [[nodiscard]] std::size_t max_object_bytes() const override { return max_object_bytes_; }

 protected:
  std::size_t capacity_bytes_;
  std::size_t max_object_bytes_;
  CacheStats stats_;
};

}  // namespace proxy
