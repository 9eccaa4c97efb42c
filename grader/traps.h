// Trap hints: which of a lab's known traps the evidence of a failed check points at. A hint
// fires only for evidence of its own trap (a crash inside pop for the wait under `if`, every
// worker asleep in a condition-variable wait for a lost wakeup, ...); a check with no evidence
// of any trap gets no hint rather than a guess.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace grader {

/// The trap id the evidence in a failed check's `output` points at ("wait-under-if",
/// "lost-wakeup", "pop-notifies-nobody", "lock-order", "data-race", "close-under-lock",
/// "close-wakes", "pointer-into-vector", "leaked-socket", "detached-workers"; stage 4's
/// origin-limit check: "origin-limit-bypassed", "permit-leak", "hits-wait"; mixed-paths:
/// "probe-first-answers"; its shedding check: "never-sheds", "sheds-by-length",
/// "shedding-never-stops"; post-once: "post-resent"; slow-reader: "hit-drops-unsent"; races
/// and queue-races on stage 4's worker queue: "waiting-unlocked"), or "" when it points at none.
std::string classify_trap(const std::string& check, const std::string& output);

/// The one line a failed check's report starts with, "LIKELY TRAP: ..." (the manifest's
/// `trap_hints` text for the trap id, else a built-in one, then the handout section), or "".
std::string trap_hint(const std::string& check, const std::string& output,
                      const nlohmann::json& manifest_hints);

}  // namespace grader
