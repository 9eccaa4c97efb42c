#include "server/server.h"

#include <CLI/CLI.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "cache/cache_factory.h"
#include "server/log.h"

namespace proxy {

void add_server_options(CLI::App& app, ServerConfig& config) {
  // A bare port keeps CS:APP Proxy Lab's `./proxy PORT` habit working.
  app.add_option("port", config.port, "Port to listen on (same as --port)");
  app.add_option("-p,--port", config.port, "Port to listen on; 0 picks a free one")
      ->capture_default_str();
  app.add_option("--bind", config.bind,
                 "Address to listen on. Anything but loopback makes this an open proxy")
      ->capture_default_str();
  // CLI11 would otherwise read "-1" into a size_t as 2^64 - 1: an unbounded cache.
  const CLI::Validator not_negative(
      [](std::string& value) {
        return value.find('-') == std::string::npos ? std::string() : "must not be negative";
      },
      "BYTES");
  app.add_option("--cache-bytes", config.cache_bytes, "Total cache size in bytes")
      ->check(not_negative)
      ->capture_default_str();
  app.add_option("--max-object-bytes", config.max_object_bytes,
                 "Largest cached object in bytes (URL + head + body)")
      ->check(not_negative)
      ->capture_default_str();
  app.add_option("--cache-policy", config.cache_policy, "Cache eviction policy")
      ->check(CLI::IsMember(cache_policy_names()))
      ->capture_default_str();
  add_millis_option(app, "--client-timeout-ms", config.proxy.client_timeout,
                    "Deadline for a client's request head, in ms (408 after it)");
  add_millis_option(app, "--connect-timeout-ms", config.proxy.connect_timeout,
                    "Deadline for connecting to the origin, in ms (504 after it)");
  add_millis_option(app, "--origin-timeout-ms", config.proxy.origin_timeout,
                    "Deadline for each read from the origin, in ms (504 before the first byte)");
  // Methods and tunnels (docs/using-the-proxy.md, "Methods, tunnels and response framing").
  app.add_option("--max-request-body-bytes", config.proxy.max_request_body,
                 "Largest request body forwarded, in bytes (413 past it). The first MiB is read "
                 "and checked before the origin is contacted; the rest is streamed")
      ->check(not_negative)
      ->capture_default_str();
  app.add_option_function<std::vector<std::string>>(
         "--connect-ports",
         [&config](const std::vector<std::string>& ports) {
           config.proxy.connect_ports.clear();
           for (const std::string& port : ports) {
             config.proxy.connect_ports.push_back(static_cast<std::uint16_t>(std::stoul(port)));
           }
         },
         "Ports a CONNECT tunnel may reach, comma-separated (others get 403)")
      ->delimiter(',')
      ->check(CLI::Range(1, 65535))
      ->default_str("443");
  add_millis_option(app, "--tunnel-idle-timeout-ms", config.proxy.tunnel_idle_timeout,
                    "A CONNECT tunnel with no byte either way for this long is closed, in ms. "
                    "Stages 1-3: a tunnel holds its thread (stage 1: the whole proxy) for its "
                    "whole life");
  app.add_option("--allow", config.allow,
                 "Serve only clients in this CIDR range (e.g. 10.0.0.0/8, ::1); repeatable. "
                 "Others get 403. Default: every client that can reach --bind")
      ->check(CLI::Validator(
          [](std::string& value) {
            try {
              AllowList().add(value);
              return std::string();
            } catch (const std::invalid_argument& e) {
              return std::string(e.what());
            }
          },
          "CIDR"))
      ->allow_extra_args(false)  // one range per --allow, so `--allow R 8080` keeps its port
      ->take_all();
  // RFC 9111 caching (http_cache_rules.h): how long a 200 without explicit freshness stays fresh.
  app.add_option_function<long>(
         "--heuristic-freshness-s",
         [&config](long s) { config.proxy.heuristic_freshness = std::chrono::seconds{s}; },
         "Longest heuristic freshness, in s, of a 200 without max-age/s-maxage/Expires "
         "(RFC 9111 4.2.2): 10% of Date - Last-Modified up to this, or this without "
         "Last-Modified. 0 stores only explicitly fresh responses")
      ->check(CLI::Range(0L, 31'536'000L))
      ->default_str(std::to_string(config.proxy.heuristic_freshness.count()));
}

CLI::Option* add_count_option(CLI::App& app, const std::string& name, std::size_t& value,
                              const std::string& help, std::size_t least, std::size_t most) {
  return app.add_option(name, value, help)->check(CLI::Range(least, most))->capture_default_str();
}

CLI::Option* add_millis_option(CLI::App& app, const std::string& name, Millis& value,
                               const std::string& help, long least, long most) {
  return app
      .add_option_function<long>(
          name, [&value](long ms) { value = Millis{ms}; }, help)
      ->check(CLI::Range(least, most))
      ->default_str(std::to_string(value.count()));
}

Server::Server(const ServerConfig& config, std::unique_ptr<Cache> cache)
    : config_(config),
      shutdown_(config.shutdown_grace),
      cache_(std::move(cache)),
      listener_(listen_tcp(config.bind, config.port)) {
  for (const std::string& range : config.allow) allow_.add(range);
}

std::optional<Socket> Server::accept() {
  try {
    return accept_client(listener_, shutdown_.stop_fd());
  } catch (const std::exception& e) {
    // The listener itself is broken: no client will come. The stage winds down as after a
    // stop, and finish() reports the failure.
    log_line(std::string("error: ") + e.what());
    listener_failed_ = true;
    return std::nullopt;
  }
}

bool Server::admit(Socket& client) {
  if (admits(client)) return true;
  reply_forbidden(std::move(client), stats_);
  return false;
}

std::optional<Socket> Server::try_accept(bool& exhausted) {
  exhausted = false;
  for (;;) {
    const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      switch (errno) {
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
          continue;
        case EAGAIN:
          return std::nullopt;
        case EMFILE:
        case ENFILE:
        case ENOBUFS:
        case ENOMEM:
          exhausted = true;
          return std::nullopt;
        default:
          throw std::runtime_error(std::string("accept: ") + std::strerror(errno));
      }
    }
    Socket client(fd);
    // --allow is judged at accept, before a byte of the request is read (an open proxy is an
    // open relay). The 403 is a few bytes into an empty send buffer.
    if (!admit(client)) continue;
    set_int_option(client, IPPROTO_TCP, TCP_NODELAY, 1);
    return client;
  }
}

