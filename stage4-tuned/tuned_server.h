// Stage 4's concurrency model, half-sync/half-async: one poller thread (the async half) owns
// an epoll set holding the listener and every idle client connection; a connection reaches the
// worker pool (the sync half, blocking I/O with deadlines) only once it is readable, and goes
// back to epoll after its response. A worker is never pinned to an idle keep-alive connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "elastic_pool.h"
#include "metrics.h"
#include "pool_sizer.h"
#include "proxy.h"
#include "server.h"

namespace proxy {

/// Stage 4's knobs beyond the shared ones. Times in milliseconds.
struct TunedConfig {
  std::size_t workers = 0;             ///< fixed pool size; 0 means auto
  bool workers_auto = true;            ///< size the pool at run time (PoolSizer)
  std::size_t min_workers = default_worker_count();  ///< bounds for auto: the cores, at least
  std::size_t max_workers = 64;
  Millis auto_interval{250};           ///< how often auto re-sizes
  std::size_t queue = 128;             ///< connections that may wait for a worker; then 503
  std::size_t max_connections = 10'000;  ///< open client connections; past it, 503 at accept
  Millis idle_timeout{5'000};          ///< a keep-alive connection silent this long is closed
  std::size_t cache_shards = 0;        ///< 0: as many as keep every object cacheable, at most 8
  /// CONNECT tunnels open at once; past it a CONNECT gets 503 + Retry-After. A tunnel holds a
  /// worker for its whole life, so this keeps tunnels from pinning the pool. 0: half the
  /// largest pool (max_workers, or workers when fixed), at least 1.
  std::size_t max_tunnels = 0;
};

/// Runs the accept loop, the epoll poller and the pool until the server's stop is requested,
/// then answers queued connections with 503, closes idle ones and joins the workers.
/// Thread-safety: construct and run() on one thread; metrics_text() from any thread.
class TunedServer {
 public:
  /// Throws std::system_error when epoll or an eventfd cannot be created.
  TunedServer(Server& server, const TunedConfig& config);
  ~TunedServer();
  TunedServer(const TunedServer&) = delete;
  TunedServer& operator=(const TunedServer&) = delete;

  /// The poller loop; returns after a stop, once every worker has returned.
  void run();
  /// The Prometheus text /metrics answers with.
  [[nodiscard]] std::string metrics_text() const;
  /// "workers=N (auto MIN..MAX) queue=N shed=N peak_queued=N" for the stats line.
  [[nodiscard]] std::string stats_text() const;

 private:
  // A connection and its place in the open-connection count: destroying it, anywhere, closes
  // the socket and gives the place back.
  struct Client {
    Client(ClientConnection c, std::atomic<std::size_t>& open) : connection(std::move(c)), open_(&open) {}
    Client(Client&& other) noexcept
        : connection(std::move(other.connection)),
          in_epoll(other.in_epoll),
          open_(std::exchange(other.open_, nullptr)) {}
    Client& operator=(Client&& other) noexcept {
      if (this != &other) {
        release_place();
        connection = std::move(other.connection);
        in_epoll = other.in_epoll;
        open_ = std::exchange(other.open_, nullptr);
      }
      return *this;
    }
    ~Client() { release_place(); }
    ClientConnection connection;
    bool in_epoll = false;  ///< registered with the poller's epoll set (armed or not)
   private:
    void release_place() noexcept {
      connection = ClientConnection(Socket());  // close first, then count it gone
      if (open_ != nullptr) open_->fetch_sub(1, std::memory_order_relaxed);
      open_ = nullptr;
    }
    std::atomic<std::size_t>* open_;
  };
  struct Idle {
    Client client;
    std::chrono::steady_clock::time_point since;
  };

  void serve(Client client);          // on a worker
  void accept_ready();                // on the poller
  void park(Client client);           // on the poller: wait in epoll for the next request
  void dispatch(int fd);              // on the poller: a parked connection became readable
  void submit(Client client);         // on the poller: to a worker, or shed with 503
  void take_returned();               // on the poller
  void close_idle(std::chrono::steady_clock::time_point now);
  void resize_pool(std::chrono::steady_clock::time_point now);
  void shed(Socket socket, const char* reason);

  Server& server_;
  TunedConfig config_;
  ProxyOptions options_;  // the server's, with keep_alive and metrics set
  int epoll_fd_ = -1;
  int wake_fd_ = -1;      // eventfd: a worker returned a connection
  LatencyHistogram latency_;
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> idle_count_{0};
  std::atomic<std::uint64_t> shed_{0};
  std::atomic<std::uint64_t> idle_closed_{0};
  std::atomic<bool> stopping_{false};

  // Poller-only state.
  std::vector<std::unique_ptr<Idle>> idle_;  // indexed by fd; null where none
  bool listening_paused_ = false;
  std::chrono::steady_clock::time_point resume_listening_;
  PoolSizer sizer_;
  std::chrono::steady_clock::time_point last_resize_;
  LatencyHistogram::Snapshot last_latency_;
  std::uint64_t last_shed_ = 0;

  std::mutex returned_mutex_;  // guards returned_
  std::vector<Client> returned_;  // connections workers finished with, still open

  ElasticPool<Client> pool_;  // last: its workers stop before the fields above go away
};

}  // namespace proxy
