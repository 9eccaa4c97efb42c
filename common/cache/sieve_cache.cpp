#include "cache/sieve_cache.h"

#include <iterator>

namespace proxy {

std::shared_ptr<const CachedResponse> SieveCache::find(std::string_view key) {
  std::shared_ptr<const CachedResponse> response = mark_visited(key);
  if (response) {
    ++stats_.hits;
  } else {
    ++stats_.misses;
  }
  return response;
}

std::shared_ptr<const CachedResponse> SieveCache::mark_visited(std::string_view key) const {
  auto found = index_.find(HashedKey(key));
  if (found == index_.end()) return nullptr;
  const Entry& entry = *found->second;
  // Read before writing: a popular entry's bit is already set, and skipping the store keeps
  // its cache line shared between the cores that hit it instead of bouncing it among them.
  if (!entry.visited.load(std::memory_order_relaxed)) {
    entry.visited.store(true, std::memory_order_relaxed);
  }
  return entry.response;
}

bool SieveCache::insert(std::string_view key, std::shared_ptr<const CachedResponse> response) {
  if (!response) return false;
  const std::size_t bytes = entry_bytes(key, *response);
  if (!fits_limits(bytes, capacity_bytes_, max_object_bytes_)) return false;
  if (auto found = index_.find(HashedKey(key)); found != index_.end()) remove(found->second);
  while (stats_.bytes + bytes > capacity_bytes_) {
    evict_one();
    ++stats_.evictions;
  }
  queue_.emplace_front(key, std::move(response), bytes);
  index_.emplace(HashedKey(queue_.front().key), queue_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.insertions;
  return true;
}

void SieveCache::erase(std::string_view key) {
  if (auto found = index_.find(HashedKey(key)); found != index_.end()) remove(found->second);
}

bool SieveCache::visited(std::string_view key) const {
  auto found = index_.find(HashedKey(key));
  return found != index_.end() && found->second->visited.load(std::memory_order_relaxed);
}

std::optional<std::string> SieveCache::hand() const {
  if (hand_ == queue_.end()) return std::nullopt;
  return hand_->key;
}

SieveCache::Queue::iterator SieveCache::toward_head(Queue::iterator it) {
  return it == queue_.begin() ? std::prev(queue_.end()) : std::prev(it);
}

void SieveCache::evict_one() {
  // Ends within one lap: every visited entry the hand passes is cleared, so at the latest it
  // evicts where it started. Called only while the queue holds bytes, so it is not empty.
  Queue::iterator victim = hand_ == queue_.end() ? std::prev(queue_.end()) : hand_;
  while (victim->visited.load(std::memory_order_relaxed)) {
    victim->visited.store(false, std::memory_order_relaxed);
    victim = toward_head(victim);
  }
  // The next sweep resumes just past the victim; past the head it restarts at the tail.
  hand_ = victim == queue_.begin() ? queue_.end() : std::prev(victim);
  remove(victim);
}

void SieveCache::remove(Queue::iterator it) {
  // erase() may remove the entry under the hand; the hand steps on as if it had evicted it.
  if (it == hand_) hand_ = it == queue_.begin() ? queue_.end() : std::prev(it);
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(HashedKey(it->key));
  queue_.erase(it);
}

}  // namespace proxy
