// sizing-sim's core: closed-loop clients, a proxy whose concurrency toward one origin a
// controller sets, and an origin following one of harness/downstream.h's overload laws, replayed
// in virtual time — a discrete-event simulation (a priority queue of events; no threads, no
// sleeping, no clock), so a 30-second run takes milliseconds and the same seed gives the same
// numbers on any machine. tools/sizing_sim.cpp is its command line; the unit tests
// (tests/unit/sizing_sim_test.cpp) call simulate() directly, which is why it lives in a header.
//
// One request's life: the client sends it; the proxy sends it on to the origin when fewer than
// limit() are in flight there, else it waits in the proxy's FIFO queue; the origin serves it in
// the time service_for() gives for the number in service when it starts; the client gets the
// answer and sends again (after --think-ms).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "concurrency_limit.h"
#include "downstream.h"

namespace sizing {

/// One run's world.
struct SimOptions {
  int clients = 200;            ///< closed-loop clients, one request out each
  std::uint64_t delay_ms = 20;  ///< the origin's base delay per request, ms
  int capacity = 32;            ///< the origin's capacity K (> 0)
  harness::Overload overload = harness::Overload::thrash;  ///< what the origin does past K
  double seconds = 30;                                     ///< virtual time simulated, s
  double think_ms = 0;          ///< a client's pause between an answer and its next request, ms
  double queue_timeout_ms = 0;  ///< a request waiting longer for the limit gets a 503; 0: never
  std::uint64_t seed = 1;       ///< seeds the clients' staggered start and the slow requests
};

/// What one controller achieved in one run.
struct SimResult {
  std::string controller;       ///< its name, as --controller takes it ("fixed:32", "stage4")
  double good_per_second = 0;   ///< good answers per virtual second
  std::uint64_t good = 0;       ///< good answers
  std::uint64_t failed = 0;     ///< 503s from the origin (the fail law)
  std::uint64_t shed = 0;       ///< 503s from the proxy's queue timeout
  double p50_ms = 0;            ///< median latency of good answers as the client sees it, ms
  double p99_ms = 0;            ///< 99th percentile of the same (proxy queue + origin), ms
  double mean_limit = 0;        ///< the limit, time-weighted over the run
  std::size_t final_limit = 0;  ///< the limit at the end
  bool operator==(const SimResult&) const = default;
};

/// What happened since a controller's last update, as the proxy sees it. The latency of a
/// request is the origin's as the proxy measures it: from sending it on to the answer.
struct Window {
  double seconds = 0;       ///< the window's length, s
  std::size_t answers = 0;  ///< good answers from the origin
  std::size_t drops = 0;    ///< 503s from the origin
  double rtt_sum = 0;       ///< total latency of the good answers, s
  double rtt_min = 0;       ///< the shortest of them, s (0 without answers)
  double rtt_max = 0;       ///< the longest of them, s
  bool saturated = false;   ///< a request waited for the limit, or as many were in flight
};

/// A concurrency controller: the limit the proxy enforces toward the origin. Owned and called
/// by one simulation.
class Controller {
 public:
  virtual ~Controller() = default;
  /// Requests allowed in flight to the origin now (at least 1).
  [[nodiscard]] virtual std::size_t limit() const = 0;
  /// Seconds between update() calls; 0: never updated.
  [[nodiscard]] virtual double interval() const { return 0.25; }
  /// A request sent on at `sent` was answered at `answered` (virtual s); `failed`: a 503.
  virtual void on_answer(double /*sent*/, double /*answered*/, bool /*failed*/) {}
  /// Judges the window that ends at `now` (virtual s).
  virtual void update(double /*now*/, const Window& /*window*/) {}
};

/// A fixed pool of N workers: the limit never moves.
class FixedLimit : public Controller {
 public:
  explicit FixedLimit(std::size_t n) : n_(std::max<std::size_t>(1, n)) {}
  [[nodiscard]] std::size_t limit() const override { return n_; }
  [[nodiscard]] double interval() const override { return 0; }

 private:
  std::size_t n_;
};

/// The adaptive controllers' common range: all start at stage 4's initial limit.
class AdaptiveLimit : public Controller {
 public:
  [[nodiscard]] std::size_t limit() const override {
    return std::max<std::size_t>(1, static_cast<std::size_t>(limit_));
  }

