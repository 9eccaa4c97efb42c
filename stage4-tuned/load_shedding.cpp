// Lab 4's hand-in (labs/lab4-tuning/README.md, "What each piece must guarantee"): where stage 4
// hands a request to its workers, and refuses it instead when waiting would not help. Load
// shedding answers the excess 503 at once rather than queueing it where its client cannot see it
// age (the handout's "Background", "Load shedding"); it judges by queueing delay, not by queue
// length (CoDel, queue_delay.h): a long queue that drains fast is a good queue, a short one
// that stands behind a stuck worker is not.
//
// You write TunedServer::submit (queue a connection whose request head is whole, or shed it)
// and TunedServer::shed (refuse one client). The rest of this file is given, and is what those
// two stand on: enqueue, the queueing delay it notes, the poller's verdict on it and a worker's
// refusal of a request that waited too long. The poller that calls submit and the workers that
// serve what it queues are in tuned_server.cpp (the design: tuned_server.h), yours to read but
// not to change.
#include <chrono>
#include <mutex>
#include <string>

#include "server/log.h"  // log_line: the starter's stubs
#include "server/overload.h"
#include "tuned_server.h"

namespace proxy {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void TunedServer::submit(Client client) {
  // LAB(4) BEGIN TunedServer::submit
  // Load shedding by queueing delay (CoDel, queue_delay.h): while requests have stood in the
  // queue past --shed-delay-ms for --shed-interval-ms, a newcomer would only wait behind them.
  // Saying so at once beats a client timing out in a queue it cannot see.
  if (queue_standing_.load(std::memory_order_relaxed)) {
    shed(client.connection.release(), "requests have waited past --shed-delay-ms (CoDel)");
    return;
  }
  // And a hard bound on memory: every worker busy and the queue full.
  if (!enqueue(client)) {
    shed(client.connection.release(), "the worker queue is full (--queue)");
  }
  // LAB(4) STUB
  // // Until load shedding is written, a client the full queue refuses is dropped (a bare close).
  // if (!enqueue(client)) {
  //   log_line("TODO(student) lab 4: TunedServer::submit dropped a client the full queue refused "
  //            "instead of shedding it with a 503 (stage4-tuned/load_shedding.cpp)");
  // }
  // LAB(4) END
}

void TunedServer::shed(Socket socket, const char* reason) {
  // LAB(4) BEGIN TunedServer::shed
  shed_.fetch_add(1, std::memory_order_relaxed);
  reply_overloaded(std::move(socket), server_.stats(), "load shed", reason);
  // LAB(4) STUB
  // (void)socket;  // closed on return: a bare close, no 503
  // log_line(std::string("TODO(student) lab 4: TunedServer::shed closed a client without a 503 (") + reason +
  //          ") (stage4-tuned/load_shedding.cpp)");
  // LAB(4) END
}

// Queues a job, noting when it was queued for the shedder. The note goes first and is taken
// back on refusal: a worker that starts the job at once must find it.
bool TunedServer::enqueue(Client& client) {
  const auto now = Clock::now();
  {
    std::lock_guard lock(waiting_mutex_);
    waiting_.push_back(now);
  }
  Job job{std::move(client), now};
  if (pool_.try_submit(std::move(job))) return true;
  client = std::move(job.client);
  std::lock_guard lock(waiting_mutex_);
  waiting_.pop_back();  // the queue is full, so workers took none of the notes behind it
  return false;
}

double TunedServer::oldest_wait(Clock::time_point now) const {
  std::lock_guard lock(waiting_mutex_);
  return waiting_.empty() ? 0 : seconds(now - waiting_.front());
}

// On the poller, every loop: the shedder sees the queueing delay now, and its verdict is what
// submit and the workers read.
double TunedServer::observe_queue(Clock::time_point now) {
  const double wait = oldest_wait(now);
  queue_standing_.store(shedder_.observe(wait, seconds(now - started_)), std::memory_order_relaxed);
  return wait;
}

bool TunedServer::leave_queue(Job& job) {
  const auto start = Clock::now();
  {
    std::lock_guard lock(waiting_mutex_);
    if (!waiting_.empty()) waiting_.pop_front();
  }
  // CoDel drops at the head of the queue: a request that waited past the target while the queue
  // stood is refused now rather than served late.
  if (queue_standing_.load(std::memory_order_relaxed) &&
      start - job.queued_at > config_.shed_delay) {
    shed(job.client.connection.release(),
         "waited past --shed-delay-ms while the queue stood (CoDel)");
    return false;
  }
  return true;
}

}  // namespace proxy
