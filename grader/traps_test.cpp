// The trap a failed check's hint names (traps.cpp), on the evidence the checks print. The
// outputs below are cut from real reports of `make grade LAB=3` or `grader --prebuilt` on the
// planted bugs of grader/mutants/ (the mutant named beside each), kept to the lines the
// classifier reads; those marked "in the check's format" are cases no run here happened to
// show. A hint must name the trap its evidence shows, and none when the evidence fits no one
// trap.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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
    "    #0 proxy::Socket::release() src/common/net/socket.cpp:239 (stage3-pool+0x60d33)\n"
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
    "    proxy::Server::accept (src/common/server/server.cpp:113)\n";

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
      "    #3 proxy::Socket::release() src/common/net/socket.cpp:239 (stage3-pool+0x61013)\n"
      "    #4 proxy::Socket::Socket(proxy::Socket&&) src/common/net/socket.cpp:212\n"
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

// ---- make grade-mutants on wait-if.patch: the hang after the wait under `if` --------------

TEST(TrapHints, AHangAfterAWorkerMovedFromAnEmptyQueueIsTheWaitUnderIfNotLockOrder) {
  // The worker that popped an empty deque corrupted the queue while holding its lock; the other
  // workers then waited for that lock for the rest of the run, all at one place in pop. That
  // once drew the lock-order hint.
  const std::string output =
      "run 1: 537 responses completed; 0 requests failed before the SIGTERM, 32 after it (refused "
      "or cut: expected); the stage HUNG under load: no response completed for 6 s while the "
      "process was alive\n\n"
      "The watchdog found a hang (under load: no response completed for 6 s while the process "
      "was alive). Every thread's stack, from gdb, before the process was killed:\n"
      "  threads 7, 6, 5, 4 (4 with this stack):\n"
      "    futex_wait\n"
      "    __GI___lll_lock_wait\n"
      "    ___pthread_mutex_lock\n"
      "    __interceptor_pthread_mutex_lock\n"
      "    std::mutex::lock\n"
      "    proxy::BoundedQueue<proxy::Socket>::pop (src/stage3-pool/bounded_queue.h:100)\n"
      "    proxy::WorkerPool<proxy::Socket>::work (src/stage3-pool/worker_pool.h:138)\n"
      "  thread 3:\n"
      "    __interceptor_poll\n"
      "    proxy::Shutdown::watch (src/common/server/shutdown.cpp:81)\n"
      "  thread 1:\n"
      "    std::_V2::condition_variable_any::wait<std::unique_lock<std::mutex>, "
      "proxy::BoundedQueue<proxy::Socket>::push(proxy::Socket&&, std::stop_token)::{lambda()#1}>"
      "(std::unique_lock<std::mutex>&, std::stop_token, proxy::BoundedQueue<proxy::Socket>::push"
      "(proxy::Socket&&, std::stop_token)::{lambda()#1})\n"
      "    proxy::BoundedQueue<proxy::Socket>::push (src/stage3-pool/bounded_queue.h:62)\n"
      "    (anonymous namespace)::run_pool (src/stage3-pool/main.cpp:52)\n"
      "At the hang the stage held 3 descriptors more than when idle (the clients it had "
      "accepted, in its accept loop's hands, queued or being served, and connections to "
      "origins).\n\n"
      "Before the hang ThreadSanitizer reported a heap-use-after-free (a likely cause; stacks "
      "cut to your code):\n"
      "==================\n"
      "WARNING: ThreadSanitizer: heap-use-after-free (pid=11827)\n"
      "  Read of size 4 at 0x7b0800000ad8 by thread T2 (mutexes: write M39):\n"
      "    #0 proxy::Socket::release() src/common/net/socket.cpp:239 (stage3-pool+0x61163)\n"
      "    #1 proxy::Socket::Socket(proxy::Socket&&) src/common/net/socket.cpp:212\n"
      "    #2 proxy::BoundedQueue<proxy::Socket>::pop() /usr/include/c++/12/bits/"
      "stl_construct.h:119 (stage3-pool+0x2f590)\n"
      "    #3 proxy::WorkerPool<proxy::Socket>::work() src/stage3-pool/worker_pool.h:138\n"
      "    ...\n\n"
      "  Previous write of size 8 at 0x7b0800000ad8 by main thread:\n"
      "    ...\n"
      "    #18 proxy::start_stage(int, char**, proxy::StageDefinition const&) src/common/server/"
      "server.cpp:222\n";
  EXPECT_EQ(classify_trap("deadlock", output), "wait-under-if");
}

TEST(TrapHints, ThreadsThatAllWaitForOneLockAtOnePlaceAreNotALockOrderCycle) {
  // In the check's format: no crash report, only the hang. A cycle needs two stacks blocked on
  // locks; four threads with one stack wait for one lock whose holder is gone.
  const std::string output =
      "the stage HUNG under load: no response completed for 6 s while the process was alive\n"
      "  threads 7, 6, 5, 4 (4 with this stack):\n"
      "    __GI___lll_lock_wait\n"
      "    ___pthread_mutex_lock\n"
      "    proxy::BoundedQueue<proxy::Socket>::pop (src/stage3-pool/bounded_queue.h:100)\n"
      "  thread 1:\n"
      "    __GI___poll\n"
      "    proxy::Server::accept (src/common/server/server.cpp:113)\n";
  EXPECT_EQ(classify_trap("deadlock", output), "");
}

// ---- make grade-mutants on pop-no-notify.patch (and lost-wakeup.patch for contrast) --------