 protected:
  static constexpr double kMin = 2, kMax = 1024;
  void set(double limit) { limit_ = std::clamp(limit, kMin, kMax); }
  double limit_ = 20;
  double min_rtt_ = 0;  // the lowest latency seen, s
  void note_min(const Window& w) {
    if (w.answers > 0 && (min_rtt_ == 0 || w.rtt_min < min_rtt_)) min_rtt_ = w.rtt_min;
  }
};

/// L = λ·W each window, with a quarter's headroom. W is what grows as a thrashing origin slows,
/// so the limit follows the load up instead of holding it back: positive feedback.
class LittlesLimit : public AdaptiveLimit {
 public:
  void update(double, const Window& w) override {
    if (w.answers == 0 || w.seconds <= 0) return;
    const double rate = static_cast<double>(w.answers) / w.seconds;
    const double wait = w.rtt_sum / static_cast<double>(w.answers);
    set(rate * wait / 0.75);
  }
};

/// Additive increase, multiplicative decrease (Netflix's AIMDLimit, per window): +1 while
/// saturated and fast, ×0.9 once a request took twice the lowest latency or failed.
class AimdLimit : public AdaptiveLimit {
 public:
  void update(double, const Window& w) override {
    note_min(w);
    if (w.drops > 0 || (w.answers > 0 && w.rtt_max > 2 * min_rtt_)) {
      set(limit_ * 0.9);
    } else if (w.saturated) {
      set(limit_ + 1);
    }
  }
};

/// TCP Vegas (Netflix's VegasLimit, steps of one): the requests queued downstream are
/// limit × (1 − minRTT/RTT); keep them between 3·log10(limit) and 6·log10(limit).
class VegasLimit : public AdaptiveLimit {
 public:
  void update(double, const Window& w) override {
    note_min(w);
    if (w.drops > 0) {
      set(limit_ - 1);
      return;
    }
    if (w.answers == 0) return;
    const double rtt = w.rtt_sum / static_cast<double>(w.answers);
    const double queued = limit_ * (1 - min_rtt_ / rtt);
    const double log_limit = std::log10(limit_);
    if (queued > 6 * log_limit) {
      set(limit_ - 1);
    } else if (queued < 3 * log_limit && w.saturated) {
      set(limit_ + 1);
    }
  }
};

/// Netflix's Gradient2Limit with its defaults (tolerance 1.5, a 600-sample long average,
/// smoothing 0.2, a queue of sqrt(limit)); only its minimum of 20 is ours (2), like the others'.
class GradientLimit : public AdaptiveLimit {
 public:
  void on_answer(double sent, double answered, bool failed) override {
    if (failed) return;
    const double rtt = answered - sent;
    // The library's exponential average: a plain mean over the first 10 samples.
    ++samples_;
    const double factor = samples_ <= 10 ? 1.0 / static_cast<double>(samples_) : 2.0 / 601;
    long_rtt_ += (rtt - long_rtt_) * factor;
  }
  void update(double, const Window& w) override {
    if (w.answers == 0) return;
    const double short_rtt = w.rtt_sum / static_cast<double>(w.answers);
    // A long average far above the present lets the limit grow for minutes: pull it down.
    if (long_rtt_ / short_rtt > 2) long_rtt_ *= 0.95;
    if (!w.saturated) return;  // the library skips an app-limited window
    const double gradient = std::clamp(1.5 * long_rtt_ / short_rtt, 0.5, 1.0);
    const double next = limit_ * gradient + std::sqrt(limit_);
    set(limit_ * 0.8 + next * 0.2);
  }

 private:
  double long_rtt_ = 0;
  std::uint64_t samples_ = 0;
};

/// proxy::ConcurrencyLimit fed the way stage 4's OriginGates feeds it: a sample per good answer,
/// a drop per 503, an update every 50 ms.
class Stage4Limit : public Controller {
 public:
  [[nodiscard]] std::size_t limit() const override { return limit_.limit(); }
  [[nodiscard]] double interval() const override { return 0.05; }
  void on_answer(double sent, double answered, bool failed) override {
    if (failed) {
      limit_.on_drop();
    } else {
      limit_.on_sample(sent, answered);
    }
  }
  void update(double now, const Window& w) override { limit_.update(now, w.saturated); }

