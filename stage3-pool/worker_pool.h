// WorkerPool: a fixed set of worker threads pulling items from one BoundedQueue. Stage 3 feeds
// it accepted sockets; stage 4 and the dispatch benchmark reuse it.
#pragma once

#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <stop_token>
#include <thread>
#include <utility>
#include <vector>

#include "bounded_queue.h"
#include "server/lab_stub.h"

namespace proxy {

/// The number of hardware threads, at least 1. As a pool size for I/O-bound work it is a naive
/// guess — workers mostly wait on origins — which the stage 4 tuning curve corrects; stage 3's
/// default is this but never fewer than 4 workers (stage3-pool/main.cpp, kMinDefaultWorkers).
std::size_t default_worker_count() noexcept;

namespace detail {
/// Logs that a worker's handler threw `what` and that the worker carries on. Never throws.
void log_handler_failure(std::string_view what) noexcept;

/// The checks a pool's constructor makes before it starts a thread: throws
/// std::invalid_argument, naming `pool`, when `workers` is 0 or `handler` is empty.
template <typename Handler>
void check_pool_arguments(const char* pool, std::size_t workers, const Handler& handler) {
  if (workers == 0) throw std::invalid_argument(std::string(pool) + ": at least one worker");
  if (!handler) throw std::invalid_argument(std::string(pool) + ": no handler");
}

/// Runs `start`, which starts a pool's workers; when it throws (std::system_error: no thread),
/// runs `stop` and rethrows. The workers already running would otherwise wait for items
/// forever, and their jthread destructors would wait for them.
template <typename Start, typename Stop>
void start_or_stop(Start&& start, Stop&& stop) {
  try {
    start();
  } catch (...) {
    stop();
    throw;
  }
}
}  // namespace detail

/// `workers` std::jthreads, each handling items until the pool closes. Items
/// wait in a BoundedQueue of `queue_capacity`; submit() blocks while it is full, try_submit()
/// refuses. Shutdown cannot deadlock whether workers are idle, busy or blocked, or producers are
/// blocked on a full queue.
/// Thread-safety: submit, try_submit, close and the observers may be called from any thread;
/// shutdown() and the destructor must not be called from a worker (a thread cannot join
/// itself). The handler runs on the workers concurrently, so what it touches must be
/// thread-safe.
template <typename Item>
class WorkerPool {
 public:
  /// Runs on a worker and owns the item it is given. An exception it throws is logged (one
  /// line) and the worker goes on with the next item: one failed transaction (say,
  /// std::bad_alloc) must not shrink the pool.
  using Handler = std::function<void(Item)>;

  /// Starts the workers. Throws std::invalid_argument when `workers` or `queue_capacity` is 0
  /// or `handler` is empty, and std::system_error when a thread cannot be started (those
  /// already started are stopped and joined before it propagates).
  WorkerPool(std::size_t workers, std::size_t queue_capacity, Handler handler)
      : handler_(std::move(handler)), queue_(queue_capacity) {
    detail::check_pool_arguments("WorkerPool", workers, handler_);
    workers_.reserve(workers);
    detail::start_or_stop(
        [&] {
          for (std::size_t i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
        },
        [this] { shutdown(); });
  }
  /// shutdown().
  ~WorkerPool() { shutdown(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Queues `item` for a worker, blocking while the queue is full: backpressure, so a producer
  /// that outruns the workers slows down instead of piling up work. True once queued; false,
  /// leaving `item` untouched, after close().
  bool submit(Item&& item) { return queue_.push(std::move(item)); }
  /// submit(), except that the wait for room also ends when `stop` is requested (false,
  /// `item` untouched): an accept loop blocked on a full queue still sees a shutdown at once.
  bool submit(Item&& item, std::stop_token stop) {
    return queue_.push(std::move(item), std::move(stop));
  }

  /// Queues `item` only if there is room now. False, leaving `item` untouched, when the queue
  /// is full or closed: the caller still holds it and chooses what an overflow means (e.g. a
  /// 503), at the call site where a reader sees it.
  bool try_submit(Item&& item) { return queue_.try_push(std::move(item)); }

  /// Sets the stop flag: submits fail from now on, idle workers return at once, busy ones
  /// after their current item. Returns the items no worker had started, oldest first, for the
  /// caller to dispose of outside the lock (e.g. answer each queued client). Does not wait for
  /// the workers. Idempotent; later calls return nothing.
  [[nodiscard]] std::deque<Item> close() { return queue_.close(); }

  /// Closes the queue (items still in it are destroyed, never handled) and returns after the
  /// last running handler has, with every worker thread ended. Idempotent.
  void shutdown() {
    // LAB(3) BEGIN WorkerPool::shutdown
    {
      // Destroyed here, after the queue's lock is released: closing a socket is I/O.
      std::deque<Item> discarded = close();
    }
    for (std::jthread& worker : workers_) {
      if (worker.joinable()) worker.join();
    }
    // LAB(3) STUB
    // proxy::todo_student("TODO(student) lab 3: WorkerPool::shutdown (stage3-pool/worker_pool.h)");
    // LAB(3) END
  }

  /// Number of worker threads; fixed at construction.
  [[nodiscard]] std::size_t worker_count() const noexcept { return workers_.size(); }
  /// Items waiting for a worker right now (a snapshot).
  [[nodiscard]] std::size_t queued() const { return queue_.size(); }
  /// The most items that ever waited at once: how deep the backlog got.
  [[nodiscard]] std::size_t peak_queued() const { return queue_.peak_size(); }
  /// The queue's capacity.
  [[nodiscard]] std::size_t queue_capacity() const noexcept { return queue_.capacity(); }

 private:
  void work() {
    // LAB(3) BEGIN WorkerPool::work
    // pop() yields nullopt only once the queue is closed: that is the stop flag.
    while (std::optional<Item> item = queue_.pop()) {
      try {
        handler_(std::move(*item));
      } catch (const std::exception& e) {
        detail::log_handler_failure(e.what());
      } catch (...) {
        detail::log_handler_failure("an exception not derived from std::exception");
      }
    }
    // LAB(3) STUB
    // proxy::todo_student("TODO(student) lab 3: WorkerPool::work (the worker loop) (stage3-pool/worker_pool.h)");
    // LAB(3) END
  }

  Handler handler_;
  BoundedQueue<Item> queue_;
  std::vector<std::jthread> workers_;  // joined by shutdown(), before the fields above go away
};

}  // namespace proxy