// pop-no-notify.patch: the accept loop sleeps in push's wait for room; the workers emptied the
// queue and sleep in pop. With `held` descriptors held at the hang.
std::string sleeping_pool(int held) {
  return "run 1: 3 responses completed; 0 requests failed before the SIGTERM, 32 after it "
         "(refused or cut: expected); the stage HUNG under load: no response completed for 6 s "
         "while the process was alive\n\n"
         "The watchdog found a hang (under load: no response completed for 6 s while the "
         "process was alive). Every thread's stack, from gdb, before the process was killed:\n"
         "  threads 7, 6, 5, 4 (4 with this stack):\n"
         "    __pthread_cond_wait_common\n"
         "    ___pthread_cond_wait\n"
         "    __interceptor_pthread_cond_wait\n"
         "    std::condition_variable::wait<proxy::BoundedQueue<proxy::Socket>::pop()::{lambda()"
         "#1}>(std::unique_lock<std::mutex>&, proxy::BoundedQueue<proxy::Socket>::pop()::"
         "{lambda()#1})\n"
         "    proxy::BoundedQueue<proxy::Socket>::pop (src/stage3-pool/bounded_queue.h:103)\n"
         "    proxy::WorkerPool<proxy::Socket>::work (src/stage3-pool/worker_pool.h:138)\n"
         "  thread 3:\n"
         "    __GI___poll\n"
         "    __interceptor_poll\n"
         "    proxy::Shutdown::watch (src/common/server/shutdown.cpp:81)\n"
         "  thread 1:\n"
         "    __pthread_cond_wait_common\n"
         "    ___pthread_cond_wait\n"
         "    __interceptor_pthread_cond_wait\n"
         "    std::_V2::condition_variable_any::wait<std::unique_lock<std::mutex>, proxy::"
         "BoundedQueue<proxy::Socket>::push(proxy::Socket&&, std::stop_token)::{lambda()#1}>"
         "(std::unique_lock<std::mutex>&, std::stop_token, proxy::BoundedQueue<proxy::Socket>::"
         "push(proxy::Socket&&, std::stop_token)::{lambda()#1})\n"
         "    proxy::BoundedQueue<proxy::Socket>::push (src/stage3-pool/bounded_queue.h:62)\n"
         "    proxy::WorkerPool<proxy::Socket>::submit (src/stage3-pool/worker_pool.h:95)\n"
         "    (anonymous namespace)::run_pool (src/stage3-pool/main.cpp:52)\n"
         "At the hang the stage held " + std::to_string(held) + " descriptors more than when "
         "idle (the clients it had accepted, in its accept loop's hands, queued or being served, "
         "and connections to origins).\n";
}

TEST(TrapHints, AnAcceptLoopWaitingForRoomInAnEmptiedQueueIsAPopThatNotifiesNobody) {
  // The one descriptor is the client in the accept loop's hands: none is queued.
  EXPECT_EQ(classify_trap("deadlock", sleeping_pool(1)), "pop-notifies-nobody");
}

TEST(TrapHints, AnAcceptLoopWaitingForRoomBesideQueuedClientsIsAPushThatNotifiesNobody) {
  // lost-wakeup.patch hangs with the same stacks, but the queue is full (2 queued and the one
  // in the accept loop's hands): the workers missed the items.
  EXPECT_EQ(classify_trap("deadlock", sleeping_pool(3)), "lost-wakeup");
}

TEST(TrapHints, WithoutTheDescriptorCountASleepingPoolStaysALostWakeup) {
  std::string output = sleeping_pool(1);
  output.erase(output.find("At the hang"));
  EXPECT_EQ(classify_trap("deadlock", output), "lost-wakeup");
}

// ---- make grade-mutants on detached-workers.patch ------------------------------------------

TEST(TrapHints, AnInFlightClientCutByAStopThatAnsweredTheQueueIsADetachedWorker) {
  const std::string output =
      "  [pass] a slow request is in flight\n"
      "  [pass] 3 more clients are accepted and wait for the one worker (--workers 1)\n"
      "  [pass] SIGTERM: exits 0 within 5 s with work in flight\n"
      "  [FAIL] the in-flight client gets its whole response\n"
      "         a bare close: no complete response head in 0 bytes: \n"
      "  [pass] queued client 1 is told 503 (never reached a worker), not a bare close\n"
      "  [pass] queued client 2 is told 503 (never reached a worker), not a bare close\n"
      "  [pass] queued client 3 is told 503 (never reached a worker), not a bare close\n";
  EXPECT_EQ(classify_trap("shutdown", output), "detached-workers");
  // A wrong body is not a cut: no hint.
  std::string wrong_body = output;
  wrong_body.replace(wrong_body.find("a bare close: no complete response head in 0 bytes: "),
                     52, "got status 200, 100 body bytes, X-Cache 'MISS'");
  EXPECT_EQ(classify_trap("shutdown", wrong_body), "");
}

TEST(TrapHints, ARaceBetweenTheTeardownAndAWorkerIsADetachedWorkerNotADataRace) {
  const std::string output =
      "run 1: 4178 responses completed; 0 requests failed before the SIGTERM, 1334 after it "
      "(refused or cut: expected); the stage exited with status 66; SIGTERM came with every "
      "worker busy and the queue full\n\n"
      "ThreadSanitizer found a data race (its stacks cut to your code):\n"
      "==================\n"
      "WARNING: ThreadSanitizer: data race (pid=13410)\n"
      "  Read of size 8 at 0x7b2800000070 by main thread:\n"
      "    ...\n"
      "    #4 proxy::LruCache::~LruCache() src/common/cache/lru_cache.h:16\n"
      "    #8 proxy::LockedCache::~LockedCache() src/common/cache/locked_cache.h:25\n"
      "    #12 proxy::Server::~Server() src/common/server/server.h:61 (stage3-pool+0xfe9e)\n"
      "    #16 proxy::StageStart::~StageStart() src/common/server/server.h:136\n"
      "    #17 main src/stage3-pool/main.cpp:102 (stage3-pool+0xe5b2)\n\n"
      "  Previous write of size 8 at 0x7b2800000070 by thread T5 (mutexes: write M44):\n"
      "    #5 proxy::LruCache::insert(std::basic_string_view<char, std::char_traits<char> >, "
      "std::shared_ptr<proxy::CachedResponse const>) src/common/cache/lru_cache.cpp:38\n"
      "    #11 proxy::Server::serve(proxy::Socket) src/common/server/server.cpp:172\n"
      "    #17 proxy::WorkerPool<proxy::Socket>::work() src/stage3-pool/worker_pool.h:140\n"
      "    ...\n\n"
      "  Location is heap block of size 152 at 0x7b2800000000 allocated by main thread:\n"
      "    #3 proxy::start_stage(int, char**, proxy::StageDefinition const&) src/common/server/"
      "server.cpp:222\n\n"
      "  Thread T5 (tid=13429, finished) created by main thread at:\n"
      "    #2 proxy::WorkerPool<proxy::Socket>::WorkerPool(unsigned long, unsigned long, "
      "std::function<void (proxy::Socket)>) src/stage3-pool/worker_pool.h:77\n"
      "    #3 run_pool src/stage3-pool/main.cpp:48\n\n"
      "SUMMARY: ThreadSanitizer: data race /usr/include/c++/12/bits/hashtable.h:466\n";
  EXPECT_EQ(classify_trap("races", output), "detached-workers");
}

