// Replays every input kept in fuzz/corpus/<target>/ — the seeds, and each input a fuzzer ever
// crashed on, which is added there as a regression case — through the same checks the libFuzzer
// targets run (fuzz/fuzz_checks.h), with g++ and without clang. So `make test` fails when a bug
// that fuzzing once found comes back, whether or not anyone runs `make fuzz`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "exact_buffer.h"
#include "fuzz_checks.h"
#include "../test_support.h"

namespace proxy {
namespace {

using test_support::read_file;

namespace fs = std::filesystem;

struct FuzzTarget {
  std::string name;  // folder under fuzz/corpus/
  std::function<void(std::string_view)> check;
};

std::vector<FuzzTarget> targets() {
  return {{"request", proxy_fuzz::check_request_input},
          {"uri", proxy_fuzz::check_uri_input},
          {"chunked", proxy_fuzz::check_chunked_input},
          {"response_head", proxy_fuzz::check_response_head_input}};
}

class FuzzCorpus : public ::testing::TestWithParam<FuzzTarget> {};

TEST_P(FuzzCorpus, EveryKeptInputPassesItsTargetsChecks) {
  const fs::path dir = fs::path(FUZZ_CORPUS_DIR) / GetParam().name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing: the seed corpus lives in the repository";
  std::size_t replayed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string bytes = read_file(entry.path());
    test::ExactBuffer exact(bytes);  // an over-read fails under make asan
    EXPECT_NO_THROW(GetParam().check(exact.view()))
        << entry.path().filename() << ": " << test::printable(bytes);
    ++replayed;
  }
  EXPECT_GE(replayed, 5u) << "the seed corpus of " << GetParam().name << " has gone missing";
}

INSTANTIATE_TEST_SUITE_P(Parsers, FuzzCorpus, ::testing::ValuesIn(targets()),
                         [](const ::testing::TestParamInfo<FuzzTarget>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace proxy
