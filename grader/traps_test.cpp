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
  // lost-wakeup.patch: the slow client was still queued at the stop, so it got the 503.
  const std::string output =
      "  [FAIL] a slow request is in flight\n"
      "  [FAIL] 3 more clients are accepted and wait for the one worker (--workers 1)\n"
      "  [pass] SIGTERM: exits 0 within 5 s with work in flight\n"
      "  [FAIL] the in-flight client gets its whole response\n"
      "         got status 503, 82 body bytes, X-Cache 'MISS'\n"
      "  [pass] queued client 1 is told 503 (never reached a worker), not a bare close\n"
      "  [pass] queued client 2 is told 503 (never reached a worker), not a bare close\n"
      "  [pass] queued client 3 is told 503 (never reached a worker), not a bare close\n";
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

// ---- the stress checks on pointer-into-vector.patch (make grade LAB=3) --------------------

const std::string kPointerRaces =
    "run 1: 343 responses completed; 0 requests failed before the SIGTERM, 12 after it (refused "
    "or cut: expected); the stage HUNG under load: no response completed for 15 s while the "
    "process was alive\n\n"
    "NO POINTS: the stage served nothing under load — see the deadlock check (it HUNG under "
    "load: no response completed for 15 s while the process was alive). Without a load that "
    "makes progress this check has no evidence to judge.\n\n"
    "ThreadSanitizer found a heap-use-after-free (its stacks cut to your code):\n"
    "WARNING: ThreadSanitizer: heap-use-after-free (pid=30800)\n"
    "  Read of size 4 at 0x7b0400000080 by thread T5:\n"
    "    #0 proxy::Socket::release() src/common/socket.cpp:239 (stage3-pool+0x60d33)\n"
    "    #7 proxy::WorkerPool<proxy::Socket*>::work() src/stage3-pool/worker_pool.h:122\n"
    "  Previous write of size 8 at 0x7b0400000080 by main thread:\n"
    "    #6 proxy::Socket& std::vector<proxy::Socket, std::allocator<proxy::Socket> "
    ">::emplace_back<proxy::Socket>(proxy::Socket&&) /usr/include/c++/12/bits/vector.tcc:123\n"
    "    #8 run_pool src/stage3-pool/main.cpp:53 (stage3-pool+0xdd85)\n";

const std::string kPointerDeadlock =
    "run 1: 1500 responses completed; 0 requests failed before the SIGTERM, 29 after it (refused "
    "or cut: expected); the stage HUNG under load: no response completed for 6 s while the "
    "process was alive\n\n"
    "The watchdog found a hang (under load: no response completed for 6 s while the process "
    "was alive). Every thread's stack, from gdb, before the process was killed:\n"
    "  threads 7, 6, 5, 4 (4 with this stack):\n"
    "    __pthread_cond_wait_common\n"
    "    std::condition_variable::wait<proxy::BoundedQueue<proxy::Socket*>::pop()::{lambda()#1}>"
    "(std::unique_lock<std::mutex>&, proxy::BoundedQueue<proxy::Socket*>::pop()::{lambda()#1})\n"
    "    proxy::BoundedQueue<proxy::Socket*>::pop (src/stage3-pool/bounded_queue.h:103)\n"
    "    proxy::WorkerPool<proxy::Socket*>::work (src/stage3-pool/worker_pool.h:120)\n"
    "  thread 1:\n"
    "    __GI___poll\n"
    "    proxy::Server::accept (src/common/server.cpp:113)\n";

const std::string kPointerMemory =
    "run 1: 4 responses completed; 0 requests failed before the SIGTERM, 8 after it (refused or "
    "cut: expected); the stage HUNG under load: no response completed for 30 s while the "
    "process was alive\n\n"
    "NO POINTS: the stage served nothing under load — see the deadlock check (it HUNG under "
    "load: no response completed for 30 s while the process was alive). Without a load that "
    "makes progress this check has no evidence to judge.\n\n"
    "Valgrind memcheck (the first errors, definitely lost bytes, descriptors open at exit):\n"
    "Invalid read of size 4\n"
    "   at 0x17721C: proxy::Socket::release() (socket.cpp:239)\n"
    "   by 0x17713F: proxy::Socket::Socket(proxy::Socket&&) (socket.cpp:212)\n"
    "   by 0x113B35: (anonymous namespace)::run_pool(proxy::Server&, (anonymous "
    "namespace)::PoolConfig&)::{lambda(proxy::Socket*)#1}::operator()(proxy::Socket*) const "
    "(main.cpp:50)\n"
    "   by 0x138D4B: proxy::WorkerPool<proxy::Socket*>::work() (worker_pool.h:122)\n";