// detached-workers.patch, another run: a worker still reads what lived in run_pool's frame
// (the pool is a local there) while main, past run_pool, writes the same stack memory.
const std::string kWorkerAgainstMainsStack =
    "run 1: 4813 responses completed; 0 requests failed before the SIGTERM, 62 after it (refused "
    "or cut: expected); the stage exited with status 66; SIGTERM came with every worker busy "
    "and the queue full\n\n"
    "ThreadSanitizer found a data race (its stacks cut to your code):\n"
    "==================\n"
    "WARNING: ThreadSanitizer: data race (pid=1480)\n"
    "  Write of size 8 at 0x7ffe611666d0 by main thread:\n"
    "    ...\n"
    "    #3 main src/stage3-pool/main.cpp:101 (stage3-pool+0xe530)\n\n"
    "  Previous read of size 8 at 0x7ffe611666d0 by thread T3:\n"
    "    ...\n"
    "    #4 proxy::WorkerPool<proxy::Socket>::work() src/stage3-pool/worker_pool.h:140\n"
    "    ...\n\n"
    "  Location is stack of main thread.\n\n"
    "  Thread T3 (tid=1497, running) created by main thread at:\n"
    "    #2 proxy::WorkerPool<proxy::Socket>::WorkerPool(unsigned long, unsigned long, "
    "std::function<void (proxy::Socket)>) src/stage3-pool/worker_pool.h:77\n"
    "    #3 run_pool src/stage3-pool/main.cpp:48 (stage3-pool+0xde38)\n"
    "    #4 main src/stage3-pool/main.cpp:98 (stage3-pool+0xde38)\n\n"
    "SUMMARY: ThreadSanitizer: data race /usr/include/c++/12/bits/basic_string.h:204\n";

TEST(TrapHints, AWorkerRacingMainPastThePoolsFrameIsADetachedWorker) {
  EXPECT_EQ(classify_trap("races", kWorkerAgainstMainsStack), "detached-workers");
}

TEST(TrapHints, AWorkerRacingTheAcceptLoopIsADataRace) {
  // In the check's format: the same race with the main thread still in run_pool (the accept
  // loop), where the pool is alive: a field outside its lock, not a teardown.
  std::string output = kWorkerAgainstMainsStack;
  output.replace(output.find("    #3 main src/stage3-pool/main.cpp:101"), 40,
                 "    #2 run_pool src/stage3-pool/main.cpp:52");
  EXPECT_EQ(classify_trap("races", output), "data-race");
}

TEST(TrapHints, AWorkerLockingAMutexOfUninitialisedBytesIsADetachedWorker) {
  // detached-workers.patch under Valgrind, a third run: a worker woke in pop after run_pool
  // returned, and locked the queue's mutex in a stack frame since reused.
  const std::string output =
      "run 1: 1606 responses completed; 0 requests failed before the SIGTERM, 136 after it "
      "(refused or cut: expected); the stage was killed by signal 6 (Aborted); SIGTERM came "
      "with every worker busy and the queue full\n\n"
      "Valgrind memcheck (the first errors, definitely lost bytes, descriptors open at exit):\n"
      "Conditional jump or move depends on uninitialised value(s)\n"
      "   at 0x4B2337E: pthread_mutex_lock@@GLIBC_2.2.5 (pthread_mutex_lock.c:84)\n"
      "   by 0x115782: __gthread_mutex_lock(pthread_mutex_t*) (gthr-default.h:749)\n"
      "   by 0x119817: std::mutex::lock() (std_mutex.h:100)\n"
      "   by 0x1398C7: proxy::BoundedQueue<proxy::Socket>::pop() (bounded_queue.h:100)\n"
      "   by 0x1334A9: proxy::WorkerPool<proxy::Socket>::work() (worker_pool.h:138)\n\n"
      "ERROR SUMMARY: 7 errors from 7 contexts (suppressed: 0 from 0)\n";
  EXPECT_EQ(classify_trap("memory", output), "detached-workers");
}

TEST(TrapHints, TheQueueFreedUnderAWorkerInPopIsADetachedWorkerNotTheWaitUnderIf) {
  // In the check's format: the worker woke in pop after the pool (and its queue) was destroyed;
  // it reads the queue's fields, it moves no item out.
  const std::string output =
      "ThreadSanitizer found a heap-use-after-free (its stacks cut to your code):\n"
      "==================\n"
      "WARNING: ThreadSanitizer: heap-use-after-free (pid=1)\n"
      "  Read of size 1 at 0x7b4400000108 by thread T3:\n"
      "    #0 proxy::BoundedQueue<proxy::Socket>::pop()::{lambda()#1}::operator()() const "
      "src/stage3-pool/bounded_queue.h:103\n"
      "    #1 proxy::BoundedQueue<proxy::Socket>::pop() src/stage3-pool/bounded_queue.h:103\n"
      "    #2 proxy::WorkerPool<proxy::Socket>::work() src/stage3-pool/worker_pool.h:138\n\n"
      "  Previous write of size 8 at 0x7b4400000108 by main thread:\n"
      "    #0 operator delete(void*, unsigned long)\n"
      "    #1 proxy::BoundedQueue<proxy::Socket>::~BoundedQueue() src/stage3-pool/"
      "bounded_queue.h:25\n"
      "    #2 proxy::WorkerPool<proxy::Socket>::~WorkerPool() src/stage3-pool/worker_pool.h:84\n"
      "    #3 run_pool src/stage3-pool/main.cpp:66\n\n"
      "SUMMARY: ThreadSanitizer: heap-use-after-free src/stage3-pool/bounded_queue.h:103\n";
  EXPECT_EQ(classify_trap("races", output), "detached-workers");
  EXPECT_EQ(classify_trap("deadlock", output), "");
}

