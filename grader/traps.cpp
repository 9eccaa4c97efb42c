#include "traps.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <vector>

namespace grader {
namespace {

// Built-in texts; a lab's manifest (trap_hints) may word them for its handout.
const std::map<std::string, std::string>& default_hints() {
  static const std::map<std::string, std::string> hints = {
      {"wait-under-if",
       "a worker crashed inside BoundedQueue::pop, taking an item from an empty queue: the wait "
       "under `if` instead of a loop on the predicate."},
      {"lost-wakeup",
       "every worker sleeps in a condition-variable wait while clients wait: a lost wakeup (a "
       "push that notifies nobody) or a wait whose predicate is never made true."},
      {"pop-notifies-nobody",
       "the accept loop sleeps waiting for room in a queue the workers have emptied, and the "
       "workers sleep waiting for clients: a lost wakeup of the producer (a pop that notifies "
       "nobody). Taking an item makes room: pop must wake a producer waiting on not-full."},
      {"detached-workers",
       "the stage tore down while a worker was still serving: a worker detached, or never "
       "joined, at shutdown, so the process ended (or destroyed the pool, the queue, the "
       "server) under it. Join every worker before what it uses goes away."},
      {"lock-order",
       "two locks taken in opposite orders on two paths: never take one lock while holding "
       "another, or always take them in one order."},
      {"data-race",
       "a shared field read or written without the lock that guards it (see the two stacks)."},
      {"close-under-lock",
       "queued clients got a bare close instead of a 503: the queued sockets were destroyed "
       "(closed) by close() under the lock instead of handed back and answered outside it."},
      {"close-wakes",
       "the stop did not end every wait: close() must wake every waiter, on both condition "
       "variables, and the stop must end the accept loop's wait on a full queue."},
      {"pointer-into-vector",
       "memory read after it moved or was freed: items kept as pointers into storage that "
       "reallocates (a growing std::vector) instead of by value in the queue."},
      {"leaked-socket",
       "a client socket still open at exit: a descriptor released from its owner and never "
       "closed."},
      {"origin-limit-bypassed",
       "more requests reached the origin at once than --origin-limit allows: the limit is not "
       "honoured on every path (the poller's misses?). Every request that is not a hit needs a "
       "permit of its origin before it is sent, whichever path sends it."},
      {"permit-leak",
       "a permit is never given back (leaked on hang-up or failure): once a request ended "
       "without its answer, its origin's next requests waited for a permit nobody held. Every "
       "way a request ends (answered, failed, dropped when its client hangs up) must give its "
       "permit back."},
      {"permit-freed-on-hang-up",
       "a permit was given back when its client hung up, while the origin still served the "
       "request: the next request went in, and the origin had more in service than the limit. "
       "A client's hang-up does not end the request at the origin; keep its permit until the "
       "origin has answered (read the answer and throw it away) or timed out."},
      {"never-sheds",
       "a newcomer joined a queue that had stood past --shed-delay-ms for --shed-interval-ms "
       "instead of getting a 503 at once: submit must refuse newcomers while the queue stands "
       "(the poller's CoDel verdict, queue_delay.h), not only when the queue is full. Shedding "
       "only past some queue length does not count: a few requests behind a stuck worker are a "
       "standing queue."},
      {"sheds-by-length",
       "requests were refused while the queue was long but young (none had waited "
       "--shed-delay-ms yet): shedding by queue length, not by queueing delay. CoDel refuses "
       "only when the oldest request has waited past the target for a whole interval; a long "
       "queue that drains fast is a good queue (queue_delay.h)."},
      {"shedding-never-stops",
       "requests were still refused after the queue had drained: the shedding verdict is "
       "remembered (a flag set once, never cleared) instead of read afresh. The queue stops "
       "standing as soon as its delay falls below the target; submit must follow the "
       "shedder's verdict now, each time."},
      {"post-resent",
       "a POST reached the origin twice: a request that is not idempotent was resent on a new "
       "connection after a kept one closed unanswered. Only idempotent methods (RFC 9110 "
       "§9.2.2) may be retried; a POST never goes out on a kept connection the origin may be "
       "closing, and is never sent again."},
      {"hit-drops-unsent",
       "a response lost bytes on their way to a client that read slowly: where its body should "
       "have gone on, the next response began. A non-blocking send to a full socket takes only "
       "part; what it did not take must be kept (the connection's unsent bytes) and sent when "
       "epoll says the socket is writable (EPOLLOUT), before the next response, never dropped "
       "(stage4-tuned/README.md, \"The design, and why\", 9)."},
      {"waiting-unlocked",
       "the queue's arrival times (waiting_) read or written without waiting_mutex_: the poller "
       "reads the oldest one for the shedder (oldest_wait) and pushes in enqueue while a worker "
       "pops in leave_queue, so a read without the lock can meet a deque halfway through a pop "
       "(the two stacks, both in stage4-tuned/load_shedding.cpp). Every access to waiting_, a "
       "read too, holds waiting_mutex_."},
      {"probe-first-answers",
       "the adaptive limit fell to its floor after a probe that measured the fast path: the "
       "probe timed the first answers to come back, not the requests it sent. On an origin "
       "whose paths differ in speed the first answers are the fast ones (a slow request holds "
       "its place while fast ones come and go), so the minimum is far too low and every window "
       "of the mix after it reads as queueing. Time the requests sent under the probe: the "
       "ticket ConcurrencyLimit::on_start hands out, carried by the permit back to on_sample "
       "(stage4-tuned/concurrency_limit.h)."},
      {"hits-wait",
       "hits wait for the origin's limit: a cached object waited for a permit while the origin's "
       "limit was full. A hit sends nothing to the origin, so it needs no permit; answer it "
       "before admission."},
  };
  return hints;
}

/// The stack of the first memory error in `output`: the lines after its marker (a TSan SEGV or
/// heap-use-after-free, a signal, Valgrind's first invalid access), up to where the report turns
/// to the earlier access or the free (TSan's "Previous", Valgrind's "Address 0x..."), at most
/// 1500 characters; "" when there is none. Other stacks in the output (a hang's sleeping
/// workers sit in pop too) are not this error's.
std::string first_error_site(const std::string& output) {
  std::size_t at = std::string::npos;
  for (const char* marker : {"SEGV", "Segmentation", "signal 11", "Invalid read", "Invalid write",
                             "heap-use-after-free"}) {
    at = std::min(at, output.find(marker));
  }
  if (at == std::string::npos) return "";
  std::string site = output.substr(at, 1500);
  for (const char* turn : {"Previous ", "Address 0x"}) {
    if (const std::size_t end = site.find(turn); end != std::string::npos) site.resize(end);
  }
  return site;
}

/// Whether the first memory error's own stack moves an item out of BoundedQueue::pop: a worker
/// that took an item from an empty queue (a deque's front() when empty is memory freed or never
/// written). A worker reading the queue's fields after the queue was destroyed fails in pop too,
/// but on its lock or its predicate, not on the move.
bool crash_in_pop(const std::string& output) {
  const std::string site = first_error_site(output);
  auto in_site = [&](const char* s) { return site.find(s) != std::string::npos; };
  return (in_site("BoundedQueue") || in_site("bounded_queue.h")) && in_site("::pop") &&
         (in_site("Socket::Socket(proxy::Socket&&)") || in_site("pop_front") ||
          in_site("front()"));
}

/// The thread blocks of a hang's condensed gdb stacks ("  thread 3:" or "  threads 7, 6:", each
/// with its frames), in order; empty when the output has none.
std::vector<std::string> thread_blocks(const std::string& output) {
  std::vector<std::string> blocks;
  std::size_t at = output.find("\n  thread");
  while (at != std::string::npos) {
    const std::size_t next = output.find("\n  thread", at + 1);
    blocks.push_back(output.substr(at + 1, next == std::string::npos ? std::string::npos
                                                                      : next - at - 1));
    at = next;
  }
  return blocks;
}

bool contains(const std::string& text, const char* s) { return text.find(s) != std::string::npos; }

/// Whether some thread of a hang sleeps in a condition-variable wait inside BoundedQueue::push:
/// a producer (the accept loop) waiting for room.
bool producer_waits_for_room(const std::string& output) {
  for (const std::string& block : thread_blocks(output)) {
    if ((contains(block, "pthread_cond_wait") || contains(block, "condition_variable")) &&
        contains(block, "BoundedQueue") && contains(block, "::push")) {
      return true;
    }
  }
  return false;
}

/// How many stacks of a hang are blocked acquiring a mutex (threads with one stack count once).
int stacks_blocked_on_a_lock(const std::string& output) {
  int blocked = 0;
  for (const std::string& block : thread_blocks(output)) {
    if (contains(block, "__lll_lock_wait") || contains(block, "pthread_mutex_lock")) ++blocked;
  }
  return blocked;
}

/// The deadlock check's count of descriptors the stage held at the hang beyond its idle ones,
/// or -1 when the output does not say.
long held_at_hang(const std::string& output) {
  const std::string key = "At the hang the stage held ";
  const std::size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::strtol(output.c_str() + at + key.size(), nullptr, 10);
}

/// Whether a stack names the teardown of what the workers use: the pool, its queue, the server
/// (destroyed when main returns), or the process's exit.
bool names_teardown(const std::string& stack) {
  for (const char* s : {"~WorkerPool", "~BoundedQueue", "~Server", "~StageStart", "__cxa_finalize",
                        "__run_exit_handlers"}) {
    if (contains(stack, s)) return true;
  }
  return false;
}

/// Whether a stack has a frame in `main` itself ("#3 main /src/..." from TSan, "by 0x...: main
/// (main.cpp:98)" from Valgrind), not only in functions main called.
bool has_main_frame(const std::string& stack) {
  if (contains(stack, ": main (")) return true;
  for (std::size_t at = stack.find(" main "); at != std::string::npos;
       at = stack.find(" main ", at + 1)) {
    std::size_t hash = at;
    while (hash > 0 && std::isdigit(static_cast<unsigned char>(stack[hash - 1]))) --hash;
    if (hash > 0 && hash < at && stack[hash - 1] == '#') return true;
  }
  return false;
}

/// Whether a stack is the main thread's after the pool's owner returned: in a destructor of
/// what the workers use, in the exit, or in main itself with run_pool (the pool's stack frame)
/// gone.
bool after_teardown_on_main(const std::string& stack) {
  return contains(stack, "by main thread") &&
         (names_teardown(stack) || (has_main_frame(stack) && !contains(stack, "run_pool")));
}

/// Whether a stack runs on a pool worker (WorkerPool's work loop).
bool on_a_worker(const std::string& stack) {
  return contains(stack, "WorkerPool") && contains(stack, "::work");
}

/// The two accesses of TSan's first report in `output`: the stack of the one it reports
/// (`first`) and of the one before it (`second`, from "Previous " to where the report turns to
/// the location, the mutexes or the threads). False when there is no such report.
bool first_tsan_accesses(const std::string& output, std::string& first, std::string& second) {
  const std::size_t at = output.find("WARNING: ThreadSanitizer: ");
  if (at == std::string::npos) return false;
  const std::string report = output.substr(at, output.find("SUMMARY: ThreadSanitizer", at) - at);
  const std::size_t previous = report.find("Previous ");
  if (previous == std::string::npos) return false;
  first = report.substr(0, previous);
  second = report.substr(previous);
  for (const char* end : {"Location is", "Mutex M", "Thread T"}) {
    if (const std::size_t cut = second.find(end); cut != std::string::npos) second.resize(cut);
  }
  return true;
}

/// Whether TSan's first report is a data race whose two accesses both run in stage 4's
/// load_shedding.cpp. Of what that file touches, only the queue's arrival times (waiting_) are
/// shared by the poller and the workers without being atomic: the poller reads and pushes them
/// (oldest_wait, enqueue, and what a submit adds), a worker pops them (leave_queue).
bool race_on_the_queue_notes(const std::string& output) {
  if (output.find("ThreadSanitizer found a data race") == std::string::npos) return false;
  std::string first, second;
  return first_tsan_accesses(output, first, second) &&
         first.find("load_shedding.cpp") != std::string::npos &&
         second.find("load_shedding.cpp") != std::string::npos;
}

/// Whether the first memory error or race in the output sets a worker against the teardown:
/// TSan's first report (a race, a heap-use-after-free) with one access by the main thread after
/// the pool's owner returned (a destructor of the pool, its queue or the server, the exit, or
/// main itself) and the other on a worker; or Valgrind's first error on a worker that is an
/// invalid access to a block freed by such a destructor, or a lock of a mutex made of
/// uninitialised bytes (the pool lived in run_pool's stack frame, since reused). Workers still
/// ran after the stage let go of them.
bool destroyed_under_a_worker(const std::string& output) {
  if (output.find("WARNING: ThreadSanitizer: ") != std::string::npos) {
    std::string first, second;
    if (!first_tsan_accesses(output, first, second)) return false;
    return (after_teardown_on_main(first) && on_a_worker(second)) ||
           (after_teardown_on_main(second) && on_a_worker(first));
  }
  std::size_t at = std::string::npos;
  for (const char* marker : {"Invalid read", "Invalid write", "Conditional jump or move depends"}) {
    at = std::min(at, output.find(marker));
  }
  if (at == std::string::npos) return false;
  const std::size_t end = output.find("\n\n", at);
  const std::string error = output.substr(at, end == std::string::npos ? std::string::npos
                                                                        : end - at);
  if (!on_a_worker(error)) return false;
  if (contains(error, "Conditional jump")) {
    return contains(error, "mutex_lock") && contains(error, "BoundedQueue");
  }
  const std::size_t freed = error.find("free'd");
  return freed != std::string::npos && names_teardown(error.substr(freed));
}

/// Whether a descriptor Valgrind found open at exit was opened inside a transaction (an origin
/// connection, a client being served): a worker was still mid-transaction when the process
/// ended. A client the accept loop released and never closed was opened by accept on the main
/// thread instead.
bool open_at_exit_inside_a_transaction(const std::string& output) {
  for (std::size_t at = output.find("Open "); at != std::string::npos;
       at = output.find("Open ", at + 1)) {
    if (output.compare(at, 8, "Open AF_") != 0 &&
        output.compare(at, 20, "Open file descriptor") != 0) {
      continue;
    }
    const std::size_t end = output.find("\n\n", at);
    const std::string block = output.substr(at, end == std::string::npos ? std::string::npos
                                                                          : end - at);
    for (const char* s : {"fetch_from_origin", "connect_to_origin", "serve_connection",
                          "Server::serve"}) {
      if (contains(block, s)) return true;
    }
  }
  return false;
}

/// The line after `line` in a check's verdict (its detail: "got status 503, ...", "a bare
/// close: ...", "it did not exit ..."), or "" when `line` is not in `output`.
std::string detail_of(const std::string& output, const std::string& line) {
  const std::size_t at = output.find(line);
  if (at == std::string::npos) return "";
  const std::size_t next = output.find('\n', at);
  if (next == std::string::npos) return "";
  const std::size_t end = output.find('\n', next + 1);
  return output.substr(next + 1, end == std::string::npos ? std::string::npos : end - next - 1);
}

/// The shutdown check (grader/checks_functional.cpp): one worker, a slow client, then queued
/// clients, then SIGTERM. Each trap leaves its own pattern in the verdict's lines; a failure
/// that fits none (a client served garbage, a crash at exit) gets no hint.
std::string shutdown_trap(const std::string& output) {
  auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
  // The one worker never took the first client, which was still queued when the stop came (it
  // got the queued clients' 503): the worker slept for 10 s beside a queued client.
  if (has("[FAIL] a slow request is in flight") &&
      detail_of(output, "[FAIL] the in-flight client gets its whole response")
              .find("got status 503") != std::string::npos) {
    return "lost-wakeup";
  }
  // The worker had its client; every queued one got a bare close and none its 503: close()
  // destroyed the queue's sockets. (Some answered and some not is another bug: a client lost
  // on its way through the queue, e.g. a pointer to a socket that moved.)
  // The stop came on time and every queued client got its 503, but the client the worker was
  // serving got nothing or half: the process ended without waiting for its worker.
  const std::string in_flight =
      detail_of(output, "[FAIL] the in-flight client gets its whole response");
  if (has("[pass] a slow request is in flight") && has("[pass] SIGTERM") &&
      !has("[FAIL] queued client") &&
      (in_flight.find("a bare close") != std::string::npos ||
       in_flight.find("incomplete") != std::string::npos)) {
    return "detached-workers";
  }
  if (has("[pass] a slow request is in flight") && has("[FAIL] queued client") &&
      !has("[pass] queued client") &&
      detail_of(output, "[FAIL] queued client 1 ").find("a bare close") != std::string::npos) {
    return "close-under-lock";
  }
  // SIGTERM did not end the process in time (not a crash, not a bad status): someone slept
  // through the stop.
  const std::string exit_detail = detail_of(output, "[FAIL] SIGTERM");
  if (exit_detail.find("did not exit within") != std::string::npos ||
      exit_detail.find("exited with status 0 after") != std::string::npos) {
    return "close-wakes";
  }
  return "";
}

/// The origin-limit check (grader/checks_origin_limit.cpp). Each trap fails its own line, and
/// only where the lines around it show the stage working otherwise: a stage that answers
/// nothing fails the hit and the permits' lines too, which is none of these traps.
std::string origin_limit_trap(const std::string& output) {
  auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
  // The origin itself counted more than the limit: only a path that skips the permit does that.
  if (has("[FAIL] at most --origin-limit") ||
      has("[FAIL] a miss past the limit stays off the origin")) {
    return "origin-limit-bypassed";
  }
  // The waiting miss reached the origin while the hung-up /stall was still in service there.
  if (has("[FAIL] a client's hang-up does not give the permit back")) {
    return "permit-freed-on-hang-up";
  }
  // The same on a worker — unless permits stopped coming back at all (a leak starves that line
  // too, below).
  if (has("[FAIL] a worker's client hang-up does not give the permit back") &&
      has("[pass] a permit comes back when its request ends")) {
    return "permit-freed-on-hang-up";
  }
  // One origin starved after a hang-up while another is served: its permit is gone.
  if (has("[FAIL] a permit comes back") && has("[pass] meanwhile another origin is served") &&
      has("[pass] a cacheable object is fetched")) {
    return "permit-leak";
  }
  // The hit waited, yet the miss behind the same full limit went on once the permit came back.
  if (has("[FAIL] a hit never waits") && has("[pass] a cacheable object is fetched") &&
      has("[pass] a permit comes back when its request ends: the origin ends the /stall")) {
    return "hits-wait";
  }
  return "";
}

/// The shedding check (grader/checks_shedding.cpp). Each trap fails its own line, and only where
/// the lines around it show the stage shedding otherwise: a stage that answers nothing fails
/// the drain and the requests after it too, which is none of these traps.
std::string shedding_trap(const std::string& output) {
  auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
  if (!has("[pass] the one worker")) return "";
  // Refused before any request had waited the delay target: the queue's length decided.
  if (has("[FAIL] a long queue that is young is not shed")) return "sheds-by-length";
  // Queued behind a standing queue, while the young queue was left alone and the stage went on
  // serving afterwards: no shedding by delay at all.
  if (has("[FAIL] a standing queue sheds a newcomer") &&
      has("[pass] a drained queue stops shedding")) {
    return "never-sheds";
  }
  // Shed while standing, as it should, and still shedding with nothing queued.
  if (has("[pass] a standing queue sheds a newcomer") && has("[pass] the queue drains") &&
      has("[FAIL] a drained queue stops shedding")) {
    return "shedding-never-stops";
  }
  return "";
}

}  // namespace

std::string classify_trap(const std::string& check, const std::string& output) {
  auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
  if (crash_in_pop(output)) return "wait-under-if";
  // Memory used after it moved or was freed: Valgrind's invalid accesses, TSan's
  // heap-use-after-free. In lab 3 that is a client reached through a pointer into storage that
  // moved. It outranks "served nothing": the misuse is why nothing was served.
  const bool misused_memory = has("Invalid read") || has("Invalid write") ||
                              has("Invalid free") || has("heap-use-after-free");
  if (check == "memory") {
    if (destroyed_under_a_worker(output)) return "detached-workers";
    if (misused_memory) return "pointer-into-vector";
    // No progress under load: no evidence here; the deadlock check (and its stacks) says why.
    if (has("served nothing under load")) return "";
    if (open_at_exit_inside_a_transaction(output)) return "detached-workers";
    if (has("Open AF_") || has("Open file descriptor")) return "leaked-socket";
    return "";
  }
  if (check == "races" || check == "queue-races") {
    // Before the pointer trap: the pool's own storage freed under a worker is a
    // heap-use-after-free too.
    if (destroyed_under_a_worker(output)) return "detached-workers";
    if (has("ThreadSanitizer found a heap-use-after-free")) return "pointer-into-vector";
    if (has("served nothing under load")) return "";
    if (race_on_the_queue_notes(output)) return "waiting-unlocked";
    return has("ThreadSanitizer found a data race") ? "data-race" : "";
  }
  if (check == "deadlock") {
    // Two locks taken in opposite orders explain a hang (the stage deadlocked), so TSan's report
    // outranks the hang's stacks, where the workers blocked in a wait look like a lost wakeup.
    if (has("lock-order-inversion") || has("opposite orders")) return "lock-order";
    // Two or more different stacks blocked acquiring a mutex for the whole hang: a cycle of
    // locks (the lock-order mutant hangs this way before TSan can report the inversion), not a
    // missed wakeup. Threads that all wait for one lock at one place are not a cycle: the
    // holder died or ran off (a worker that popped an empty queue hangs the others so).
    if (has("HUNG") && stacks_blocked_on_a_lock(output) >= 2) return "lock-order";
    if (has("HUNG") && (has("pthread_cond_wait") || has("condition_variable::wait"))) {
      // Workers asleep while clients wait. A lost wakeup -- unless the run also misused memory
      // (the clients were lost on their way to the workers: a queue of pointers to sockets
      // shows in the stacks) or raced (the deadlock check shows TSan's first report before the hang), which makes the
      // sleep a symptom, not the trap.
      if (misused_memory || has("<proxy::Socket*>")) return "pointer-into-vector";
      if (has("Before the hang ThreadSanitizer reported")) return "";
      // The accept loop waits for room while the stage holds no client but the one in its
      // hands, so none is queued: the workers emptied the queue and told nobody. (Workers
      // asleep beside queued clients hold more: a push told nobody.)
      const long held = held_at_hang(output);
      if (producer_waits_for_room(output) && held >= 0 && held <= 1) {
        return "pop-notifies-nobody";
      }
      return "lost-wakeup";
    }
    return "";
  }
  if (check == "shutdown") return shutdown_trap(output);
  if (check == "origin-limit") return origin_limit_trap(output);
  if (check == "shedding") return shedding_trap(output);
  // The limit collapsed, and the minimum the probe left is a fraction of the slow path's delay
  // alone: only the fast path's answers were timed. A limit that fell for another reason (a
  // minimum as the mix's, a stage that stopped answering) is none of this trap.
  if (check == "mixed-paths" && has("[FAIL] the limit does not collapse after the probe") &&
      has("is below a quarter of the slow path's")) {
    return "probe-first-answers";
  }
  if (check == "post-once" && has("[FAIL] a POST reaches the origin at most once")) {
    return "post-resent";
  }
  // The next response's head where a body should have gone on: the rest of that response was
  // dropped, not merely late (a stage that stops sending leaves a body short, with no head after
  // it). Only once the stage has served the objects at all.
  if (check == "slow-reader" && has("[pass] the objects are fetched and stored") &&
      has("where the next response's head began")) {
    return "hit-drops-unsent";
  }
  if (check == "queue-bound" && has("[FAIL] past a full queue a stage that sheds load")) {
    return "never-sheds";
  }
  return "";
}

std::string trap_hint(const std::string& check, const std::string& output,
                      const nlohmann::json& manifest_hints) {
  const std::string trap = classify_trap(check, output);
  if (trap.empty()) return "";
  std::string text = manifest_hints.is_object() ? manifest_hints.value(trap, "") : "";
  if (text.empty()) text = default_hints().at(trap);
  return "LIKELY TRAP (" + trap + "): " + text;
}

}  // namespace grader