TEST(TrapHints, AHeapUseAfterFreeUnderTsanIsThePointerTrapEvenWhenTheLoadHung) {
  EXPECT_EQ(classify_trap("races", kPointerRaces), "pointer-into-vector");
}

TEST(TrapHints, SleepingWorkersBesideAQueueOfSocketPointersAreNotALostWakeup) {
  EXPECT_EQ(classify_trap("deadlock", kPointerDeadlock), "pointer-into-vector");
}

TEST(TrapHints, SleepingWorkersAfterARaceAreNotCalledALostWakeup) {
  std::string output = kPointerDeadlock;
  // The same hang in a queue of values, after TSan saw a data race in the run.
  const std::string pointer = "<proxy::Socket*>";
  for (std::size_t at; (at = output.find(pointer)) != std::string::npos;) {
    output.replace(at, pointer.size(), "<proxy::Socket>");
  }
  EXPECT_EQ(classify_trap("deadlock", output), "lost-wakeup");
  output += "\nBefore the hang ThreadSanitizer reported a data race (a likely cause; stacks cut "
            "to your code):\n";
  EXPECT_EQ(classify_trap("deadlock", output), "");
}

TEST(TrapHints, AnInvalidReadUnderValgrindIsThePointerTrapEvenWhenTheLoadHung) {
  EXPECT_EQ(classify_trap("memory", kPointerMemory), "pointer-into-vector");
}

// ---- make grade-mutants on wait-if.patch and lock-order.patch -----------------------------

TEST(TrapHints, ACrashWhoseStackRunsThroughPopIsTheWaitUnderIf) {
  const std::string output =
      "run 1: 4 responses completed; 140 requests failed before the SIGTERM, 1 after it (refused "
      "or cut: expected); the stage exited with status 66\n\n"
      "The stage died under load. The sanitizer's report (stacks cut to your code):\n"
      "ERROR: ThreadSanitizer: SEGV on unknown address (pc 0x7f141da903af bp 0x7f1418f3afd0 sp "
      "0x7f1418f3af90 T3409)\n"
      "==3387==The signal is caused by a READ memory access.\n"
      "    ...\n"
      "    #3 proxy::Socket::release() src/common/socket.cpp:239 (stage3-pool+0x61013)\n"
      "    #4 proxy::Socket::Socket(proxy::Socket&&) src/common/socket.cpp:212\n"
      "    #5 proxy::BoundedQueue<proxy::Socket>::pop() /usr/include/c++/12/bits/"
      "stl_construct.h:119 (stage3-pool+0x360f0)\n"
      "    #6 proxy::WorkerPool<proxy::Socket>::work() src/stage3-pool/worker_pool.h:120\n";
  EXPECT_EQ(classify_trap("deadlock", output), "wait-under-if");
  EXPECT_EQ(classify_trap("races", output), "wait-under-if");
}

TEST(TrapHints, AHangWithThreadsBlockedOnMutexesIsLockOrderNotALostWakeup) {
  // lock-order.patch hung before TSan could report the inversion; one worker sits in a
  // condition-variable wait too (re-taking its mutex), which once made this a "lost wakeup".
  const std::string output =
      "run 1: 0 responses completed; 0 requests failed before the SIGTERM, 32 after it (refused "
      "or cut: expected); the stage HUNG under load: no response completed for 6 s while the "
      "process was alive\n\n"
      "The watchdog found a hang (under load: no response completed for 6 s while the process "
      "was alive). Every thread's stack, from gdb, before the process was killed:\n"
      "  thread 7:\n"
      "    futex_wait\n"
      "    __GI___lll_lock_wait\n"
      "    __pthread_mutex_cond_lock\n"
      "    __pthread_cond_wait_common\n"
      "    ___pthread_cond_wait\n"
      "    proxy::BoundedQueue<proxy::Socket>::pop (src/stage3-pool/bounded_queue.h:109)\n"
      "  thread 6:\n"
      "    futex_wait\n"
      "    __GI___lll_lock_wait\n"
      "    ___pthread_mutex_lock\n"
      "    __interceptor_pthread_mutex_lock\n"
      "    (anonymous namespace)::ObservedCache::find (src/stage3-pool/main.cpp:44)\n"
      "  thread 5:\n"
      "    futex_wait\n"
      "    ___pthread_mutex_lock\n"
      "    proxy::BoundedQueue<proxy::Socket>::size (src/stage3-pool/bounded_queue.h:142)\n"
      "    (anonymous namespace)::ObservedCache::insert (src/stage3-pool/main.cpp:49)\n";
  EXPECT_EQ(classify_trap("deadlock", output), "lock-order");
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