TEST(TrapHints, AnInvalidReadOnAWorkerOfAFreedPoolIsADetachedWorker) {
  // In the check's format: Valgrind's invalid read, the block freed by the pool's destructor.
  const std::string output =
      "Valgrind memcheck (the first errors, definitely lost bytes, descriptors open at exit):\n"
      "Invalid read of size 1\n"
      "   at 0x13A2B1: proxy::BoundedQueue<proxy::Socket>::pop()::{lambda()#1}::operator()() "
      "const (bounded_queue.h:103)\n"
      "   by 0x1334CC: proxy::WorkerPool<proxy::Socket>::work() (worker_pool.h:138)\n"
      " Address 0x4e4c0f8 is 120 bytes inside a block of size 200 free'd\n"
      "   at 0x484399B: operator delete(void*, unsigned long)\n"
      "   by 0x113F21: proxy::WorkerPool<proxy::Socket>::~WorkerPool() (worker_pool.h:84)\n"
      "   by 0x113C02: (anonymous namespace)::run_pool(proxy::Server&, (anonymous namespace)::"
      "PoolConfig&) (main.cpp:66)\n";
  EXPECT_EQ(classify_trap("memory", output), "detached-workers");
  // The pointer trap's invalid read (a block the vector's reallocation freed) stays its own.
  EXPECT_EQ(classify_trap("memory", kPointerMemory), "pointer-into-vector");
}

TEST(TrapHints, AnOriginConnectionOpenAtExitIsADetachedWorkerNotALeakedSocket) {
  // detached-workers.patch under Valgrind: the process ended while its workers were still
  // fetching from origins.
  const std::string output =
      "run 1: 1430 responses completed; 0 requests failed before the SIGTERM, 180 after it "
      "(refused or cut: expected); the stage exited with status 0; SIGTERM came with every "
      "worker busy and the queue full\n\n"
      "Valgrind memcheck (the first errors, definitely lost bytes, descriptors open at exit):\n"
      "Open AF_INET socket 10: 127.0.0.1:35450 <-> 127.0.0.1:40181\n"
      "   at 0x4BA1DC7: socket (syscall-template.S:120)\n"
      "   by 0x177E09: proxy::connect_tcp(std::__cxx11::basic_string<char, std::char_traits<char>"
      ", std::allocator<char> > const&, unsigned short, std::chrono::duration<long, std::ratio<1l"
      ", 1000l> >) (socket.cpp:381)\n"
      "   by 0x1B0DBB: proxy::connect_to_origin(proxy::Context&, std::__cxx11::basic_string<char,"
      " std::char_traits<char>, std::allocator<char> > const&, unsigned short) "
      "(origin_response.cpp:171)\n"
      "   by 0x18E5A6: proxy::(anonymous namespace)::fetch_from_origin(proxy::Context&, "
      "proxy::Request const&, proxy::AbsoluteUri const&, proxy::BodyFraming const&, "
      "std::basic_string_view<char, std::char_traits<char> >) (proxy.cpp:245)\n"
      "   by 0x147B19: proxy::Server::serve(proxy::Socket) (server.cpp:172)\n\n"
      "Open AF_INET socket 11: 127.0.0.1:44545 <-> 127.0.0.1:57836\n"
      "   at 0x4BA1FA8: accept4 (accept4.c:31)\n"
      "   by 0x178936: proxy::accept_client(proxy::Socket const&, int) (socket.cpp:427)\n"
      "   by 0x147696: proxy::Server::accept() (server.cpp:122)\n"
      "   by 0x113C08: (anonymous namespace)::run_pool(proxy::Server&, (anonymous namespace)::"
      "PoolConfig&) (main.cpp:49)\n"
      "   by 0x11433C: main (main.cpp:98)\n\n"
      "FILE DESCRIPTORS: 8 open (3 std) at exit.\n"
      "ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 0 from 0)\n";
  EXPECT_EQ(classify_trap("memory", output), "detached-workers");
  // leaked-socket.patch: only the client the accept loop released is open.
  const std::string leaked = output.substr(output.find("Open AF_INET socket 11"));
  EXPECT_EQ(classify_trap("memory", leaked), "leaked-socket");
}

// ---- origin-limit (stage 4): a burst under --origin-limit 4, then --origin-limit 1 held by /stall

// A check's report as the grader prints it: each of `lines` passed, except those that start
// with one of `failed`.
std::string check_run(const std::vector<std::string>& lines,
                      const std::vector<std::string>& failed) {
  std::string out;
  for (const std::string& line : lines) {
    const bool fail = std::any_of(failed.begin(), failed.end(), [&](const std::string& f) {
      return line.rfind(f, 0) == 0;
    });
    out += std::string(fail ? "  [FAIL] " : "  [pass] ") + line + "\n";
  }
  return out;
}

// The lines every run prints, passed; each case below fails some of them (cut from `grader
// --prebuilt` on each stage 4 mutant of grader/mutants/).
std::string origin_limit_run(const std::vector<std::string>& failed) {
  const std::vector<std::string> lines = {
      "burst: every one of 24 concurrent misses (unique URLs, /delay/100/bytes/300) is answered "
      "200, byte-exact",
      "at most --origin-limit 4 requests in service at the origin at once",
      "the burst overlapped at the origin (2 or more in service at once), else the limit was not "
      "put to the test",
      "a cacheable object is fetched (it leaves a kept origin connection behind)",
      "the only permit (--origin-limit 1) is held by a /stall request the origin never answers",
      "a hit never waits for its origin's limit: the cached object is answered within 5 s while "
      "the only permit is held",
      "a miss past the limit stays off the origin while the only permit is held",
      "that miss is counted waiting in /metrics (proxy_origin_waiting)",
      "a client's hang-up does not give the permit back while the origin still serves its "
      "request: the waiting miss stays off the origin for 1 s after the /stall's client goes",
      "a permit comes back when its request ends: the origin ends the /stall and the waiting "
      "miss is answered 200, byte-exact, within 10 s",
      "a permit comes back when its client hangs up and its origin ends it (round 2): the next "
      "miss is answered within 10 s",
      "a worker's client hang-up does not give the permit back while the origin still serves "
      "its request: a HEAD's client goes, and the next miss reaches the origin only once the "
      "HEAD is done (at most 1 in service)",
      "meanwhile another origin is served within 5 s (the stage itself is not stuck)",
  };
  return check_run(lines, failed);
}

