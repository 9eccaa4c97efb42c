#include "traps.h"

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

}  // namespace

std::string classify_trap(const std::string& check, const std::string& output) {
  auto has = [&](const char* s) { return output.find(s) != std::string::npos; };
  const bool crashed = has("died under load") || has("crashed under load") || has("SEGV") ||
                       has("Segmentation") || has("signal 11") || has("Invalid read");
  if (crashed && (has("BoundedQueue") || has("bounded_queue.h")) &&
      (has("::pop") || has("pop_front") || has("front()"))) {
    return "wait-under-if";
  }
  // Memory used after it moved or was freed is evidence on its own, whether or not the load
  // made progress: such a bug often loses clients (a worker serves a dead copy), so the load
  // hangs with every worker idle, which would otherwise read as a lost wakeup. Valgrind's
  // invalid access, or ThreadSanitizer's heap-use-after-free of storage a std::vector freed.
  const bool moved_storage =
      (check == "memory" && (has("Invalid read") || has("Invalid write") || has("Invalid free"))) ||
      (has("heap-use-after-free") && has("std::vector<"));
  if (moved_storage && (check == "memory" || check == "races" || check == "deadlock")) {
    return "pointer-into-vector";
  }
  // Two locks taken in opposite orders explain a hang (the stage deadlocked), so TSan's report
  // outranks the hang's stacks, where the workers blocked in a wait look like a lost wakeup.
  if (check == "deadlock" && (has("lock-order-inversion") || has("opposite orders"))) {
    return "lock-order";
  }
  // No progress under load: races, memory and throughput have no evidence; the deadlock check
  // (and its stacks) says why.
  if (has("served nothing under load")) return check == "deadlock" ? "lost-wakeup" : "";
  if (check == "deadlock") {
    if (has("HUNG") && (has("pthread_cond_wait") || has("condition_variable::wait"))) {
      return "lost-wakeup";
    }
    if (has("lock-order-inversion") || has("opposite orders")) return "lock-order";
    return "";
  }
  if (check == "races") return has("ThreadSanitizer found a data race") ? "data-race" : "";
  if (check == "memory") {
    if (has("Invalid read") || has("Invalid write") || has("Invalid free")) {
      return "pointer-into-vector";
    }
    if (has("Open AF_") || has("Open file descriptor")) return "leaked-socket";
    return "";
  }
  if (check == "shutdown") {
    // The one worker never took the first client: nothing about shutdown can be judged.
    if (has("[FAIL] a slow request is in flight")) return "lost-wakeup";
    // close() destroying the queue under its lock cuts every queued client; only some of them
    // cut (the others told 503) is another bug, e.g. a queued pointer into storage that moved.
    if (has("[FAIL] queued client") && !has("[pass] queued client")) return "close-under-lock";
    if (has("[FAIL] SIGTERM")) return "close-wakes";
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
