// Stage 2: one thread per connection. The accept loop hands each client to a new thread and goes
// straight back to accepting, so a slow origin stalls only its own client. The price: a thread
// created and torn down for every connection, however cheap its transaction, and no bound on
// how many run at once — stage 3's pool fixes both.
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "cache/locked_cache.h"
#include "server/lab_stub.h"
#include "server/log.h"
#include "server/overload.h"
#include "server/server.h"

namespace {

using proxy::Millis;

/// The connection threads still running, and the most that ever ran at once.
/// Shared through a shared_ptr by the accept loop and every connection thread: a detached
/// thread's last touch, end(), may come after run_thread_per_connection() has returned.
/// Thread-safety: every member may be called from any thread.
class LiveThreads {
 public:
  /// Counts a thread about to be started.
  void begin() {
    std::lock_guard lock(mutex_);
    ++live_;
    if (live_ > peak_) peak_ = live_;
  }
  /// Counts a thread that has finished with the Server (or never started).
  void end() noexcept {
    bool none_left;
    {
      std::lock_guard lock(mutex_);
      none_left = --live_ == 0;
    }
    if (none_left) none_live_.notify_all();
  }
  /// Waits at most `timeout` for every counted thread to end. Returns how many are still live.
  std::size_t wait_for_none(Millis timeout) {
    std::unique_lock lock(mutex_);
    none_live_.wait_for(lock, timeout, [&] { return live_ == 0; });
    return live_;
  }
  /// The most threads that were live at once.
  [[nodiscard]] std::size_t peak() const {
    std::lock_guard lock(mutex_);
    return peak_;
  }

 private:
  mutable std::mutex mutex_;  // guards live_, peak_
  std::size_t live_ = 0;
  std::size_t peak_ = 0;
  std::condition_variable none_live_;  // notified when live_ drops to 0
};

// LAB(2) BEGIN run_thread_per_connection
// The body of every connection thread. It adopts `client`, which the accept loop allocated.
void serve_connection_thread(proxy::Server& server, proxy::Socket* client, LiveThreads& live) {
  std::unique_ptr<proxy::Socket> owned(client);
  try {
    server.serve(std::move(*owned));
  } catch (const std::exception& e) {
    // An exception escaping a thread's function is std::terminate for the whole process.
    proxy::log_line(std::string("connection thread: transaction failed: ") + e.what());
  }
  live.end();  // last: at 0, run_thread_per_connection() may return and the Server go away
}

// Accepts until a stop is requested, starting one thread per client; then waits, bounded, for
// the live ones, because the Server they use is destroyed once this function returns.
void run_thread_per_connection(proxy::Server& server, const std::shared_ptr<LiveThreads>& live) {
  while (std::optional<proxy::Socket> accepted = server.accept()) {
    // std::thread moves its arguments into the new thread's state before it knows whether the
    // thread can start, and destroys them if it cannot. So the socket crosses as a pointer and
    // `client` owns it until the thread exists; the 503 below needs it back.
    auto client = std::make_unique<proxy::Socket>(std::move(*accepted));
    live->begin();
    std::thread thread;
    try {
      // The thread holds its own share of `live`: the count must outlive this function while the
      // thread still needs it.
      thread = std::thread([&server, socket = client.get(), live] {
        serve_connection_thread(server, socket, *live);
      });
    } catch (const std::exception& e) {
      // EAGAIN (std::system_error) at a thread or memory limit, or std::bad_alloc for the
      // thread's state: refuse this client, keep accepting.
      live->end();
      proxy::reply_overloaded(std::move(*client), server.stats(), "cannot start a thread",
                              e.what());
      continue;
    }
    static_cast<void>(client.release());  // the new thread owns it now
    // Detached: nobody ever waits for one particular connection, and a joinable handle per
    // connection would pile up; `live` counts them instead, so shutdown can wait for all.
    thread.detach();
  }
  // After the grace period, Shutdown cuts their I/O and they end at once; the extra second is
  // for them to get there, well inside the 5 s every stage promises.
  const Millis bound = server.config().shutdown_grace + Millis{1'000};
  if (std::size_t left = live->wait_for_none(bound); left > 0) {
    proxy::log_line(std::to_string(left) + " connection threads still running " +
                    std::to_string(bound.count()) + " ms after the stop; exiting without them");
  }
}
// LAB(2) STUB
// // Accepts until a stop is requested, starting one thread per client, then waits (bounded) for
// // the live ones; see labs/lab2-per-thread/README.md.
// void run_thread_per_connection(proxy::Server& server, const std::shared_ptr<LiveThreads>& live) {
//   (void)server;
//   (void)live;
//   proxy::todo_student("TODO(student) lab 2: run_thread_per_connection (stage2-per-thread/main.cpp)");
// }
// LAB(2) END

}  // namespace

int main(int argc, char** argv) {
  auto live = std::make_shared<LiveThreads>();
  proxy::StageDefinition stage;
  stage.name = "stage2-per-thread";
  stage.description =
      "stage2-per-thread: a caching HTTP forward proxy that serves each client on a thread of "
      "its own";
  stage.wrap_cache = [](std::unique_ptr<proxy::Cache> cache) -> std::unique_ptr<proxy::Cache> {
    return std::make_unique<proxy::LockedCache>(std::move(cache));
  };
  auto [server, exit_code] = proxy::start_stage(argc, argv, stage);
  if (!server) return exit_code;
  run_thread_per_connection(*server, live);
  return server->finish("peak_threads=" + std::to_string(live->peak()));
}
