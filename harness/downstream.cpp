#include "downstream.h"

#include <algorithm>
#include <cmath>

namespace harness {
namespace {

constexpr double kSlowFactor = 4.0;       // a slow request's service, times the law's
constexpr double kSlowAtCapacity = 0.05;  // chance of a slow one at n = K (1 in 20)

double load(int capacity, int in_service) {
  return static_cast<double>(std::max(in_service, 1)) / static_cast<double>(capacity);
}

// (n/K)²: the thrash law's slowdown past the capacity, 1 below it.
double crowding(int capacity, int in_service) {
  const double rho = load(capacity, in_service);
  return std::max(1.0, rho * rho);
}

// Grows as (n/K)⁴ up to the capacity and stays there: past it the (n/K)² law is the collapse.
double slow_chance(int capacity, int in_service) {
  const double rho = std::min(1.0, load(capacity, in_service));
  return kSlowAtCapacity * rho * rho * rho * rho;
}

}  // namespace

std::optional<Overload> parse_overload(std::string_view name) {
  if (name == "queue") return Overload::queue;
  if (name == "thrash") return Overload::thrash;
  if (name == "fail") return Overload::fail;
  return std::nullopt;
}

std::string_view overload_name(Overload law) {
  switch (law) {
    case Overload::queue:
      return "queue";
    case Overload::thrash:
      return "thrash";
    case Overload::fail:
      return "fail";
  }
  return "queue";
}

Service service_for(Overload law, int capacity, int in_service, std::uint64_t delay_ms,
                    double uniform) {
  Service service{delay_ms, false};
  if (capacity <= 0) return service;
  switch (law) {
    case Overload::queue:
      break;
    case Overload::thrash: {
      double factor = crowding(capacity, in_service);
      if (uniform < slow_chance(capacity, in_service)) factor *= kSlowFactor;
      service.delay_ms =
          static_cast<std::uint64_t>(std::llround(static_cast<double>(delay_ms) * factor));
      break;
    }
    case Overload::fail:
      // Refused after a tenth of the delay (at least 1 ms), as a server whose connection or
      // thread pool is exhausted refuses: quickly, though not for free. A refusal that held
      // its place for the whole delay would fail everyone after it too.
      if (in_service > capacity)
        service = {delay_ms == 0 ? 0 : std::max<std::uint64_t>(1, delay_ms / 10), true};
      break;
  }
  return service;
}

double thrash_slowdown(int capacity, int in_service) {
  if (capacity <= 0) return 1.0;
  const double slow = slow_chance(capacity, in_service);
  return crowding(capacity, in_service) * (1.0 + (kSlowFactor - 1.0) * slow);
}

}  // namespace harness
