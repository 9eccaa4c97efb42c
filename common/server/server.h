// What every stage's main() shares: the command-line contract, the listening socket with its
// "listening on HOST:PORT" line, the cache, shutdown and the final stats line. A stage's main()
// calls start_stage, runs its concurrency model on the Server's entry points (accept, serve)
// and returns server->finish().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "net/socket.h"
#include "server/allow_list.h"
#include "server/shutdown.h"
#include "transaction/proxy.h"

namespace CLI {
class App;
class Option;
}

namespace proxy {

/// Settings every stage accepts: the command-line contract in README.md.
struct ServerConfig {
  std::uint16_t port = 8080;
  std::string bind = "127.0.0.1";
  std::size_t cache_bytes = 1'049'000;      ///< CS:APP Proxy Lab's MAX_CACHE_SIZE
  std::size_t max_object_bytes = 102'400;   ///< CS:APP Proxy Lab's MAX_OBJECT_SIZE
  std::string cache_policy = "lru";
  ProxyOptions proxy;
  Millis shutdown_grace{3'000};             ///< in-flight work gets this long after SIGTERM
  std::vector<std::string> allow;           ///< --allow CIDR ranges; empty: every client
};

/// Adds the shared flags to `app`: [PORT] --port --bind --cache-bytes --max-object-bytes
/// --cache-policy and the timeouts (--client-timeout-ms, --connect-timeout-ms,
/// --origin-timeout-ms) and --allow CIDR (repeatable), and for methods and tunnels
/// --max-request-body-bytes, --connect-ports P,P (default 443), --tunnel-idle-timeout-ms.
void add_server_options(CLI::App& app, ServerConfig& config);

/// Adds the flag `name` (e.g. "--workers"), a count of threads, slots or connections from
/// `least` to `most` read into `value`, with `value`'s default shown in --help. For a stage's
/// own flags, so every stage words and checks them alike. Returns the option CLI11 made.
CLI::Option* add_count_option(CLI::App& app, const std::string& name, std::size_t& value,
                              const std::string& help, std::size_t least, std::size_t most);

/// Adds the flag `name` (e.g. "--client-timeout-ms"): whole milliseconds from `least` to
/// `most` read into `value`, with `value`'s default shown in --help. Returns the option.
CLI::Option* add_millis_option(CLI::App& app, const std::string& name, Millis& value,
                               const std::string& help, long least = 1, long most = 3'600'000);

/// A running proxy's shared state, and the entry points every stage uses: accept a client,
/// admit it (the --allow check), serve a connection or one request of it, finish.
/// Thread-safety: accept() from one thread; admit() and serve*() from any number of threads
/// when the cache is thread-safe.
class Server {
 public:
  /// Installs shutdown handling, builds the cache and listens. Throws std::runtime_error when
  /// it cannot listen. `cache` overrides make_cache (stages that wrap the cache for threads).
  Server(const ServerConfig& config, std::unique_ptr<Cache> cache);

  /// The next client, or nullopt once a stop was requested, or when the listener broke (logged
  /// once; finish() then returns 1).
  std::optional<Socket> accept();
  /// For a stage that waits on the listener itself (stage 4's epoll): the next pending client,
  /// without waiting, past admit() — a client outside --allow is answered 403 and closed
  /// here, and the next one taken. nullopt when none is pending, or
  /// when this process is out of descriptors or buffers: then `exhausted` is set, the
  /// connection stays in the backlog, and the caller should stop listening for a moment rather
  /// than spin. Sets TCP_NODELAY, as accept() does. Accept from one thread only. Throws
  /// std::runtime_error when the listener itself is broken.
  std::optional<Socket> try_accept(bool& exhausted);
  /// The access check: true when --allow admits this client's address (always, without
  /// --allow); otherwise answers it 403, closes it and returns false. Thread-safe (the list is
  /// read-only after construction). A stage with its own accept path (stage 4) calls this on
  /// each accepted client; serve() calls it itself.
  bool admit(Socket& client);
  /// True when --allow admits this client's address; admit() also answers a refused one.
  [[nodiscard]] bool admits(const Socket& client) const { return allow_.allows_peer(client); }
  /// Serves one client connection: admit(), then the shared transaction (serve_connection).
  /// Never throws: a transaction that throws (out of memory) closes its connection and logs
  /// one line, so the calling worker lives on.
  void serve(Socket client);
  /// Serves one request of a persistent connection (serve_request, for a stage that owns its
  /// connections between requests: stage 4); true when the connection stays open for another.
  /// Never throws: a transaction that throws closes the connection (false) and logs one line.
  bool serve_request(ClientConnection& connection);
  /// Prints the stats line, followed by `extra_stats` when not empty (a stage's own fields),
  /// and returns 0, main's exit status after a clean stop; returns 1 (no stats line) when the
  /// listener broke. Call once the stage's work is done, from the thread that accepts.
  int finish(const std::string& extra_stats = {});