// poller-ignores-limit.patch: the origin counted 24 at once, and the miss behind a held permit
// reached it.
TEST(TrapHints, MoreAtTheOriginThanTheLimitIsTheLimitBypassed) {
  EXPECT_EQ(classify_trap("origin-limit",
                          origin_limit_run({"at most --origin-limit", "a miss past the limit",
                                            "that miss is counted waiting"})),
            "origin-limit-bypassed");
  // Either line alone is the origin's own evidence.
  EXPECT_EQ(classify_trap("origin-limit", origin_limit_run({"at most --origin-limit"})),
            "origin-limit-bypassed");
  EXPECT_EQ(classify_trap("origin-limit", origin_limit_run({"a miss past the limit"})),
            "origin-limit-bypassed");
}

// permit-leak.patch: after the /stall ended its origin served nothing more, while another
// origin was served.
TEST(TrapHints, AnOriginStarvedAfterAHangUpIsAPermitLeak) {
  EXPECT_EQ(classify_trap("origin-limit", origin_limit_run({"a permit comes back"})),
            "permit-leak");
  // The worker's hang-up line after it starves as well: still the leak.
  EXPECT_EQ(classify_trap("origin-limit",
                          origin_limit_run({"a permit comes back", "a worker's client hang-up"})),
            "permit-leak");
}

// permit-freed-on-hang-up.patch: the waiting miss reached the origin the moment the /stall's
// client hung up, while the origin still served the /stall.
TEST(TrapHints, AMissLetInAtAHangUpIsAPermitFreedOnHangUp) {
  EXPECT_EQ(classify_trap("origin-limit",
                          origin_limit_run({"a client's hang-up does not give the permit back"})),
            "permit-freed-on-hang-up");
  // worker-permit-freed-on-hang-up.patch: the same on a worker's request.
  EXPECT_EQ(classify_trap("origin-limit",
                          origin_limit_run({"a worker's client hang-up does not give the permit"})),
            "permit-freed-on-hang-up");
}

// hits-wait.patch: the hit waited 5 s, and the miss behind the same permit went on once it came
// back.
TEST(TrapHints, AHitThatWaitedForAFullLimitIsHitsWait) {
  EXPECT_EQ(classify_trap("origin-limit", origin_limit_run({"a hit never waits"})), "hits-wait");
}

// In the check's format: a stage that stops answering fails the hit, the permits' lines and the
// other origin alike; that is none of the three traps, and one that only answers nothing from
// the start never got a cached object to hit.
TEST(TrapHints, AStageThatStoppedAnsweringIsNoOriginLimitTrap) {
  EXPECT_EQ(classify_trap("origin-limit",
                          origin_limit_run({"a hit never waits", "a permit comes back",
                                            "meanwhile another origin"})),
            "");
  EXPECT_EQ(classify_trap("origin-limit",
                          origin_limit_run({"burst:", "the burst overlapped", "a cacheable object",
                                            "a hit never waits", "a permit comes back",
                                            "meanwhile another origin"})),
            "");
  // A burst never overlapped proves nothing either way.
  EXPECT_EQ(classify_trap("origin-limit", origin_limit_run({"the burst overlapped"})), "");
}

TEST(TrapHints, OriginLimitHintsNameTheirTraps) {
  EXPECT_EQ(trap_hint("origin-limit", origin_limit_run({"a hit never waits"}), nlohmann::json())
                .rfind("LIKELY TRAP (hits-wait): hits wait for the origin's limit", 0),
            0u);
  EXPECT_NE(trap_hint("origin-limit", origin_limit_run({"a permit comes back"}), nlohmann::json())
                .find("a permit is never given back (leaked on hang-up or failure)"),
            std::string::npos);
  EXPECT_NE(trap_hint("origin-limit", origin_limit_run({"at most --origin-limit"}),
                      nlohmann::json())
                .find("the limit is not honoured on every path (the poller's misses?)"),
            std::string::npos);
}

// ---- shedding (stage 4): one busy worker, a burst queued behind it, a newcomer, the drain

// The check's lines (grader/checks_shedding.cpp), passed; each case below fails some of them,
// as each stage 4 shedding mutant of grader/mutants/ does.
std::string shedding_run(const std::vector<std::string>& failed) {
  const std::vector<std::string> lines = {
      "the one worker (--workers 1) is busy with a slow origin",
      "a long queue that is young is not shed: 6 requests waiting behind the busy worker for "
      "less than --shed-delay-ms all stay queued",
      "a standing queue sheds a newcomer at once: 503 well before the busy worker is free",
      "the 503 says Retry-After: 1",
      "the queue drains: the slow request and every queued one are answered (served or 503)",
      "a drained queue stops shedding: 3 requests sent one at a time after it emptied are "
      "served (200, byte-exact)",
      "SIGTERM: the stage stops and exits 0",
  };
  return check_run(lines, failed);
}

// never-sheds.patch: the newcomer waited behind the standing queue and was refused only when
// the worker reached it, seconds later; the young queue and the drain were fine.
TEST(TrapHints, ANewcomerQueuedBehindAStandingQueueIsNeverSheds) {
  EXPECT_EQ(classify_trap("shedding", shedding_run({"a standing queue sheds"})), "never-sheds");
  EXPECT_NE(trap_hint("shedding", shedding_run({"a standing queue sheds"}), nlohmann::json())
                .find("LIKELY TRAP (never-sheds): a newcomer joined a queue that had stood"),
            std::string::npos);
}

