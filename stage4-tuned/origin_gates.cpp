#include "origin_gates.h"

#include <utility>

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kForgetAfter = std::chrono::minutes(1);

double seconds_since(Clock::time_point epoch, Clock::time_point t) {
  return std::chrono::duration<double>(t - epoch).count();
}

}  // namespace

OriginPermit::OriginPermit(OriginGates* gates, std::shared_ptr<OriginGate> gate)
    : gates_(gates), gate_(std::move(gate)), started_(Clock::now()) {}

OriginPermit::OriginPermit(OriginPermit&& other) noexcept
    : gates_(std::exchange(other.gates_, nullptr)),
      gate_(std::move(other.gate_)),
      started_(other.started_),
      finished_(other.finished_),
      probe_ticket_(other.probe_ticket_) {}

OriginPermit& OriginPermit::operator=(OriginPermit&& other) noexcept {
  if (this != &other) {
    give_back(false, false);
    gates_ = std::exchange(other.gates_, nullptr);
    gate_ = std::move(other.gate_);
    started_ = other.started_;
    finished_ = other.finished_;
    probe_ticket_ = other.probe_ticket_;
  }
  return *this;
}

void OriginPermit::give_back(bool sample, bool drop) noexcept {
  if (gates_ == nullptr) return;
  const auto finished = finished_ != Clock::time_point{} ? finished_ : Clock::now();
  gates_->release(*gate_, started_, finished, probe_ticket_, sample, drop);
  gates_ = nullptr;
  gate_.reset();
}

OriginGates::OriginGates(ConcurrencyLimitOptions options, std::size_t fixed,
                         std::function<void()> wake)
    : options_(options), fixed_(fixed), wake_(std::move(wake)) {}

std::shared_ptr<OriginGate> OriginGates::gate(std::string_view key) {
  std::lock_guard lock(mutex_);
  auto it = gates_.find(std::string(key));
  if (it == gates_.end()) {
    it = gates_.emplace(std::string(key), std::make_shared<OriginGate>(std::string(key), options_))
             .first;
  }
  return it->second;
}

std::optional<OriginPermit> OriginGates::try_acquire(const std::shared_ptr<OriginGate>& gate) {
  std::lock_guard lock(mutex_);
  const std::size_t limit = fixed_ > 0 ? fixed_ : gate->limit.limit();
  gate->last_used = Clock::now();
  if (gate->in_flight >= limit) {
    gate->refused = true;
    return std::nullopt;
  }
  ++gate->in_flight;
  OriginPermit permit(this, gate);
  permit.probe_ticket_ = gate->limit.on_start();
  return permit;
}

void OriginGates::add_waiting(OriginGate& gate, long delta) {
  std::lock_guard lock(mutex_);
  gate.waiting = static_cast<std::size_t>(static_cast<long>(gate.waiting) + delta);
}

void OriginGates::set_queue_delay(OriginGate& gate, double seconds) {
  std::lock_guard lock(mutex_);
  gate.queue_delay = seconds;
}

void OriginGates::release(OriginGate& gate, Clock::time_point started, Clock::time_point finished,
                          std::uint64_t probe_ticket, bool sample, bool drop) noexcept {
  std::function<void()> wake;
  {
    std::lock_guard lock(mutex_);
    --gate.in_flight;
    if (drop) {
      gate.limit.on_drop();
    } else if (sample) {
      gate.limit.on_sample(seconds_since(epoch_, started), seconds_since(epoch_, finished),
                           probe_ticket);
    }
    if (gate.waiting > 0) wake = wake_;
  }
  if (wake) wake();
}

void OriginGates::tick(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  const double t = seconds_since(epoch_, now);
  for (auto it = gates_.begin(); it != gates_.end();) {
    OriginGate& gate = *it->second;
    if (gate.in_flight == 0 && gate.waiting == 0 && now - gate.last_used > kForgetAfter) {
      it = gates_.erase(it);
      continue;
    }
    const bool saturated = gate.refused || gate.waiting > 0 || gate.in_flight >= gate.limit.limit();
    if (fixed_ == 0) gate.limit.update(t, saturated);
    gate.refused = false;
    ++it;
  }
}

std::vector<OriginGateView> OriginGates::views() const {
  std::lock_guard lock(mutex_);
  std::vector<OriginGateView> out;
  out.reserve(gates_.size());
  for (const auto& [key, gate] : gates_) {
    out.push_back({key, fixed_ > 0 ? fixed_ : gate->limit.limit(), gate->in_flight, gate->waiting,
                   gate->queue_delay, gate->limit.min_rtt(), gate->limit.rtt()});
  }
  return out;
}

void OriginGates::stop_waking() {
  std::lock_guard lock(mutex_);
  wake_ = nullptr;
}

}  // namespace proxy
