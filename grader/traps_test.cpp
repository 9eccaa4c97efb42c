// The trap a failed check's hint names (traps.cpp), on the evidence the checks print. The
// outputs below are cut from real reports of `make grade LAB=3` or `grader --prebuilt` on the
// planted bugs of grader/mutants/ (the mutant named beside each), kept to the lines the
// classifier reads; those marked "in the check's format" are cases no run here happened to
// show. A hint must name the trap its evidence shows, and none when the evidence fits no one
// trap.
#include <gtest/gtest.h>

#include <string>

#include "traps.h"

namespace grader {
namespace {

// ---- shutdown: one worker, a slow client, three queued clients, then SIGTERM -----------------

// close-under-lock.patch: close() destroys every queued socket under the lock.
const std::string kEveryQueuedClientClosed =
    "  [pass] a slow request is in flight\n"
    "  [pass] 3 more clients are accepted and wait for the one worker (--workers 1)\n"
    "  [pass] SIGTERM: exits 0 within 5 s with work in flight\n"
    "  [pass] the in-flight client gets its whole response\n"
    "  [FAIL] queued client 1 is told 503 (never reached a worker), not a bare close\n"
    "         a bare close: no complete response head in 0 bytes: \n"
    "  [FAIL] queued client 2 is told 503 (never reached a worker), not a bare close\n"
    "         a bare close: no complete response head in 0 bytes: \n"
    "  [FAIL] queued client 3 is told 503 (never reached a worker), not a bare close\n"
    "         a bare close: no complete response head in 0 bytes: \n";

// pointer-into-vector.patch: the queue holds pointers into a vector that reallocated under the
// second client, so that one client is lost; the others get their 503.
const std::string kOneQueuedClientLost =
    "  [pass] a slow request is in flight\n"
    "  [pass] 3 more clients are accepted and wait for the one worker (--workers 1)\n"
    "  [pass] SIGTERM: exits 0 within 5 s with work in flight\n"
    "  [pass] the in-flight client gets its whole response\n"
    "  [FAIL] queued client 1 is told 503 (never reached a worker), not a bare close\n"
    "         a bare close: no complete response head in 0 bytes: \n"
    "  [pass] queued client 2 is told 503 (never reached a worker), not a bare close\n"
    "  [pass] queued client 3 is told 503 (never reached a worker), not a bare close\n";

TEST(TrapHints, EveryQueuedClientGivenABareCloseIsCloseUnderTheLock) {
  EXPECT_EQ(classify_trap("shutdown", kEveryQueuedClientClosed), "close-under-lock");
}

TEST(TrapHints, OneQueuedClientLostAmongAnsweredOnesIsNotCloseUnderTheLock) {
  EXPECT_EQ(classify_trap("shutdown", kOneQueuedClientLost), "");
}

TEST(TrapHints, AWorkerThatNeverTookTheQueuedSlowClientIsALostWakeup) {
  // In the check's format (lost-wakeup.patch passed this check here: its one worker was still
  // awake for the first client): the slow client was still queued at the stop, so it got the
  // 503 the queued clients get.
  const std::string output =
      "  [FAIL] a slow request is in flight\n"
      "  [FAIL] 3 more clients are accepted and wait for the one worker (--workers 1)\n"
      "  [pass] SIGTERM: exits 0 within 5 s with work in flight\n"
      "  [FAIL] the in-flight client gets its whole response\n"
      "         got status 503, 75 body bytes, X-Cache 'MISS'\n"
      "  [pass] queued client 1 is told 503 (never reached a worker), not a bare close\n";
  EXPECT_EQ(classify_trap("shutdown", output), "lost-wakeup");
}

TEST(TrapHints, ASlowClientThatVanishedWithoutA503IsNotALostWakeup) {
  // In the check's format: the worker took something, but not the client (a pointer to a
  // socket that moved): the client never reached the origin and got a bare close, not the
  // queued clients' 503.
  const std::string output =
      "  [FAIL] a slow request is in flight\n"
      "  [pass] SIGTERM: exits 0 within 5 s with work in flight\n"
      "  [FAIL] the in-flight client gets its whole response\n"
      "         a bare close: no complete response head in 0 bytes: \n";
  EXPECT_EQ(classify_trap("shutdown", output), "");
}

TEST(TrapHints, ASigtermThatDoesNotEndTheStageIsACloseThatWakesNobody) {
  // In the check's format.
  const std::string output =
      "  [pass] a slow request is in flight\n"
      "  [FAIL] SIGTERM: exits 0 within 5 s with work in flight\n"
      "         it did not exit within the grace period and was killed after 10004 ms\n";
  EXPECT_EQ(classify_trap("shutdown", output), "close-wakes");
}

TEST(TrapHints, ACrashAtExitIsNotACloseThatWakesNobody) {
  // In the check's format.
  const std::string output =
      "  [pass] a slow request is in flight\n"
      "  [FAIL] SIGTERM: exits 0 within 5 s with work in flight\n"
      "         it was killed by signal 11 (Segmentation fault) after 212 ms\n";
  EXPECT_EQ(classify_trap("shutdown", output), "");
}

// ---- the hint line -----------------------------------------------------------------------

TEST(TrapHints, OneHintLineWordedByTheManifestAndNoneWithoutEvidence) {
  const nlohmann::json hints = {{"close-under-lock", "queued clients got a bare close."}};
  EXPECT_EQ(trap_hint("shutdown", kEveryQueuedClientClosed, hints),
            "LIKELY TRAP (close-under-lock): queued clients got a bare close.");
  EXPECT_EQ(trap_hint("shutdown", kOneQueuedClientLost, hints), "");
}

}  // namespace
}  // namespace grader