// A stage 4 that never answers a flood 503 fails queue-bound on that line: the same trap.
TEST(TrapHints, AFloodNeverToldA503IsNeverSheds) {
  const std::string output =
      "  [pass] the one worker (--workers 1) is busy with a slow origin\n"
      "  [FAIL] past a full queue a stage that sheds load answers each newcomer 503 at once\n"
      "         not one of 12 clients flooding a full queue (--workers 1 --queue 2) was told 503\n";
  EXPECT_EQ(classify_trap("queue-bound", output), "never-sheds");
  EXPECT_EQ(classify_trap("queue-bound", "  [FAIL] while the queue is full the accept loop stops accepting\n"), "");
}

// sheds-by-length.patch: two of the young burst refused at once (four already waiting).
TEST(TrapHints, AYoungQueueRefusedForItsLengthIsShedsByLength) {
  EXPECT_EQ(classify_trap("shedding", shedding_run({"a long queue that is young"})),
            "sheds-by-length");
  // A length threshold past the burst never sheds the young queue; it fails as never-sheds.
  EXPECT_EQ(trap_hint("shedding", shedding_run({"a long queue that is young"}), nlohmann::json())
                .rfind("LIKELY TRAP (sheds-by-length): requests were refused while the queue was "
                       "long but young", 0),
            0u);
}

// shedding-never-stops.patch: refused while standing, as it should be, and still refusing once
// nothing was queued.
TEST(TrapHints, RefusalsAfterTheQueueDrainedAreSheddingThatNeverStops) {
  EXPECT_EQ(classify_trap("shedding", shedding_run({"a drained queue stops shedding"})),
            "shedding-never-stops");
  EXPECT_NE(trap_hint("shedding", shedding_run({"a drained queue stops shedding"}),
                      nlohmann::json())
                .find("a flag set once, never cleared"),
            std::string::npos);
}

// A stage that stops answering fails the newcomer, the drain and the requests after it: none of
// the three traps; nor is a worker never held (nothing was tested).
TEST(TrapHints, AStageThatStoppedAnsweringIsNoSheddingTrap) {
  EXPECT_EQ(classify_trap("shedding",
                          shedding_run({"a standing queue sheds", "the queue drains",
                                        "a drained queue stops shedding"})),
            "");
  EXPECT_EQ(classify_trap("shedding", shedding_run({"the one worker", "a standing queue sheds"})),
            "");
}

// post-resent.patch: the POST went out on the kept connection the origin dropped, then again.
TEST(TrapHints, APostTheOriginReceivedTwiceIsPostResent) {
  const std::string output =
      "  [pass] a first request leaves a kept origin connection\n"
      "  (the stage's /metrics: one origin connection idle in its pool)\n"
      "  [FAIL] a POST reaches the origin at most once, even when the origin drops the kept "
      "connection it could have taken\n"
      "         the origin received the POST 2 times\n"
      "  [pass] the POST is answered: 200 with the origin's echo of its body\n";
  EXPECT_EQ(classify_trap("post-once", output), "post-resent");
  EXPECT_NE(trap_hint("post-once", output, nlohmann::json()).find("LIKELY TRAP (post-resent)"),
            std::string::npos);
  // A POST answered wrongly but sent once is no resend.
  EXPECT_EQ(classify_trap("post-once", "  [pass] a POST reaches the origin at most once\n"
                                       "  [FAIL] the POST is answered\n"),
            "");
}

// ---- slow-reader (stage 4): hits asked for without reading, then read slowly ----------------

// hit-drops-unsent.patch: the poller's send stopped short at a full socket and the rest was
// dropped, so the next response's head came where the body should have gone on.
const std::string kHitCutShort =
    "  [pass] the objects are fetched and stored: 60000 and 300000 bytes, byte-exact\n"
    "  (each connection asked for 76 hits or so, 5760 kB of bodies, past the 4096 KiB a send "
    "buffer may grow to; read in 1975 ms)\n"
    "  [FAIL] 12 clients, each asking for its hits one at a time (60000-byte bodies, every "
    "sixteenth 300000) without reading, then reading slowly after 500 ms, get every response "
    "whole and byte-exact\n"
    "         794 of 874 responses whole and byte-exact (60.9 MB received for 66.6 MB of "
    "bodies)\n"
    "         client 1: response 65 of 76 (a 60000-byte body, small enough for the poller to "
    "send): not byte-exact from body byte 14912, where the next response's head began: the "
    "rest of this response was never sent (bytes the client's socket did not take at once, "
    "lost)\n"
    "  [FAIL] one keep-alive connection with such hits all pipelined at once, not read for 500 "
    "ms, then read slowly, gets every response whole and byte-exact, in order\n"
    "         38 of 76 responses whole and byte-exact (2.8 MB received for 5.8 MB of bodies)\n"
    "  [pass] every response was a hit: the origin was asked for each object once\n"
    "  [pass] SIGTERM: the stage stops and exits 0\n";

TEST(TrapHints, TheNextResponseWhereABodyShouldGoOnIsAHitThatDropsItsUnsentBytes) {
  EXPECT_EQ(classify_trap("slow-reader", kHitCutShort), "hit-drops-unsent");
  EXPECT_EQ(trap_hint("slow-reader", kHitCutShort, nlohmann::json())
                .rfind("LIKELY TRAP (hit-drops-unsent): a response lost bytes on their way to a "
                       "client that read slowly", 0),
            0u);
}

// In the check's format: a stage that stops sending leaves a body short with nothing after it
// (the rest kept and never sent, or a hang), and one that never stored the objects has served
// nothing to judge; neither shows bytes dropped.
TEST(TrapHints, ABodyThatStoppedOrObjectsNeverStoredAreNoDroppedBytes) {
  EXPECT_EQ(classify_trap("slow-reader",
                          "  [pass] the objects are fetched and stored: 60000 and 300000 bytes, "
                          "byte-exact\n"
                          "  [FAIL] 12 clients, each asking for its hits one at a time\n"
                          "         client 1: 47 of 76 responses whole, then 41230 bytes of "
                          "response 48 (a 60000-byte body, small enough for the poller to send) "
                          "and nothing more for 10 s\n"),
            "");
  EXPECT_EQ(classify_trap("slow-reader",
                          "  [FAIL] the objects are fetched and stored: 60000 and 300000 bytes, "
                          "byte-exact\n"
                          "         no response within 10000 ms; where the next response's head "
                          "began\n"),
            "");
}

