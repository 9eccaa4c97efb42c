// BoundedQueue: the hand-off between the accept loop and the workers. One mutex, two condition
// variables (not empty, not full), and the three traps of "The thread pool, measured" done
// right: wait in a loop on a predicate, destroy items outside the lock, store items by value.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <utility>

#include "server/lab_stub.h"

namespace proxy {

/// A FIFO of at most capacity() items with blocking and non-blocking ends, and a close that
/// ends every wait. T may be move-only; a Socket is the intended T.
/// Thread-safety: every member may be called from any thread, by any number of producers and
/// consumers at once. No member holds the lock while it constructs, runs or destroys anything
/// but the item it moves in or out.
template <typename T>
class BoundedQueue {
 public:
  /// Throws std::invalid_argument when `capacity` is 0 (nothing could ever be pushed).
  explicit BoundedQueue(std::size_t capacity) : capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("BoundedQueue: capacity must be at least 1");
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  /// Appends `item`, blocking while the queue is full (backpressure on the producer). Returns
  /// true once `item` has been moved in; false, leaving `item` untouched, when the queue is or
  /// becomes closed first.
  bool push(T&& item) {
    // LAB(3) BEGIN BoundedQueue::push
    {
      std::unique_lock lock(mutex_);
      // The predicate form re-checks after every wakeup: wakeups can be spurious, and another
      // producer may have taken the free slot first.
      not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
      if (closed_) return false;
      append(std::move(item));
    }
    not_empty_.notify_one();
    return true;
    // LAB(3) STUB
    // (void)item;
    // proxy::todo_student("TODO(student) lab 3: BoundedQueue::push (stage3-pool/bounded_queue.h)");
    // LAB(3) END
  }

  /// push(), except that the wait for room also ends when `stop` is requested: returns false,
  /// leaving `item` untouched, so a producer blocked on a full queue can still shut down.
  bool push(T&& item, std::stop_token stop) {
    // LAB(3) BEGIN BoundedQueue::push(stop)
    {
      std::unique_lock lock(mutex_);
      // The same predicate loop as push(), inside the stop-aware wait.
      if (!not_full_.wait(lock, stop, [&] { return closed_ || items_.size() < capacity_; })) {
        return false;  // stopped while still full
      }
      if (closed_) return false;
      append(std::move(item));
    }
    not_empty_.notify_one();
    return true;
    // LAB(3) STUB
    // (void)item;
    // (void)stop;
    // proxy::todo_student("TODO(student) lab 3: BoundedQueue::push with a stop_token (stage3-pool/bounded_queue.h)");
    // LAB(3) END
  }

  /// Appends `item` only if there is room now. Returns false, leaving `item` untouched, when
  /// the queue is full or closed: the caller decides what a refusal means (e.g. a 503).
  bool try_push(T&& item) {
    // LAB(3) BEGIN BoundedQueue::try_push
    {
      std::lock_guard lock(mutex_);
      if (closed_ || items_.size() >= capacity_) return false;
      append(std::move(item));
    }
    not_empty_.notify_one();
    return true;
    // LAB(3) STUB
    // (void)item;
    // proxy::todo_student("TODO(student) lab 3: BoundedQueue::try_push (stage3-pool/bounded_queue.h)");
    // LAB(3) END
  }

  /// Removes and returns the oldest item, blocking while the queue is empty; nullopt once the
  /// queue is closed (items still queued then are close()'s to hand back, not pop()'s).
  std::optional<T> pop() {
    // LAB(3) BEGIN BoundedQueue::pop
    std::optional<T> item;
    {
      std::unique_lock lock(mutex_);
      // In a loop on the predicate, never a bare wait: a spurious wakeup, or a second consumer
      // that got here first, must send us back to waiting rather than into an empty deque.
      not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
      if (closed_) return std::nullopt;
      item.emplace(std::move(items_.front()));
      items_.pop_front();
    }
    not_full_.notify_one();
    return item;
    // LAB(3) STUB
    // proxy::todo_student("TODO(student) lab 3: BoundedQueue::pop (stage3-pool/bounded_queue.h)");
    // LAB(3) END
  }

  /// Closes the queue: later pushes fail, and every push or pop blocked now returns (false /
  /// nullopt). Returns the items that were still queued, oldest first, so that the caller
  /// destroys or answers them outside the lock. Idempotent; later calls return nothing.
  [[nodiscard]] std::deque<T> close() {
    // LAB(3) BEGIN BoundedQueue::close
    std::deque<T> left;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      left.swap(items_);
    }
    not_empty_.notify_all();
    not_full_.notify_all();
    return left;  // destroyed by the caller, after the lock is released: closing is I/O
    // LAB(3) STUB
    // proxy::todo_student("TODO(student) lab 3: BoundedQueue::close (stage3-pool/bounded_queue.h)");
    // LAB(3) END
  }

  /// Items queued right now (a snapshot; it may change at once).
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }
  /// The most items ever queued at once.
  [[nodiscard]] std::size_t peak_size() const {
    std::lock_guard lock(mutex_);
    return peak_size_;
  }
  /// True once close() has been called.
  [[nodiscard]] bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }
  /// The most items the queue holds; fixed at construction.
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

 private:
  // Called with mutex_ held.
  void append(T&& item) {
    items_.push_back(std::move(item));
    if (items_.size() > peak_size_) peak_size_ = items_.size();
  }

  const std::size_t capacity_;

  mutable std::mutex mutex_;  // guards items_, closed_, peak_size_
  // Items by value, moved in and out: the queue owns each one while it waits. A pointer into a
  // buffer that grows or shifts would dangle, and a socket must never have two owners.
  std::deque<T> items_;
  bool closed_ = false;
  std::size_t peak_size_ = 0;
  std::condition_variable not_empty_;  // consumers wait here for an item (or the close)
  // _any: it can also wait on a std::stop_token (push with a stop), at the price of an
  // internal mutex of its own.
  std::condition_variable_any not_full_;  // producers wait here for room (or the close)
};

}  // namespace proxy
