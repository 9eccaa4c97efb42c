// ElasticPool: stage 3's worker pool with a size that can change while it runs, for
// `--workers auto`. What differs from WorkerPool is only the sizing: the hand-off is stage 3's
// BoundedQueue, and its traps (wait in a loop, close outside the lock, items by value) stay
// solved there.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "bounded_queue.h"
#include "worker_pool.h"  // detail:: log_handler_failure, check_pool_arguments, start_or_stop

namespace proxy {

/// Workers (std::jthread) taking items from one BoundedQueue, whose number can be changed at
/// run time with resize(). Growing starts threads at once. Shrinking is cooperative: a worker
/// above the target retires after finishing its current item, and idle workers are woken by an
/// empty "nudge" slot in the queue so they retire too — no thread is ever interrupted mid-item.
/// Thread-safety: every member may be called from any thread, except that shutdown() and the
/// destructor must not be called from a worker. The handler runs on many workers at once.
template <typename Item>
class ElasticPool {
 public:
  /// Runs on a worker and owns its item. Exceptions are logged and the worker carries on.
  using Handler = std::function<void(Item)>;

  /// Runs first on every worker thread the pool starts, before it takes an item (e.g. to set
  /// the thread's scheduling policy). May be empty. Must not throw: it runs outside the
  /// handler's catch, so an exception ends the process (std::terminate).
  using OnStart = std::function<void()>;

  /// Starts `workers` threads. Throws std::invalid_argument for 0 workers, a 0 queue or an
  /// empty handler; std::system_error when a thread cannot start.
  ElasticPool(std::size_t workers, std::size_t queue_capacity, Handler handler,
              OnStart on_start = {})
      : handler_(std::move(handler)), on_start_(std::move(on_start)), queue_(queue_capacity) {
    detail::check_pool_arguments("ElasticPool", workers, handler_);
    detail::start_or_stop([&] { resize(workers); }, [this] { shutdown(); });
  }
  ~ElasticPool() { shutdown(); }
  ElasticPool(const ElasticPool&) = delete;
  ElasticPool& operator=(const ElasticPool&) = delete;

  /// Queues `item` only if there is room now; false (item untouched) when full or closed, so
  /// the call site shows the overflow policy: load shedding with a 503.
  bool try_submit(Item&& item) {
    std::optional<Item> slot(std::move(item));
    if (queue_.try_push(std::move(slot))) return true;
    item = std::move(*slot);  // try_push leaves a refused slot untouched
    return false;
  }

  /// Sets the number of workers to `target` (at least 1). Returns how many run or will run.
  std::size_t resize(std::size_t target) {
    if (target == 0) target = 1;
    std::vector<std::jthread> retired;
    std::size_t nudges = 0;
    {
      std::lock_guard lock(mutex_);
      if (closed_) return target_;
      target_ = target;
      reap(retired);
      while (live_ < target_) {
        workers_.emplace_back();
        Worker& worker = workers_.back();
        worker.thread = std::jthread([this, &worker] {
          if (on_start_) on_start_();
          work(worker);
        });
        ++live_;
      }
      if (live_ > target_) nudges = live_ - target_;
    }
    // Wake idle surplus workers so they can retire; a busy one retires after its item. A full
    // queue means nobody is idle, so a refused nudge is not needed.
    for (std::size_t i = 0; i < nudges; ++i) {
      std::optional<Item> nudge;
      nudges_.fetch_add(1, std::memory_order_relaxed);
      if (!queue_.try_push(std::move(nudge))) {
        nudges_.fetch_sub(1, std::memory_order_relaxed);
        break;
      }
    }
    for (std::jthread& thread : retired) thread.join();  // outside the lock: joining waits
    return target;
  }

  /// Closes the queue: submits fail, workers finish their current item and return. Returns the
  /// items no worker started, oldest first, for the caller to answer outside the lock.
  [[nodiscard]] std::deque<Item> close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    std::deque<Item> items;
    for (std::optional<Item>& slot : queue_.close()) {
      if (slot) items.push_back(std::move(*slot));
    }
    return items;
  }

  /// close(), then joins every worker. Idempotent.
  void shutdown() {
    { std::deque<Item> discarded = close(); }
    std::list<Worker> all;
    {
      std::lock_guard lock(mutex_);
      all.swap(workers_);
    }
    for (Worker& worker : all) {
      if (worker.thread.joinable()) worker.thread.join();
    }
  }

  /// Workers alive right now (retiring ones count until they return).
  [[nodiscard]] std::size_t worker_count() const {
    std::lock_guard lock(mutex_);
    return live_;
  }
  /// The size resize() last asked for.
  [[nodiscard]] std::size_t target() const {
    std::lock_guard lock(mutex_);
    return target_;
  }
  /// Workers running the handler right now (a snapshot).
  [[nodiscard]] std::size_t busy() const noexcept { return busy_.load(std::memory_order_relaxed); }
  /// Items waiting for a worker right now (a snapshot; nudges not counted).
  [[nodiscard]] std::size_t queued() const {
    const std::size_t slots = queue_.size();
    const std::size_t nudges = nudges_.load(std::memory_order_relaxed);
    return slots > nudges ? slots - nudges : 0;
  }
  /// The most items that ever waited at once.
  [[nodiscard]] std::size_t peak_queued() const { return queue_.peak_size(); }
  [[nodiscard]] std::size_t queue_capacity() const noexcept { return queue_.capacity(); }

 private:
  struct Worker {
    std::jthread thread;
    bool retired = false;  // guarded by the pool's mutex_
  };

  void work(Worker& self) {
    while (std::optional<std::optional<Item>> slot = queue_.pop()) {
      if (*slot) {
        busy_.fetch_add(1, std::memory_order_relaxed);
        try {
          handler_(std::move(**slot));
        } catch (const std::exception& e) {
          detail::log_handler_failure(e.what());
        } catch (...) {
          detail::log_handler_failure("an exception not derived from std::exception");
        }
        busy_.fetch_sub(1, std::memory_order_relaxed);
      } else {
        nudges_.fetch_sub(1, std::memory_order_relaxed);
      }
      std::lock_guard lock(mutex_);
      if (live_ > target_) {
        --live_;
        self.retired = true;  // reap() joins this thread later; it never touches self again
        return;
      }
    }
  }

  // Moves the threads of retired workers into `out` for joining outside the lock.
  // Called with mutex_ held.
  void reap(std::vector<std::jthread>& out) {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->retired) {
        out.push_back(std::move(it->thread));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  Handler handler_;
  OnStart on_start_;
  // An empty slot is a nudge: it wakes one idle worker to check whether it should retire.
  BoundedQueue<std::optional<Item>> queue_;
  std::atomic<std::size_t> busy_{0};
  std::atomic<std::size_t> nudges_{0};  // nudges in the queue, which queued() leaves out

  mutable std::mutex mutex_;  // guards workers_, live_, target_, closed_ and Worker::retired
  std::list<Worker> workers_;  // a list: each thread holds a reference to its own node
  std::size_t live_ = 0;
  std::size_t target_ = 0;
  bool closed_ = false;
};

}  // namespace proxy