// ---- mixed-paths (stage 4): the adaptive origin limit on an origin with a fast and a slow path --

// probe-first-answers.patch: the probe timed the first answers under it (the fast path's), so
// every window of the mix after it read as queueing and the limit fell to its floor.
const std::string kProbeTimedTheFastPath =
    "  [pass] 64 clients alternate a fast path (/no-store/5000) and a slow one "
    "(/delay/20/no-store/10) on one origin, through --origin-limit auto: /metrics shows the "
    "origin's first minimum latency (proxy_origin_min_rtt_seconds)\n"
    "  [pass] once the first probe is due, requests that fill the limit make it measure its "
    "minimum again: the limit halves, then proxy_origin_min_rtt_seconds changes (1 try)\n"
    "  [pass] every request that filled the limit or queued past it is answered 200\n"
    "  (before the probe: limit 80 (40 while it probed), minimum 9 ms, 6101 answers/s; after it: "
    "limit 2, minimum 0.038 ms, last window 9.9 ms, 673 answers/s; 0 shed, 0 failed)\n"
    "  [FAIL] the limit does not collapse after the probe: 1500 ms later the origin's limit is "
    "at least 16 (a quarter of the 64 clients), the origin having room for every request\n"
    "         proxy_origin_limit read 2, 1500 ms after the probe; the minimum it measured, 0.038 "
    "ms, is below a quarter of the slow path's 20 ms: the probe timed the fast path's answers, "
    "and every window of the mix since reads as queueing\n"
    "  [pass] SIGTERM: the stage stops and exits 0\n";

TEST(TrapHints, ALimitCollapsedAfterAProbeThatTimedTheFastPathIsAProbeOfFirstAnswers) {
  EXPECT_EQ(classify_trap("mixed-paths", kProbeTimedTheFastPath), "probe-first-answers");
  EXPECT_EQ(trap_hint("mixed-paths", kProbeTimedTheFastPath, nlohmann::json())
                .rfind("LIKELY TRAP (probe-first-answers): the adaptive limit fell to its floor "
                       "after a probe that measured the fast path", 0),
            0u);
}

// The reference stage 4 (a real run): the probe timed the slow requests it sent first, and the
// limit held.
TEST(TrapHints, TheReferencesMixedPathsRunDrawsNoHint) {
  EXPECT_EQ(classify_trap(
                "mixed-paths",
                "  [pass] 64 clients alternate a fast path (/no-store/5000) and a slow one "
                "(/delay/20/no-store/10) on one origin, through --origin-limit auto: /metrics "
                "shows the origin's first minimum latency (proxy_origin_min_rtt_seconds)\n"
                "  [pass] once the first probe is due, requests that fill the limit make it "
                "measure its minimum again: the limit halves, then proxy_origin_min_rtt_seconds "
                "changes (1 try)\n"
                "  [pass] every request that filled the limit or queued past it is answered 200\n"
                "  (before the probe: limit 80 (40 while it probed), minimum 8.8 ms, 5821 "
                "answers/s; after it: limit 80, minimum 18.6 ms, last window 10.5 ms, 6010 "
                "answers/s; 0 shed, 0 failed)\n"
                "  [pass] the limit does not collapse after the probe: 1500 ms later the origin's "
                "limit is at least 16 (a quarter of the 64 clients), the origin having room for "
                "every request\n"
                "  [pass] SIGTERM: the stage stops and exits 0\n"),
            "");
}

// In the check's format: a limit that fell with a minimum like the mix's (the windows' own
// latency rose: a busy stage), or one that never probed, is none of this trap.
TEST(TrapHints, ALimitThatFellWithAPlausibleMinimumIsNoProbeOfFirstAnswers) {
  EXPECT_EQ(classify_trap("mixed-paths",
                          "  [FAIL] the limit does not collapse after the probe: 1500 ms later "
                          "the origin's limit is at least 16 (a quarter of the 64 clients), the "
                          "origin having room for every request\n"
                          "         proxy_origin_limit read 3, 1500 ms after the probe\n"),
            "");
  EXPECT_EQ(classify_trap("mixed-paths",
                          "  [FAIL] once the first probe is due, requests that fill the limit "
                          "make it measure its minimum again: the limit halves, then "
                          "proxy_origin_min_rtt_seconds changes (3 tries)\n"
                          "         the limit never fell below 40 within 8 s\n"),
            "");
}

// ---- races and queue-races (stage 4): the worker queue's arrival times ------------------------

