#include "cache/lfu_cache.h"

#include <iterator>

namespace proxy {

std::shared_ptr<const CachedResponse> LfuCache::find(std::string_view key) {
  auto found = index_.find(HashedKey(key));
  if (found == index_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  // A hit is a write, as in LRU: the entry climbs to the bucket one frequency up, created
  // next to its old one if missing so the buckets stay sorted without a search.
  Entries::iterator entry = found->second;
  Buckets::iterator from = entry->bucket;
  Buckets::iterator to = std::next(from);
  if (to == buckets_.end() || to->frequency != from->frequency + 1) {
    to = buckets_.insert(to, Bucket{from->frequency + 1, {}});
  }
  to->entries.splice(to->entries.begin(), from->entries, entry);
  entry->bucket = to;
  if (from->entries.empty()) buckets_.erase(from);
  return entry->response;
}

bool LfuCache::insert(std::string_view key, std::shared_ptr<const CachedResponse> response) {
  if (!response) return false;
  const std::size_t bytes = entry_bytes(key, *response);
  if (!fits_limits(bytes, capacity_bytes_, max_object_bytes_)) return false;
  if (auto found = index_.find(HashedKey(key)); found != index_.end()) remove(found->second);
  while (stats_.bytes + bytes > capacity_bytes_) {
    evict_one();
    ++stats_.evictions;
  }
  if (buckets_.empty() || buckets_.front().frequency != 1) {
    buckets_.push_front(Bucket{1, {}});
  }
  Buckets::iterator ones = buckets_.begin();
  ones->entries.push_front(Entry{std::string(key), std::move(response), bytes, ones});
  index_.emplace(HashedKey(ones->entries.front().key), ones->entries.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.insertions;
  return true;
}

void LfuCache::erase(std::string_view key) {
  if (auto found = index_.find(HashedKey(key)); found != index_.end()) remove(found->second);
}

std::uint64_t LfuCache::frequency(std::string_view key) const {
  auto found = index_.find(HashedKey(key));
  return found == index_.end() ? 0 : found->second->bucket->frequency;
}

void LfuCache::evict_one() {
  // The lowest bucket is never empty, and its back is the least recently used of the rarest.
  remove(std::prev(buckets_.front().entries.end()));
}

void LfuCache::remove(Entries::iterator it) {
  Buckets::iterator bucket = it->bucket;
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(HashedKey(it->key));
  bucket->entries.erase(it);
  if (bucket->entries.empty()) buckets_.erase(bucket);
}

}  // namespace proxy
