// A hand-off from any thread to one thread that waits in epoll: stage 4's workers give the poller
// the connections they are done with and the origin connections of requests whose clients hung
// up (tuned_server.h); the workers give the tunnel relay its tunnels (tunnel_relay.h). The
// poster then writes to an eventfd the taker watches, and the taker takes everything at once.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

namespace proxy {

/// Items posted by any thread, taken in batches by one. The lock is held for a push or a swap,
/// never across I/O or an item's destructor. Waking the taker is the poster's business, after
/// post(): a wake-up that finds the box empty costs nothing, one that came before the post
/// could miss it. Thread-safety: every member may be called from any thread.
template <typename T>
class Mailbox {
 public:
  /// Appends `item`; never blocks for longer than another thread's push or swap.
  void post(T item) {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(item));
  }
  /// Everything posted so far, oldest first; the box is empty after.
  [[nodiscard]] std::vector<T> take() {
    std::vector<T> taken;
    std::lock_guard lock(mutex_);
    taken.swap(items_);
    return taken;
  }
  /// Destroys everything posted so far (at a stop, when nobody will take it), outside the lock.
  void clear() { std::vector<T> dropped = take(); }

 private:
  std::mutex mutex_;  // guards items_
  std::vector<T> items_;
};

}  // namespace proxy
