// A lab test group's part of report.md stays a screenful however many of its tests fail alike
// (evidence.cpp, condense_failures). The outputs below are real: two black-box tests and one
// unit test of lab 3 as `make grade LAB=3` logged them on the lost-wakeup mutant
// (grader/mutants/lost-wakeup.patch), where 26 of the 32 black-box tests of stage 3 failed on
// the same hang and report.md ran to 64 KB, 44 KB of it that group's gtest banners repeated.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "evidence.h"

namespace grader {
namespace {

/// A hung black-box test's whole output, as logged; `bytes` and `ms` vary from test to test.
std::string hung_blackbox_log(const std::string& test, int bytes, int ms) {
  const std::string name = "Stages/StageTest." + test + "/stage3_pool";
  const std::string took = std::to_string(ms) + " ms";
  return "Running main() from /usr/src/googletest/googletest/src/gtest_main.cc\n"
         "Note: Google Test filter = " + name + "\n"
         "[==========] Running 1 test from 1 test suite.\n"
         "[----------] Global test environment set-up.\n"
         "[----------] 1 test from Stages/StageTest\n"
         "[ RUN      ] " + name + "\n"
         "unknown file: Failure\n"
         "C++ exception with description \"no complete response head in 0 bytes: \" thrown in the test body.\n"
         "/tmp/labs2-grade/lab3/src/tests/blackbox/stage_fixture.cpp:29: Failure\n"
         "Failed\n"
         "HUNG: stage3-pool accepted a client and left its request (" + std::to_string(bytes) +
         " bytes) unread for 3 s while all 6 of its threads slept and no request to the origin "
         "was in flight: the client was queued and no worker woke to take it.\n"
         "Likely trap: a lost wakeup (a push that notifies no waiting worker, or notifies before "
         "the item is in the queue) or a wait whose predicate is never made true.\n"
         "See the lab 3 handout (labs/lab3-pool/README.md), \"The traps\". The stage was killed "
         "so that this test ends now instead of at its deadline.\n"
         "\n"
         "/tmp/labs2-grade/lab3/src/tests/blackbox/stage_fixture.cpp:33: Failure\n"
         "Value of: status.clean()\n"
         "  Actual: false\n"
         "Expected: true\n"
         "stage3-pool exited with -1, signal 9\n"
         "\n"
         "[  FAILED  ] " + name + ", where GetParam() = \"stage3-pool\" (" + took + ")\n"
         "[----------] 1 test from Stages/StageTest (" + took + " total)\n"
         "\n"
         "[----------] Global test environment tear-down\n"
         "[==========] 1 test from 1 test suite ran. (" + took + " total)\n"
         "[  PASSED  ] 0 tests.\n"
         "[  FAILED  ] 1 test, listed below:\n"
         "[  FAILED  ] " + name + ", where GetParam() = \"stage3-pool\"\n"
         "\n"
         " 1 FAILED TEST\n";
}

const std::string kWorkerDied =
    "Running main() from /usr/src/googletest/googletest/src/gtest_main.cc\n"
    "Note: Google Test filter = WorkerPool.AWorkerSurvivesAHandlerThatThrows\n"
    "[==========] Running 1 test from 1 test suite.\n"
    "[----------] Global test environment set-up.\n"
    "[----------] 1 test from WorkerPool\n"
    "[ RUN      ] WorkerPool.AWorkerSurvivesAHandlerThatThrows\n"
    "/tmp/labs2-grade/lab3/src/tests/unit/worker_pool_test.cpp:356: Failure\n"
    "Value of: ran.wait_for(1)\n"
    "  Actual: false\n"
    "Expected: true\n"
    "the only worker died with the exceptions before task 3\n"
    "[  FAILED  ] WorkerPool.AWorkerSurvivesAHandlerThatThrows (15078 ms)\n"
    "[----------] 1 test from WorkerPool (15078 ms total)\n"
    "\n"
    "[----------] Global test environment tear-down\n"
    "[==========] 1 test from 1 test suite ran. (15078 ms total)\n"
    "[  PASSED  ] 0 tests.\n"
    "[  FAILED  ] 1 test, listed below:\n"
    "[  FAILED  ] WorkerPool.AWorkerSurvivesAHandlerThatThrows\n"
    "\n"
    " 1 FAILED TEST\n";

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TestFailures, AFailureIsItsAssertionsWithoutGtestsBanners) {
  const std::string failure = gtest_failure(kWorkerDied);
  EXPECT_NE(failure.find("the only worker died with the exceptions before task 3"),
            std::string::npos);
  EXPECT_NE(failure.find("worker_pool_test.cpp:356: Failure"), std::string::npos);
  for (const char* banner : {"Running main()", "[==========]", "[----------]", "[  PASSED  ]",
                             "FAILED TEST", "[ RUN      ]"}) {
    EXPECT_EQ(failure.find(banner), std::string::npos) << banner << " in:\n" << failure;
  }
}

TEST(TestFailures, ACrashWithoutAVerdictKeepsItsLastLines) {
  std::string log = "[ RUN      ] BoundedQueue.PopsItemsInTheOrderTheyWerePushed\n";
  for (int i = 0; i < 100; ++i) log += "line " + std::to_string(i) + "\n";
  log += "CRASHED inside a BoundedQueue / WorkerPool test (signal 11).\n";
  const std::string failure = gtest_failure(log, 10);
  EXPECT_NE(failure.find("CRASHED inside"), std::string::npos) << failure;
  EXPECT_EQ(failure.find("line 0\n"), std::string::npos) << failure;
  EXPECT_NE(failure.find("lines before these in the full log"), std::string::npos) << failure;
}

TEST(TestFailures, AHungPoolsThirtyAlikeFailuresShowOnceInAScreenful) {
  std::vector<FailedTest> failed;
  std::size_t whole = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string name = "Stages/StageTest.Test" + std::to_string(i) + "/stage3_pool";
    FailedTest t{name, "FAILED", "/out/logs/lab3-pool/stage3-blackbox/" + std::to_string(i) + ".log",
                 hung_blackbox_log("Test" + std::to_string(i), 70 + i, 3200 + 17 * i)};
    whole += t.output.size();
    failed.push_back(t);
  }
  failed.push_back({"WorkerPool.AWorkerSurvivesAHandlerThatThrows", "FAILED", "/out/w.log",
                    kWorkerDied});
  const std::string out = condense_failures(failed);
  EXPECT_EQ(count(out, "HUNG: stage3-pool"), 1u) << out;
  EXPECT_EQ(count(out, "the same hang as Stages/StageTest.Test0/stage3_pool"), 29u)
      << out;
  EXPECT_NE(out.find("the only worker died"), std::string::npos) << out;
  EXPECT_NE(out.find("(full log: /out/w.log)"), std::string::npos)
      << "a log outside the group's folder is named beside its test";
  for (int i = 0; i < 30; ++i) {
    EXPECT_NE(out.find("(full log: /out/logs/lab3-pool/stage3-blackbox/" + std::to_string(i) + ".log)"),
              std::string::npos)
        << "every test keeps the path of its full log";
  }
  // A screenful: the one failure (about 1 kB) and a line per test, not 30 whole logs.
  EXPECT_LT(out.size(), 8000u) << out;
  EXPECT_GT(whole, 40000u);
}

TEST(TestFailures, PastTheShownFailuresEachTestGetsItsFirstMessage) {
  std::vector<FailedTest> failed;
  for (int i = 0; i < 6; ++i) {
    failed.push_back({"T" + std::to_string(i), "FAILED", "/logs/T" + std::to_string(i) + ".log",
                      "[ RUN      ] T\nx.cpp:1: Failure\nmessage " + std::string(1, 'a' + i) +
                          "\n[  FAILED  ] T (1 ms)\n"});
  }
  const std::string out = condense_failures(failed, 4);
  EXPECT_NE(out.find("Each test's whole output is in /logs/ (one file per test)."),
            std::string::npos) << out;
  EXPECT_NE(out.find("--- T4: FAILED: message e\n"), std::string::npos) << out;
  EXPECT_NE(out.find("--- T5: FAILED: message f\n"), std::string::npos) << out;
  EXPECT_EQ(count(out, "x.cpp:1: Failure"), 4u) << out;
}

}  // namespace
}  // namespace grader
