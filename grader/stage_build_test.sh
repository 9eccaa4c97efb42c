#!/usr/bin/env bash
# Stage mode grades the submission as it is now, and out of the same maximum whatever compiles.
#
#   stage_build_test.sh GRADER WORK
#
# A tiny submission is graded twice in one build folder. Its stages build in a second: each is a
# server that answers every request with an empty 200 whose X-Cache names the stage's version,
# which the correctness check's failures quote ("X-Cache 'stage_build_test version A'").
#   1. stage 1 is version A; stage 3 names "--workers" but does not compile;
#   2. the tree "re-extracted" from an archive: stage 1 is version B, stage 3 compiles, and
#      every file carries a time years older than the first run's objects.
# Run 2 must grade version B (Ninja, going by file times alone, found "no work to do" and graded
# version A's binary), and both runs must give stage 3 its pool checks: the same checks and
# the same maximum whether or not it compiled.
set -euo pipefail
grader=$1
work=$2
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}
rm -rf "$work"
src=$work/submission
mkdir -p "$src/stage1-sequential" "$src/stage3-pool"
cat > "$src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.22)
project(stage_build_test CXX)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_subdirectory(stage1-sequential)
add_subdirectory(stage3-pool)
EOF
echo 'add_executable(stage1-sequential main.cpp)' > "$src/stage1-sequential/CMakeLists.txt"
echo 'add_executable(stage3-pool main.cpp)' > "$src/stage3-pool/CMakeLists.txt"

stage() {  # stage DIR VERSION [HELP]: a stage answering as VERSION, whose --help prints HELP
  sed -e "s/@VERSION@/$2/" -e "s/@HELP@/${3:-}/" > "$src/$1/main.cpp" <<'EOF'
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--help") == 0) {
    std::puts("@HELP@");
    return 0;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      ::listen(listener, 64) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    return 1;
  }
  std::printf("listening on 127.0.0.1:%d\n", ntohs(address.sin_port));
  std::fflush(stdout);
  const char response[] = "HTTP/1.1 200 OK\r\nX-Cache: stage_build_test version @VERSION@\r\n"
                          "Content-Length: 0\r\nConnection: close\r\n\r\n";
  for (;;) {
    const int client = ::accept(listener, nullptr, nullptr);
    if (client < 0) continue;
    char request[8192];
    (void)::read(client, request, sizeof request);
    (void)::write(client, response, sizeof response - 1);
    ::close(client);
  }
}
EOF
}
stage stage1-sequential A
cat > "$src/stage3-pool/main.cpp" <<'EOF'
const char* kWorkers = "--workers";
int main() { return this_does_not_compile; }
EOF

run() {  # run NAME: one grading of both stages into $work/NAME, its table in $work/NAME.log
  "$grader" --submission "$src" --build-dir "$work/build" --out "$work/$1" --stages 1,3 \
    --checks correctness,queue-bound > "$work/$1.log" 2>&1 ||
    { echo "FAIL: grader exited $? for $1"; tail -20 "$work/$1.log"; exit 1; }
}
# Stage 1's part of a run's report.md.
stage1_report() { sed -n '/^## stage1-sequential/,/^## stage3-pool/p' "$work/$1/report.md"; }
# The maxima of a run: stage 3's and the whole grade's ("stage3-pool stage total 30").
maxima() {
  grep -E '^(stage3-pool +stage total|TOTAL) ' "$work/$1.log" |
    sed -E 's#^(stage3-pool +stage total|TOTAL) +[0-9.]+/([0-9.]+).*#\1 \2#'
}

run first
check "run 1 graded version A of stage 1" \
  grep -q "X-Cache 'stage_build_test version A'" <(stage1_report first)
check "run 1 graded stage 3's pool check though stage 3 did not compile" \
  grep -Eq '^stage3-pool +queue-bound +FAIL +0/10 ' "$work/first.log"
check "run 1 shows the compiler's error for stage 3" \
  grep -q 'this_does_not_compile' "$work/first/report.md"

# The re-extraction: new contents, old times.
stage stage1-sequential B
stage stage3-pool B "--workers N"
find "$src" -exec touch -h -d '2001-01-01 00:00:00' {} +

run second
check "run 2 graded version B of stage 1 (the tree re-extracted with older times)" \
  grep -q "X-Cache 'stage_build_test version B'" <(stage1_report second)
check "run 2 did not grade stage 1's version A binary" \
  bash -c "! grep -q 'stage_build_test version A' <(sed -n '/^## stage1-sequential/,/^## stage3-pool/p' '$work/second/report.md')"
check "run 2 graded stage 3's pool check, stage 3 built" \
  grep -Eq '^stage3-pool +queue-bound +FAIL +0/10 ' "$work/second.log"
check "the maxima compared are there (stage 3's and the total)" test "$(maxima first | wc -l)" -eq 2
check "stage 3 and the whole grade have the same maximum whether stage 3 compiled or not" \
  diff <(maxima first) <(maxima second)

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed (runs in $work)"
  exit 1
fi
echo "all passed"