void Server::serve(Socket client) {
  if (!admit(client)) return;
  try {
    serve_connection(std::move(client), *cache_, config_.proxy, stats_);
  } catch (const std::exception& e) {
    // serve_connection throws only when memory runs out. The client's socket closed as the
    // stack unwound; the worker (stage 1: the accept loop) lives on to serve the next one.
    log_line(std::string("transaction failed, connection closed: ") + e.what());
  }
}

bool Server::serve_request(ClientConnection& connection) {
  try {
    return proxy::serve_request(connection, *cache_, config_.proxy, stats_);
  } catch (const std::exception& e) {
    static_cast<void>(connection.release());  // closes it: the request's state is lost
    log_line(std::string("transaction failed, connection closed: ") + e.what());
    return false;
  }
}

int Server::finish(const std::string& extra_stats) {
  if (listener_failed_) return 1;
  std::string line = stats_line();
  if (!extra_stats.empty()) line += " " + extra_stats;
  std::cout << line << std::endl;
  return 0;
}

std::string Server::stats_line() const {
  CacheStats cache = cache_->stats();
  return "stats: requests=" + std::to_string(stats_.requests.load()) +
         " hits=" + std::to_string(cache.hits) + " misses=" + std::to_string(cache.misses) +
         " evictions=" + std::to_string(cache.evictions) +
         " bytes_cached=" + std::to_string(cache.bytes) +
         " errors=" + std::to_string(stats_.errors.load()) +
         " tunnels=" + std::to_string(stats_.tunnels.load());
}

StageStart start_stage(int argc, char** argv, const StageDefinition& stage) {
  ServerConfig config;
  CLI::App app{stage.description, stage.name};
  add_server_options(app, config);
  if (stage.add_options) stage.add_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return {nullptr, app.exit(e)};  // --help prints and is 0; a bad flag names itself
  }
  set_log_prefix(stage.name);
  config.proxy.via_name = stage.name;
  try {
    std::unique_ptr<Cache> cache =
        make_cache(config.cache_policy, config.cache_bytes, config.max_object_bytes);
    if (stage.wrap_cache) cache = stage.wrap_cache(std::move(cache));
    if (stage.build_cache) cache = stage.build_cache(config);
    auto server = std::make_unique<Server>(config, std::move(cache));
    if (!is_loopback_bind(config.bind)) {
      log_line("warning: listening on " + config.bind +
               " — anyone who can reach it can use this proxy as an open relay" +
               (config.allow.empty() ? std::string("; --allow CIDR limits who may")
                                     : std::string("; --allow limits who is served")));
    }
    std::cout << "listening on " << server->address() << std::endl;  // endl flushes: tests wait
    return {std::move(server), 0};
  } catch (const std::exception& e) {
    log_line(std::string("error: ") + e.what());
    return {nullptr, 1};
  }
}

int run_stage(int argc, char** argv, const StageDefinition& stage) {
  StageStart start = start_stage(argc, argv, stage);
  if (!start.server) return start.exit_code;
  try {
    stage.run(*start.server);
  } catch (const std::exception& e) {
    log_line(std::string("error: ") + e.what());
    return 1;
  }
  return start.server->finish(stage.extra_stats ? stage.extra_stats() : std::string());
}

bool is_loopback_bind(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

}  // namespace proxy
