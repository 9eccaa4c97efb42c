#!/usr/bin/env bash
# Stage mode and lab mode graded one after the other in one build folder (the order an
# instructor's `make grade SUBMISSION=X` then `make grade LAB=3 SUBMISSION=X` gives) must score
# as each does alone. They once shared OUT/build/NAME-HASH/{tsan,debug}: CMake refused the second
# configure ("The source ... does not match the source ... used to generate cache") and the
# second mode lost every check needing those builds (51/100 instead of 67/100).
#
# Four runs of the real grader: stage mode in an empty build root A, lab mode in an empty root
# B (each alone), then lab mode in A (after stage) and stage mode in B (after lab). Each mode's
# second run must give the same score per check as its run alone, and (--outputs) the same
# text once the build roots are written as ROOT.
#
#   modes_test.sh GRADER GRADEBOOK SUBMISSION WORK [--cheap | --full]
#
# --cheap (make test, grader.selftest.modes_do_not_share_builds): SUBMISSION is made here, a
#   tree whose common/CMakeLists.txt stops CMake at once, so every configure the grader runs
#   (the tests' build, release, tsan, debug) fails in a second or two at the submission's own
#   line, and nothing compiles. Shared folders would fail them earlier instead, at CMake's
#   source check, and the outputs would differ. Asserts the texts, and that every configure log
#   reached the planted line.
# --full (make grade-modes-check): SUBMISSION is graded for real (the reference by default):
#   stage 3 and lab 3 with the checks that need each build; compares the scores only (timings
#   differ between runs). Slow: four cold builds of stage 3 and the lab's tests.
set -euo pipefail
grader=$1
gradebook=$2
submission=$3
work=$4
mode=${5:---cheap}
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

rm -rf "$work"
mkdir -p "$work"
if [ "$mode" = --cheap ]; then
  # The reference's top-level CMakeLists.txt (stage mode configures the submission's own; lab
  # mode lays the reference's over it), a stage folder for discover_stages, and a common/ that
  # stops the configure.
  src=$work/submission
  mkdir -p "$src/common" "$src/stage3-pool"
  cp "$submission/CMakeLists.txt" "$src/"
  echo 'message(FATAL_ERROR "modes_test: this submission stops CMake here")' > "$src/common/CMakeLists.txt"
  echo 'add_executable(stage3-pool main.cpp)' > "$src/stage3-pool/CMakeLists.txt"
  echo 'int main() {}' > "$src/stage3-pool/main.cpp"
  submission=$src
  stage_args=(--stages 3 --checks "shutdown,races,memory")
  lab_args=(--lab 3 --checks "shutdown,races,memory")
else
  stage_args=(--stages 3 --checks "shutdown,queue-bound,races,memory")
  lab_args=(--lab 3)
fi

run() {  # run NAME ROOT ARGS...: one grading, its results.json in $work/NAME
  local name=$1 root=$2
  shift 2
  local t0=$SECONDS
  "$grader" --submission "$submission" --build-dir "$root" --out "$work/runs/$name" "$@" \
    > "$work/$name.log" 2>&1 || { echo "FAIL: grader exited $? for $name (log: $work/$name.log)"; tail -20 "$work/$name.log"; exit 1; }
  echo "      $name: $((SECONDS - t0)) s"
}
run stage-alone "$work/A" "${stage_args[@]}"
run lab-alone "$work/B" "${lab_args[@]}"
run lab-after-stage "$work/A" "${lab_args[@]}"
run stage-after-lab "$work/B" "${stage_args[@]}"

# A run's scores: its row of the gradebook (every check's column) without the name; its
# outputs: report.md's sections per check, with the build root written as ROOT.
"$gradebook" csv "$work/gradebook.csv" "$work/runs" > /dev/null
scores() { grep "^$1," "$work/gradebook.csv" | cut -d, -f2-; }
outputs() { sed -n '/^## /,$p' "$work/runs/$1/report.md" | sed "s#$work/[AB]#ROOT#g"; }
checks_graded() { sed -n '/^| --- /,/^$/p' "$work/runs/$1/report.md" | grep -c '^| [a-z0-9]'; }
same() {  # same WHAT A B: the two runs agree (a diff is printed when not)
  diff <("$1" "$2") <("$1" "$3") > "$work/diff-$2-$3-$1" || { cat "$work/diff-$2-$3-$1"; return 1; }
}
check "stage mode after lab mode scores as stage mode alone" same scores stage-alone stage-after-lab
check "lab mode after stage mode scores as lab mode alone" same scores lab-alone lab-after-stage
check "stage mode graded 3 checks or more" test "$(checks_graded stage-alone)" -ge 3
check "lab mode graded 3 checks or more" test "$(checks_graded lab-alone)" -ge 3
if [ "$mode" = --cheap ]; then
  check "stage mode after lab mode says what stage mode alone says" same outputs stage-alone stage-after-lab
  check "lab mode after stage mode says what lab mode alone says" same outputs lab-alone lab-after-stage
  # Every configure of the four runs reached the submission's own line (none was refused
  # earlier by CMake's check that a build folder keeps its source tree).
  mapfile -t logs < <(find "$work/A" "$work/B" \( -name configure.log -o -name build.log \) | sort)
  check "the four runs configured in 14 folders (stages/{release,tsan,debug} and lab3/{tests,release,tsan,debug} in each root)" test "${#logs[@]}" -eq 14
  for log in "${logs[@]}"; do
    check "${log#"$work"/} reached the submission's common/CMakeLists.txt" \
      grep -q "modes_test: this submission stops CMake here" "$log"
    check "${log#"$work"/} was not refused for another source tree" bash -c "! grep -q 'does not match the source' '$log'"
  done
fi
if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed (runs in $work)"
  exit 1
fi
echo "all passed"