 private:
  proxy::ConcurrencyLimit limit_;
};

/// The adaptive controllers' names, in the order `all` prints them.
inline const std::vector<std::string>& adaptive_controllers() {
  static const std::vector<std::string> names = {"littles", "aimd", "vegas", "gradient", "stage4"};
  return names;
}

/// The controller `name` names ("fixed:N", or one of adaptive_controllers()); nullptr if none.
inline std::unique_ptr<Controller> make_controller(std::string_view name) {
  if (name.starts_with("fixed:")) {
    const std::string_view digits = name.substr(6);
    std::size_t n = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (error != std::errc{} || end != digits.data() + digits.size() || n == 0) return nullptr;
    return std::make_unique<FixedLimit>(n);
  }
  if (name == "littles") return std::make_unique<LittlesLimit>();
  if (name == "aimd") return std::make_unique<AimdLimit>();
  if (name == "vegas") return std::make_unique<VegasLimit>();
  if (name == "gradient") return std::make_unique<GradientLimit>();
  if (name == "stage4") return std::make_unique<Stage4Limit>();
  return nullptr;
}

/// What the law's arithmetic predicts for a fixed limit `n` without think time, good answers/s:
/// with n in flight the whole time, each starting with n in service, throughput is
/// n / E[service]. Under the fail law, at most K good ones are in service: K / delay is a
/// bound, not a prediction (refusals take a tenth of the delay and crowd the good ones out).
inline double expected_per_second(const SimOptions& o, int n) {
  n = std::min(n, o.clients);
  const double delay = static_cast<double>(o.delay_ms) / 1000.0;
  if (delay <= 0 || n <= 0) return 0;
  switch (o.overload) {
    case harness::Overload::queue:
      return std::min(n, o.capacity) / delay;
    case harness::Overload::thrash:
      return n / (delay * harness::thrash_slowdown(o.capacity, n));
    case harness::Overload::fail:
      return std::min(n, o.capacity) / delay;
  }
  return 0;
}

/// One run: the clients, the proxy's queue and limit, the origin, and a clock that jumps from
/// event to event. Each member function is one step of a request's life.
class Simulation {
 public:
  Simulation(const SimOptions& options, Controller& controller)
      : o_(options),
        controller_(controller),
        requests_(static_cast<std::size_t>(options.clients)),
        random_(options.seed) {
    if (o_.capacity <= 0 || o_.clients <= 0)
      throw std::invalid_argument("clients and capacity must be > 0");
  }

  /// Runs the whole virtual time; the result's `controller` is left for the caller to name.
  SimResult run() {
    // Staggered over one delay: clients that all start at 0 would move in lockstep.
    for (int c = 0; c < o_.clients; ++c) schedule(uniform() * ms(o_.delay_ms), Kind::send, c);
    if (controller_.interval() > 0) schedule(controller_.interval(), Kind::tick, -1);
    while (!events_.empty() && events_.top().at <= o_.seconds) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.at;
      switch (e.kind) {
        case Kind::send:
          send(e.client);
          break;
        case Kind::answer:
          answer(e.client);
          break;
        case Kind::timeout:
          time_out(e.client, e.request);
          break;
        case Kind::tick:
          tick();
          break;
      }
    }
    note_limit(o_.seconds);
    return result();
  }

 private:
  enum class Kind { send, answer, timeout, tick };
  struct Event {
    double at;            // virtual s
    std::uint64_t order;  // ties go in the order scheduled: the run is deterministic
    Kind kind;
    int client;
    std::uint64_t request;
    bool operator>(const Event& other) const {
      return at != other.at ? at > other.at : order > other.order;
    }
  };
  // Each client has one request out at a time, so a request is its client's current one.
  struct Request {
    std::uint64_t id = 0;  // counts a client's requests: a stale timeout names an old one
    double sent = 0;       // the client sent it, s
    double forwarded = 0;  // the proxy sent it on to the origin, s
    bool waiting = false;  // in the proxy's queue
    bool fails = false;    // the origin answers it 503
  };

  static double ms(double v) { return v / 1000.0; }
  double uniform() { return static_cast<double>(random_() >> 11) * 0x1.0p-53; }  // [0, 1)
  void schedule(double at, Kind kind, int client, std::uint64_t request = 0) {
    events_.push({at, next_order_++, kind, client, request});
  }

  // The client sends; the proxy forwards it, or queues it when the limit is reached.
  void send(int client) {
    Request& r = requests_[static_cast<std::size_t>(client)];
    ++r.id;
    r.sent = now_;
    if (queue_.empty() && in_flight_ < controller_.limit()) {
      forward(client);
      return;
    }
    refused_ = true;
    r.waiting = true;
    queue_.push_back(client);
    if (o_.queue_timeout_ms > 0)
      schedule(now_ + ms(o_.queue_timeout_ms), Kind::timeout, client, r.id);
  }

  void forward(int client) {
    Request& r = requests_[static_cast<std::size_t>(client)];
    r.waiting = false;
    r.forwarded = now_;
    ++in_flight_;
    // The queue law serves K at a time and makes the rest wait at the origin, where the proxy
    // sees only a longer latency.
    if (o_.overload == harness::Overload::queue && in_service_ >= o_.capacity) {
      origin_queue_.push_back(client);
    } else {
      start_service(client);
    }
  }

  void start_service(int client) {
    ++in_service_;
    const harness::Service s =
        harness::service_for(o_.overload, o_.capacity, in_service_, o_.delay_ms, uniform());
    requests_[static_cast<std::size_t>(client)].fails = s.fails;
    schedule(now_ + ms(static_cast<double>(s.delay_ms)), Kind::answer, client);
  }

