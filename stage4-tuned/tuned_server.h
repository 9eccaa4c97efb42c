// Stage 4's concurrency model, half-sync/half-async: one poller thread (the async half) owns
// an epoll set holding the listener and every client connection between requests, and reads
// each request head itself, without blocking; a connection reaches the worker pool (the sync
// half, blocking I/O with deadlines) only once a whole request head has arrived, and goes back
// to epoll after its response. A worker is never pinned to an idle keep-alive connection nor to
// a client that trickles its head (the poller answers that one 408 itself).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "elastic_pool.h"
#include "machine_limits.h"
#include "mailbox.h"
#include "metrics.h"
#include "origin_gates.h"
#include "poller/origin_pool.h"
#include "pool_sizer.h"
#include "queue_delay.h"
#include "server/server.h"
#include "transaction/proxy.h"
#include "tunnel_relay.h"

namespace proxy {

/// epoll_ctl(2) on the poller's epoll set, `events` registered for `fd` with `fd` as its data.
/// Throws std::system_error on failure: for the listener and the poller's own fds, which it
/// cannot run without (a client's registration uses its own call, whose failure costs only it).
void epoll_control(int epoll_fd, int op, int fd, std::uint32_t events);

/// Stage 4's knobs beyond the shared ones. Times in milliseconds.
struct TunedConfig {
  std::size_t workers = 0;             ///< fixed pool size; 0 means auto
  bool workers_auto = true;            ///< size the pool at run time (PoolSizer)
  std::size_t min_workers = default_worker_count();  ///< auto's lower bound: the cores (at least 1)
  std::size_t max_workers = default_max_workers();  ///< see default_max_workers()
  Millis auto_interval{250};           ///< how often auto re-sizes
  /// Requests that may wait for a worker at once, a bound on memory; past it, 503 at once.
  std::size_t queue = 4096;
  /// CoDel (queue_delay.h): queueing delay tolerated indefinitely...
  Millis shed_delay{20};
  /// ...and how long it must stand above that before requests are refused with 503.
  Millis shed_interval{500};
  std::size_t max_connections = 10'000;  ///< open client connections; past it, 503 at accept
  Millis idle_timeout{5'000};          ///< a keep-alive connection silent this long is closed
  std::size_t cache_shards = 0;        ///< 0: as many as keep every object cacheable, at most 8
  /// CONNECT tunnels open at once; past it a CONNECT gets 503 + Retry-After. Each costs two
  /// descriptors and its relay buffers (not a worker). 0: half of max_connections.
  std::size_t max_tunnels = 0;
  /// Run the workers under SCHED_BATCH: a worker woken by its origin's answer waits for the
  /// running thread's slice instead of preempting it (machine_limits.h,
  /// prepare_worker_thread); a policy chosen with chrt(1) is kept either way. False leaves them
  /// the policy they inherit (SCHED_OTHER unless started under chrt), as stage 3's.
  bool batch_workers = true;
  /// Send a plain GET miss whose origin has a kept connection from the poller, and relay an
  /// answer that arrives whole there (start_miss_now, proxy.h): no worker waits on the origin.
  /// False serves every miss on a worker.
  bool poller_misses = true;
  /// Keep origin connections open between requests (ProxyOptions::origin_pool), within
  /// `origin_limits`; false sends every request on a new connection, as stages 1-3 do.
  bool origin_reuse = true;
  /// Idle origin connections kept: per origin, in all, and for how long. Each worker holds at
  /// most one origin connection at a time, so keeping as many per origin as workers can be busy
  /// lets a steady load to one origin run without a connect per request.
  OriginPoolLimits origin_limits{256, 1024, Millis{4'000}};
  /// A concurrency limit toward each origin (origin_gates.h): adaptive by default, so a
  /// downstream that collapses when oversubscribed is sent what it serves best; a number fixes
  /// every origin's limit; off sends whatever the clients ask (every miss at once).
  bool origin_limit = true;
  std::size_t origin_limit_fixed = 0;  ///< > 0: that limit, not adapted
  ConcurrencyLimitOptions origin_limit_options{};
  /// A request waiting for its origin's limit may wait this long without the origin's queue
  /// counting as standing; past it for --shed-interval-ms, that origin's newcomers get 503.
  Millis origin_queue_delay{5'000};
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
  /// "workers=N (auto MIN..MAX) queue=N shed=N peak_queued=N max_tunnels=N" for the stats line.
  [[nodiscard]] std::string stats_text() const;

 private:
  // A miss the poller sent and waits on without a thread (start_miss_now, proxy.h): its origin
  // connection and request, and how far the origin's answer has come — what the origin timeout
  // and the hand-off of a slow body run from. A worker that gets its connection goes on with it
  // (finish_miss).
  struct PollerMiss {
    PendingMiss in_flight;  // null: no miss
    std::chrono::steady_clock::time_point sent{};  // its request went out; its duration runs from it
    // The origin's last byte, or `sent`: the origin timeout runs from it.
    std::chrono::steady_clock::time_point last_byte{};
    // receiving_body: when the answer's head was all here (a body still arriving a tick later
    // goes to a worker, which relays it as it comes).
    std::chrono::steady_clock::time_point head_whole{};

    explicit operator bool() const noexcept { return in_flight != nullptr; }
    // Reads what the origin has sent, never waiting (read_miss_now), and notes when a byte came.
    MissRead read() {
      bool progressed = false;
      const MissRead found = read_miss_now(*in_flight, progressed);
      if (progressed) last_byte = std::chrono::steady_clock::now();
      return found;
    }
    // What is left of `timeout` (--origin-timeout-ms) at `now` since the origin's last byte.
    [[nodiscard]] Millis wait_left(std::chrono::steady_clock::time_point now, Millis timeout) const {
      return timeout - std::chrono::duration_cast<Millis>(now - last_byte);
    }
  };
  // A connection and its place in the open-connection count: destroying it, anywhere, closes
  // the socket and gives the place back.
  struct Client {
    Client(ClientConnection c, std::atomic<std::size_t>& open) : connection(std::move(c)), open_(&open) {}
    Client(Client&& other) noexcept
        : connection(std::move(other.connection)),
          in_epoll(other.in_epoll),
          miss(std::move(other.miss)),
          permit(std::move(other.permit)),
          open_(std::exchange(other.open_, nullptr)) {}
    Client& operator=(Client&& other) noexcept {
      if (this != &other) {
        release_place();
        connection = std::move(other.connection);
        in_epoll = other.in_epoll;
        miss = std::move(other.miss);
        permit = std::move(other.permit);
        open_ = std::exchange(other.open_, nullptr);
      }
      return *this;
    }
    ~Client() { release_place(); }
    ClientConnection connection;
    bool in_epoll = false;  ///< registered with the poller's epoll set (armed or not)
    PollerMiss miss;  // a miss the poller sent; a worker that gets the connection goes on with it
    /// The request's place in its origin's limit (origin_gates.h), from admission until its
    /// answer is relayed; empty for hits, CONNECT and the proxy's own /metrics.
    OriginPermit permit;

   private:
    void release_place() noexcept {
      connection = ClientConnection(Socket());  // close first, then count it gone
      if (open_ != nullptr) open_->fetch_sub(1, std::memory_order_relaxed);
      open_ = nullptr;
    }
    std::atomic<std::size_t>* open_;
  };
  // What a connection the poller holds waits for. Each state has its own deadline, and only
  // the poller reads or sets it: where the connection goes back to epoll (client_wait), joins
  // its origin's queue (admit), sends a miss (start_miss), or its origin's answer head arrives.
  enum class ParkedState {
    idle,              // between requests, no byte of the next one yet (--idle-timeout-ms)
    reading_head,      // part of a request head here (--client-timeout-ms, then 408)
    sending_response,  // a response the socket did not take whole, sent as the client reads it
    awaiting_permit,   // a whole head in its origin's queue (origin_queues_, admit_waiting)
    awaiting_origin,   // a poller miss sent, its answer's head not here yet (--origin-timeout-ms)
    receiving_body,    // that answer's head here, its body not whole: a worker takes it a tick on
  };
  // A client connection the poller holds, registered in its epoll set and holding no worker:
  // between requests, reading a request head (`head` holds what has arrived of it, and
  // classify's verdict once it is whole), sending the rest of a response, or with a request the
  // poller serves itself that waits for its origin's limit or its origin's answer (`state` says
  // which).
  struct Parked {
    Client client;
    // Parked at, or its last response (the idle timeout runs from it), or the client's last
    // progress reading one (sending_response: the write timeout runs from it).
    std::chrono::steady_clock::time_point since;
    HeadReader head;  // admission.h; the client timeout runs from its first byte
    // awaiting_permit: since when its request waits for its origin's limit (origin_queues_).
    std::chrono::steady_clock::time_point waiting_since{};
    ParkedState state = ParkedState::idle;  // what it waits for: all the poller branches on
  };
  // The requests waiting for one origin's limit, oldest first (descriptors into parked_), and
  // that queue's own CoDel: a collapsing origin's standing queue sheds its own newcomers, never
  // another origin's.
  struct OriginQueue {
    std::shared_ptr<OriginGate> gate;
    std::deque<int> waiting;
    QueueDelayShedder shedder;
  };
  enum class Admission { go, wait, shed };
  // A connection with a whole request head, waiting for a worker.
  struct Job {
    Client client;
    std::chrono::steady_clock::time_point queued_at;
  };
  using HeadState = HeadReader::Status;
  // The poller does its housekeeping (timeouts, sizing, the shedder) at least this often, in ms.
  static constexpr int kTickMs = 50;

  void serve(Job job);                // on a worker
  // ProxyOptions::keep_abandoned's target: parks, on the worker's thread, the origin connection
  // of a request whose client hung up, until serve() hands it to the poller with its permit.
  static void hold_abandoned_origin(Socket origin);
  void wake_poller() noexcept;        // from any thread: the poller takes its mailboxes
  void accept_ready();                // on the poller
  void park(Client client);           // on the poller: wait in epoll for the next request
  void readable(int fd);              // on the poller: bytes (or an end) on a parked connection
  // Misses without a worker (step 12), on the poller.
  bool start_miss(Parked& parked, int fd);    // true: sent, and it waits on its origin
  void origin_readable(int origin_fd);        // its origin's answer, or part of it
  void stop_watching_origin(Parked& parked);  // before the miss leaves the poller
  // Permits held until the origin answers (origin_admission.cpp). The client of a poller miss
  // hung up: the request is dropped, but while the origin is still serving it, it still counts
  // against the origin's limit.
  void abandon_miss(Parked& parked, int fd);
  void orphan_readable(int origin_fd);    // an abandoned request's origin answered (some of it)
  // On a worker: its request's origin connection, dropped because the client hung up, goes to
  // the poller with the permit (`origin` invalid: nothing to wait for, the permit goes back).
  void keep_permit_until_answered(Socket origin, OriginPermit permit);
  void adopt_orphans();                   // on the poller: what workers handed over
  void time_out_orphans(std::chrono::steady_clock::time_point now);
  void free_slot(int fd);                 // the connection is a worker's now, or closed
  // What a connection with no request in the poller's hands waits for in epoll: the client to
  // read the rest of a response, the rest of a head, or a next request.
  static ParkedState client_wait(const Parked& parked) noexcept;
  HeadState answer_hit(Parked& parked);   // on the poller: a hit, answered without a worker
  HeadState send_unsent(Parked& parked);  // on the poller: the rest of a response, when writable
  void dispatch(Parked& parked);          // on the poller: a whole head is here, to a worker
  // The origin's limit (origin_gates.h), on the poller: go holds a permit (or needs none).
  Admission admit(Parked& parked, int fd);
  // After admission: a poller miss, a worker, a close, or back to epoll.
  void go_on(Parked& parked, int fd, HeadState next);
  void admit_waiting(std::chrono::steady_clock::time_point now);
  void take_returned();               // on the poller
  void housekeeping(std::chrono::steady_clock::time_point now);
  // On the poller, once a tick: each parked connection's deadline, by its state
  // (poller_timeouts.cpp).
  void sweep_timeouts(std::chrono::steady_clock::time_point now);
  // The sweep's handlers, one per state with a deadline: each deals with a connection whose
  // deadline has passed at `now` (closes it, answers 408, or hands its miss to a worker) and
  // returns true, its slot to be freed; false leaves it parked.
  bool time_out_idle(Parked& parked, std::chrono::steady_clock::time_point now);
  bool time_out_head(Parked& parked, std::chrono::steady_clock::time_point now);  // 408, then close
  bool time_out_send(Parked& parked, std::chrono::steady_clock::time_point now);
  bool time_out_origin(Parked& parked, std::chrono::steady_clock::time_point now);
  bool time_out_body(Parked& parked, std::chrono::steady_clock::time_point now);
  void resize_pool(std::chrono::steady_clock::time_point now, bool urgent);
  // Load shedding by queueing delay (load_shedding.cpp, lab 4's hand-in; CoDel, queue_delay.h).
  void submit(Client client);         // on the poller: to a worker, or shed with 503
  bool enqueue(Client& client);       // on the poller: false (client untouched) when full
  void shed(Socket socket, const char* reason);  // poller or worker: a 503 now, counted in shed_
  // How long, in seconds, the job queued longest has waited at `now` (0: none). Any thread.
  [[nodiscard]] double oldest_wait(std::chrono::steady_clock::time_point now) const;
  // On the poller: feeds the shedder the queueing delay now (returned) and publishes its
  // verdict in queue_standing_.
  double observe_queue(std::chrono::steady_clock::time_point now);
  // On a worker, first thing with each job: takes its note off the queue; false when the job
  // was shed instead, having waited past --shed-delay-ms while the queue stood.
  bool leave_queue(Job& job);

  Server& server_;
  TunedConfig config_;
  ProxyOptions options_;  // the server's, with keep_alive and metrics set
  int epoll_fd_ = -1;
  int wake_fd_ = -1;      // eventfd: a worker posted to a mailbox, or a permit came back
  LatencyHistogram latency_;  // every request, hits on the poller included (/metrics)
  // The requests workers served, and their service time: what the pool's sizing sees. Hits on
  // the poller hold no worker, and their microseconds would pass for the pool's unloaded latency.
  std::atomic<std::uint64_t> worker_requests_{0};
  std::atomic<std::uint64_t> worker_nanoseconds_{0};
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> parked_count_{0};
  std::atomic<std::uint64_t> shed_{0};
  std::atomic<std::uint64_t> idle_closed_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> queue_standing_{false};  // the shedder's verdict, for the workers
  std::atomic<std::uint64_t> head_timeouts_{0};
  std::atomic<std::uint64_t> poller_misses_{0};  // misses the poller relayed whole
  std::atomic<std::size_t> misses_waiting_{0};   // poller misses waiting on their origin now

  // Before every Client: a permit gives itself back to it.
  OriginGates gates_;

  // Poller-only state.
  std::vector<std::unique_ptr<Parked>> parked_;  // indexed by fd; null where none
  std::unordered_map<const OriginGate*, OriginQueue> origin_queues_;
  std::vector<int> origin_owner_;  // indexed by an origin's fd: its miss's client fd, or -1
  // A request whose client hung up while its origin was still serving it, keyed by the origin
  // connection's fd: its answer is read and thrown away, and its permit is given back only when
  // the origin is done (or timed out, from miss.last_byte). Giving it back at the hang-up would
  // let one more request in while the origin still serves this one — past the limit, as counted
  // at the origin. A poller miss keeps its `miss` and is done when its answer is whole; a
  // worker's request (its connection handed over by ProxyOptions::keep_abandoned) has only its
  // `socket`, and is done at the origin's first byte or close: the origin has finished serving
  // it by then.
  struct Orphan {
    PollerMiss miss;
    Socket socket;
    OriginPermit permit;
  };
  std::unordered_map<int, Orphan> orphans_;
  bool listening_paused_ = false;
  std::chrono::steady_clock::time_point resume_listening_;
  PoolSizer sizer_;
  QueueDelayShedder shedder_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_resize_;
  std::chrono::steady_clock::time_point last_tick_;
  std::uint64_t last_worker_requests_ = 0;
  std::uint64_t last_worker_nanoseconds_ = 0;
  std::uint64_t last_shed_ = 0;
  double busy_sum_ = 0;      // pool_.busy() summed over the ticks since the last resize
  std::size_t busy_ticks_ = 0;
  std::chrono::steady_clock::time_point next_408_log_;
  std::uint64_t unlogged_408_ = 0;

  mutable std::mutex waiting_mutex_;  // guards waiting_
  // When each queued job was queued, oldest first: the front's age is the queueing delay.
  std::deque<std::chrono::steady_clock::time_point> waiting_;

  // From the workers to the poller; each post is followed by wake_poller().
  Mailbox<Client> returned_;        // connections workers finished with, still open
  Mailbox<Orphan> handed_orphans_;  // worker requests whose clients hung up (keep_abandoned)

  std::optional<OriginPool> origin_pool_;  // before pool_: the workers use it
  TunnelRelay tunnels_;  // before pool_: workers hand tunnels to it until they are joined
  ElasticPool<Job> pool_;  // last: its workers stop before the fields above go away
};

}  // namespace proxy
