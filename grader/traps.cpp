#include "traps.h"

#include <algorithm>
#include <map>

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
  };
  return hints;
}

/// Whether the output holds a crash whose own stack -- the lines after the first crash marker
/// (a TSan SEGV report, a signal, Valgrind's first invalid access) -- runs through
/// BoundedQueue::pop: a worker that took an item from an empty queue. Other stacks in the
/// output (a hang's sleeping workers sit in pop too) are not evidence of it.
bool crash_in_pop(const std::string& output) {
  std::size_t at = std::string::npos;
  for (const char* marker : {"SEGV", "Segmentation", "signal 11", "Invalid read", "Invalid write"}) {
    at = std::min(at, output.find(marker));
  }
  if (at == std::string::npos) return false;
  const std::string site = output.substr(at, 1500);
  auto in_site = [&](const char* s) { return site.find(s) != std::string::npos; };
  return (in_site("BoundedQueue") || in_site("bounded_queue.h")) &&
         (in_site("::pop") || in_site("pop_front") || in_site("front()"));
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
    if (misused_memory) return "pointer-into-vector";
    // No progress under load: no evidence here; the deadlock check (and its stacks) says why.
    if (has("served nothing under load")) return "";
    if (has("Open AF_") || has("Open file descriptor")) return "leaked-socket";
    return "";
  }
  if (check == "races") {
    if (has("ThreadSanitizer found a heap-use-after-free")) return "pointer-into-vector";
    if (has("served nothing under load")) return "";
    return has("ThreadSanitizer found a data race") ? "data-race" : "";
  }
  if (check == "deadlock") {
    // Two locks taken in opposite orders explain a hang (the stage deadlocked), so TSan's report
    // outranks the hang's stacks, where the workers blocked in a wait look like a lost wakeup.
    if (has("lock-order-inversion") || has("opposite orders")) return "lock-order";
    // Threads blocked acquiring a mutex for the whole hang: a cycle of locks (the lock-order
    // mutant hangs this way before TSan can report the inversion), not a missed wakeup.
    if (has("HUNG") && (has("pthread_mutex_lock") || has("__lll_lock_wait"))) return "lock-order";
    if (has("HUNG") && (has("pthread_cond_wait") || has("condition_variable::wait"))) {
      // Workers asleep while clients wait. A lost wakeup -- unless the run also misused memory
      // (the clients were lost on their way to the workers: a queue of pointers to sockets
      // shows in the stacks) or raced (the deadlock check shows TSan's first report before the hang), which makes the
      // sleep a symptom, not the trap.
      if (misused_memory || has("<proxy::Socket*>")) return "pointer-into-vector";
      if (has("Before the hang ThreadSanitizer reported")) return "";
      return "lost-wakeup";
    }
    return "";
  }
  if (check == "shutdown") return shutdown_trap(output);
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