  // The origin answers: its place goes to the next in its queue, the proxy's to the next in
  // the proxy's, and the client sends again.
  void answer(int client) {
    --in_service_;
    if (!origin_queue_.empty()) {
      const int next = origin_queue_.front();
      origin_queue_.pop_front();
      start_service(next);
    }
    --in_flight_;
    const Request& r = requests_[static_cast<std::size_t>(client)];
    controller_.on_answer(r.forwarded, now_, r.fails);
    if (r.fails) {
      ++failed_;
      ++window_.drops;
    } else {
      const double rtt = now_ - r.forwarded;
      window_.rtt_min = window_.answers == 0 ? rtt : std::min(window_.rtt_min, rtt);
      window_.rtt_max = std::max(window_.rtt_max, rtt);
      window_.rtt_sum += rtt;
      ++window_.answers;
      latencies_ms_.push_back((now_ - r.sent) * 1000.0);
    }
    schedule(now_ + ms(o_.think_ms), Kind::send, client);
    admit();
  }

  // Queued too long: the proxy answers 503 itself (load shedding).
  void time_out(int client, std::uint64_t request) {
    Request& r = requests_[static_cast<std::size_t>(client)];
    if (r.id != request || !r.waiting) return;  // forwarded in time
    r.waiting = false;
    queue_.erase(std::find(queue_.begin(), queue_.end(), client));
    ++shed_;
    schedule(now_ + ms(o_.think_ms), Kind::send, client);
  }

  void admit() {
    while (!queue_.empty() && in_flight_ < controller_.limit()) {
      const int next = queue_.front();
      queue_.pop_front();
      forward(next);
    }
  }

  // The controller judges the window, as stage 4's tick does; a higher limit admits at once.
  void tick() {
    window_.seconds = now_ - window_start_;
    window_.saturated = refused_ || !queue_.empty() || in_flight_ >= controller_.limit();
    note_limit(now_);
    controller_.update(now_, window_);
    window_ = {};
    window_start_ = now_;
    refused_ = false;
    schedule(now_ + controller_.interval(), Kind::tick, -1);
    admit();
  }

  void note_limit(double until) {
    limit_area_ += static_cast<double>(controller_.limit()) * (until - limit_since_);
    limit_since_ = until;
  }

  SimResult result() {
    SimResult out;
    out.good = latencies_ms_.size();
    out.good_per_second = static_cast<double>(out.good) / o_.seconds;
    out.failed = failed_;
    out.shed = shed_;
    out.p50_ms = percentile(0.50);
    out.p99_ms = percentile(0.99);
    out.mean_limit = limit_area_ / o_.seconds;
    out.final_limit = controller_.limit();
    return out;
  }

  // Nearest rank: the smallest latency at least `p` of the answers do not exceed.
  double percentile(double p) {
    if (latencies_ms_.empty()) return 0;
    const auto rank =
        static_cast<std::size_t>(std::ceil(p * static_cast<double>(latencies_ms_.size())));
    const auto nth =
        latencies_ms_.begin() + static_cast<std::ptrdiff_t>(std::max<std::size_t>(rank, 1) - 1);
    std::nth_element(latencies_ms_.begin(), nth, latencies_ms_.end());
    return *nth;
  }

  const SimOptions o_;
  Controller& controller_;
  std::vector<Request> requests_;  // by client
  std::mt19937_64 random_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t next_order_ = 0;
  double now_ = 0;
  // The proxy.
  std::deque<int> queue_;      // clients waiting for the limit, FIFO
  std::size_t in_flight_ = 0;  // forwarded and not yet answered
  bool refused_ = false;       // someone waited since the last tick
  // The origin.
  std::deque<int> origin_queue_;  // the queue law's waiting room
  int in_service_ = 0;
  // Measurements.
  Window window_;
  double window_start_ = 0;
  double limit_area_ = 0;  // ∫ limit dt
  double limit_since_ = 0;
  std::vector<double> latencies_ms_;
  std::uint64_t failed_ = 0;
  std::uint64_t shed_ = 0;
};

/// Runs controller `name` (see make_controller) once under `options`. Throws
/// std::invalid_argument for an unknown name. Deterministic: same options, same result.
inline SimResult simulate(const SimOptions& options, std::string_view name) {
  std::unique_ptr<Controller> controller = make_controller(name);
  if (!controller) throw std::invalid_argument("unknown controller: " + std::string(name));
  SimResult result = Simulation(options, *controller).run();
  result.controller = std::string(name);
  return result;
}

}  // namespace sizing