// unlocked-oldest-wait.patch under queue-races: a worker pops waiting_ (leave_queue, under
// waiting_mutex_) after the poller read it without the lock (oldest_wait, for the shedder).
// Cut from a real report; the time_point template arguments shortened.
const std::string kOldestWaitUnlocked =
    "run 1: 21568 responses completed; 0 requests failed before the SIGTERM, 74 after it "
    "(refused or cut: expected); the stage exited with status 66\n"
    "  the worker queue: up to 8 requests waiting at once, 10770 refused with 503 (the stats "
    "line's peak_queued, shed)\n\n"
    "ThreadSanitizer found a data race (its stacks cut to your code):\n"
    "==================\n"
    "WARNING: ThreadSanitizer: data race (pid=15669)\n"
    "  Write of size 8 at 0x7ffe9034e308 by thread T3 (mutexes: write M56):\n"
    "    ...\n"
    "    #1 proxy::TunedServer::leave_queue(proxy::TunedServer::Job&) "
    "../../stage4-tuned/load_shedding.cpp:98 (stage4-tuned+0xde084)\n"
    "    #2 proxy::TunedServer::serve(proxy::TunedServer::Job) "
    "../../stage4-tuned/tuned_server.cpp:386 (stage4-tuned+0xc7e2d)\n"
    "    ...\n"
    "    #8 proxy::ElasticPool<proxy::TunedServer::Job>::work(proxy::ElasticPool<proxy::"
    "TunedServer::Job>::Worker&) ../../stage4-tuned/elastic_pool.h:158 (stage4-tuned+0xbed74)\n"
    "    ...\n\n"
    "  Previous read of size 8 at 0x7ffe9034e308 by main thread:\n"
    "    ...\n"
    "    #2 proxy::TunedServer::oldest_wait(std::chrono::time_point<...>) const "
    "../../stage4-tuned/load_shedding.cpp:83 (stage4-tuned+0xdde2c)\n"
    "    #3 proxy::TunedServer::observe_queue(std::chrono::time_point<...>) "
    "../../stage4-tuned/load_shedding.cpp:89 (stage4-tuned+0xdde2c)\n"
    "    #4 proxy::TunedServer::housekeeping(std::chrono::time_point<...>) "
    "../../stage4-tuned/tuned_server.cpp:234 (stage4-tuned+0xccb2a)\n"
    "    #5 proxy::TunedServer::run() ../../stage4-tuned/tuned_server.cpp:186 "
    "(stage4-tuned+0xcee71)\n"
    "    ...\n"
    "    #12 main ../../stage4-tuned/main.cpp:175 (stage4-tuned+0xfd93)\n\n"
    "  Location is stack of main thread.\n\n"
    "  Mutex M56 (0x7ffe9034e2d0) created at:\n"
    "    ...\n"
    "    #4 proxy::TunedServer::enqueue(proxy::TunedServer::Client&) "
    "../../stage4-tuned/load_shedding.cpp:69 (stage4-tuned+0xde234)\n"
    "    #5 proxy::TunedServer::submit(proxy::TunedServer::Client) "
    "../../stage4-tuned/load_shedding.cpp:41 (stage4-tuned+0xe1058)\n"
    "    ...\n\n"
    "  Thread T3 's4-worker' (tid=15686, running) created by main thread at:\n"
    "    ...\n"
    "    #12 main ../../stage4-tuned/main.cpp:175 (stage4-tuned+0xfd93)\n\n"
    "SUMMARY: ThreadSanitizer: data race /usr/include/c++/12/bits/stl_deque.h:1582 in "
    "std::deque<std::chrono::time_point<...>>::pop_front()\n"
    "==================\n";

// The poller's unlocked read in kOldestWaitUnlocked, its two frames in load_shedding.cpp.
const std::string kOldestWaitReadSite =
    "    #2 proxy::TunedServer::oldest_wait(std::chrono::time_point<...>) const "
    "../../stage4-tuned/load_shedding.cpp:83 (stage4-tuned+0xdde2c)\n"
    "    #3 proxy::TunedServer::observe_queue(std::chrono::time_point<...>) "
    "../../stage4-tuned/load_shedding.cpp:89 (stage4-tuned+0xdde2c)\n";

TEST(TrapHints, AWorkersPopAgainstThePollersUnlockedReadIsWaitingUnlocked) {
  EXPECT_EQ(classify_trap("queue-races", kOldestWaitUnlocked), "waiting-unlocked");
  // The same race seen by the races check's load in stage mode gets the same hint.
  EXPECT_EQ(classify_trap("races", kOldestWaitUnlocked), "waiting-unlocked");
  EXPECT_EQ(trap_hint("queue-races", kOldestWaitUnlocked, nlohmann::json())
                .rfind("LIKELY TRAP (waiting-unlocked): the queue's arrival times (waiting_) read "
                       "or written without waiting_mutex_", 0),
            0u);
}

TEST(TrapHints, AReadOfWaitingInSubmitAgainstAWorkersPopIsWaitingUnlocked) {
  // A submit that reads waiting_ itself (the poller, load_shedding.cpp:37) without the lock,
  // against the same pop: the student's own read, not the given oldest_wait.
  std::string output = kOldestWaitUnlocked;
  output.replace(output.find(kOldestWaitReadSite), kOldestWaitReadSite.size(),
                 "    #2 proxy::TunedServer::submit(proxy::TunedServer::Client) "
                 "../../stage4-tuned/load_shedding.cpp:37 (stage4-tuned+0xe1062)\n"
                 "    #3 proxy::TunedServer::dispatch(proxy::TunedServer::Parked&) "
                 "../../stage4-tuned/tuned_server.cpp:381 (stage4-tuned+0xc87de)\n");
  EXPECT_EQ(classify_trap("queue-races", output), "waiting-unlocked");
}

TEST(TrapHints, ARaceWithOneSideOutsideLoadSheddingIsADataRaceNotWaitingUnlocked) {
  // The poller's side in the cache instead: the Mutex section's frames in load_shedding.cpp
  // (where waiting_mutex_ was first locked), below it, are not an access.
  std::string output = kOldestWaitUnlocked;
  output.replace(output.find(kOldestWaitReadSite), kOldestWaitReadSite.size(),
                 "    #2 proxy::ShardedCache::find(std::string_view) "
                 "../../common/cache/sharded_cache.cpp:31 (stage4-tuned+0xdde2c)\n");
  EXPECT_EQ(classify_trap("queue-races", output), "data-race");
  // And the worker's side elsewhere, the poller's in load_shedding.cpp.
  output = kOldestWaitUnlocked;
  const std::string pop_site = "    #1 proxy::TunedServer::leave_queue(proxy::TunedServer::Job&) "
                               "../../stage4-tuned/load_shedding.cpp:98 (stage4-tuned+0xde084)\n";
  output.replace(output.find(pop_site), pop_site.size(),
                 "    #1 proxy::ShardedCache::insert(std::string_view, "
                 "std::shared_ptr<proxy::CachedResponse const>) "
                 "../../common/cache/sharded_cache.cpp:40 (stage4-tuned+0xde084)\n");
  EXPECT_EQ(classify_trap("queue-races", output), "data-race");
}

TEST(TrapHints, AQueueNeverUsedIsNoQueueTrap) {
  EXPECT_EQ(classify_trap("queue-races",
                          "run 1: 9000 responses completed; 0 requests failed before the "
                          "SIGTERM, 3 after it (refused or cut: expected); the stage exited with "
                          "status 0\n"
                          "  the worker queue: up to 0 requests waiting at once, 0 refused with "
                          "503 (the stats line's peak_queued, shed)\n"
                          "  no ThreadSanitizer report\n\n"
                          "NO POINTS: no request waited in the worker queue (peak_queued=0)\n"),
            "");
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