  [[nodiscard]] Cache& cache() noexcept { return *cache_; }
  [[nodiscard]] ProxyStats& stats() noexcept { return stats_; }
  [[nodiscard]] Shutdown& shutdown() noexcept { return shutdown_; }
  [[nodiscard]] const ServerConfig& config() const noexcept { return config_; }
  /// The listening socket (non-blocking), for a stage that waits on it itself (stage 4's
  /// epoll). Accept from one thread only.
  [[nodiscard]] const Socket& listener() const noexcept { return listener_; }
  /// "HOST:PORT" actually bound (port 0 resolved).
  [[nodiscard]] std::string address() const { return local_address(listener_); }
  /// "stats: requests=N hits=N misses=N evictions=N bytes_cached=N errors=N tunnels=N"
  [[nodiscard]] std::string stats_line() const;

 private:
  ServerConfig config_;
  Shutdown shutdown_;
  std::unique_ptr<Cache> cache_;
  ProxyStats stats_;
  Socket listener_;
  AllowList allow_;  // filled in the constructor, read-only after: safe from every worker
  bool listener_failed_ = false;  // accept() and finish() only: the accepting thread's
};

/// What a stage tells start_stage about itself.
/// `wrap_cache` lets a stage wrap the policy's cache (a lock for threaded stages).
struct StageDefinition {
  std::string name;         ///< binary name, e.g. "stage1-sequential"
  std::string description;  ///< one line for --help
  std::function<void(CLI::App&)> add_options;  ///< the stage's own flags, if any
  std::function<std::unique_ptr<Cache>(std::unique_ptr<Cache>)> wrap_cache;
  /// When set, the cache is this function's, built from the parsed settings, replacing what
  /// make_cache + wrap_cache made (stage 4's sharded cache needs a flag of its own).
  std::function<std::unique_ptr<Cache>(const ServerConfig&)> build_cache;
  /// Only for run_stage: the stage's loop, and the stats it adds to the stats line.
  std::function<void(Server&)> run;
  std::function<std::string()> extra_stats;
};

/// A started stage: the running Server, or null with the status main() should return.
struct StageStart {
  std::unique_ptr<Server> server;
  int exit_code = 0;  ///< when server is null: 0 after --help, CLI11's code for bad flags,
                      ///< 1 when start-up failed (reported on stderr)
};

/// The start of a stage's main(): parses the shared flags plus those `stage.add_options` adds,
/// builds the cache, starts a Server and prints "listening on HOST:PORT" (flushed). The stage
/// then runs its concurrency model on the Server's entry points and returns server->finish().
StageStart start_stage(int argc, char** argv, const StageDefinition& stage);

/// start_stage, then `stage.run(server)` until it returns (once accept() yields nullopt and its
/// work is done), then finish(stage.extra_stats()). For a stage written around a run function.
int run_stage(int argc, char** argv, const StageDefinition& stage);

/// True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost).
bool is_loopback_bind(const std::string& address);

}  // namespace proxy
