#!/usr/bin/env bash
# The cheap test of make grade-all (ctest grader.grade_all.gradebook): the real grade-all.sh and
# the real gradebook, with a stand-in grader (a script) so that it takes seconds, not the hour a
# real lab 3 run of three submissions takes (that run is in grader/README.md, "Many submissions
# on one machine"). The stand-in grades what grade-all hands it: each *.txt file of the
# submission is a check worth 10 points, scored 0 when the file says TODO(student); a file named
# crash makes it exit without results, as a grader that could not run does. It logs every call,
# so the test sees which submissions were graded, in which slot's build folder, how often.
#   grade_all_test.sh SOURCE_DIR GRADEBOOK WORK_DIR
set -euo pipefail
source_dir=$1
gradebook=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

grader=$work/stand-in-grader
cat > "$grader" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
sub="" build="" out="" mode=stages
while [ $# -gt 0 ]; do
  case $1 in
    --submission) sub=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --lab) mode=lab$2; shift 2 ;;
    *) shift ;;
  esac
done
echo "graded $(cat "$sub/name") mode=$mode build=${build##*/.slots/}" >> "$GRADE_ALL_TEST_LOG"
[ -e "$sub/crash" ] && { echo "stand-in grader: cannot run" >&2; exit 2; }
[ -e "$sub/hold" ] && { echo $$ > "$GRADE_ALL_TEST_LOG.held"; exec sleep 600; }  # until stopped
score=0 tests=""
for f in "$sub"/*.txt; do
  name=$(basename "$f" .txt)
  if grep -q "TODO(student)" "$f"; then s=0; status=failed; else s=10; status=passed; fi
  score=$((score + s))
  tests+="${tests:+,}{\"name\": \"$mode: $name\", \"score\": $s, \"max_score\": 10, \"status\": \"$status\", \"output\": \"\"}"
done
mkdir -p "$out"
echo "{\"score\": $score, \"tests\": [$tests]}" > "$out/results.json"
EOF
chmod +x "$grader"

# submission NAME FILE=CONTENT...: a folder with a name file and the given files.
subs=$work/subs
submission() {
  local name=$1 kv
  shift
  mkdir -p "$subs/$name"
  echo "$name" > "$subs/$name/name"
  for kv in "$@"; do echo "${kv#*=}" > "$subs/$name/${kv%%=*}"; done
}
submission alice queue.txt=done pool.txt=done
submission bob queue.txt="TODO(student) lab 3" pool.txt="TODO(student) lab 3"
submission carol queue.txt=done pool.txt="TODO(student) lab 3"
out=$work/out
export GRADE_ALL_TEST_LOG=$work/calls.log
run() {  # run ARGS...: grade-all.sh into $out; its output in $work/run.out, status in $rc
  rc=0
  bash "$source_dir/grader/grade-all.sh" --submissions "$subs" --out "$out" --grader "$grader" \
    --gradebook "$gradebook" "$@" > "$work/run.out" 2>&1 || rc=$?
}
calls() { grep -c "$1" "$GRADE_ALL_TEST_LOG" || true; }

# Lab mode, two at a time.
run --lab 3 --jobs 2
check "lab mode: exit 0 when every submission was graded" test "$rc" = 0
printf '%s\n' "submission,score,max_score,lab3: pool,lab3: queue" "alice,20,20,10,10" "bob,0,20,0,0" \
  "carol,10,20,0,10" > "$work/expected.csv"
check "lab mode: the gradebook has a row per submission and a column per check, with their scores" \
  diff "$work/expected.csv" "$out/gradebook.csv"
check "lab mode: each submission graded once" test "$(calls "^graded")" = 3
check "lab mode: the grader was told the lab" test "$(calls "mode=lab3")" = 3
check "lab mode: every submission built in a job slot's own build folder (.slots/1 or .slots/2)" \
  test "$(grep -cE 'build=[12]/build$' "$GRADE_ALL_TEST_LOG")" = 3
check "lab mode: each submission's report kept" test -f "$out/bob/results.json" -a -f "$out/bob/grader.log"
check "lab mode: the end line counts them" grep -q "grade-all: 3/3 graded" "$work/run.out"

# Resumable: finished submissions are skipped; one whose folder was removed is graded again.
run --lab 3 --jobs 2
check "resume: nothing graded again" test "$(calls "^graded")" = 3
check "resume: says so" grep -q "3 already graded" "$work/run.out"
rm -r "${out:?}/carol"
echo "done" > "$subs/carol/pool.txt"  # carol fixed her pool since
run --lab 3 --jobs 2
check "resume: only the removed submission graded again" test "$(calls "^graded carol")" = 2 -a "$(calls "^graded")" = 4
check "resume: its new scores in the gradebook" grep -qx "carol,20,20,10,10" "$out/gradebook.csv"

# A submission the grader cannot grade: named, left out of the gradebook, the status non-zero.
submission dave queue.txt=done crash=1
run --lab 3 --jobs 1
check "no results: grade-all exits non-zero" test "$rc" != 0
check "no results: the submission is named" grep -q "dave: the grader wrote no results" "$work/run.out"
check "no results: not a row of the gradebook, the others still are" \
  bash -c "! grep -q '^dave,' '$out/gradebook.csv' && test \$(wc -l < '$out/gradebook.csv') = 4"
rm -r "${subs:?}/dave"

# Many slots racing through many quick submissions: each is graded once. A slot that found a
# submission unfinished and then took its claim just after another slot had finished it graded
# it again (41 extra gradings in 5 runs of this, before grade-all.sh looked again after claiming).
many=$work/many
mkdir -p "$many"
for i in $(seq 1 60); do mkdir "$many/s$i"; echo "s$i" > "$many/s$i/name"; echo "done" > "$many/s$i/queue.txt"; done
: > "$GRADE_ALL_TEST_LOG.many"
rc=0
GRADE_ALL_TEST_LOG=$GRADE_ALL_TEST_LOG.many bash "$source_dir/grader/grade-all.sh" --submissions "$many" \
  --out "$work/many-out" --grader "$grader" --gradebook "$gradebook" --lab 3 --jobs 6 > "$work/many.out" 2>&1 || rc=$?
check "many slots: exit 0" test "$rc" = 0
check "many slots: 60 submissions graded 60 times, each once" \
  test "$(wc -l < "$GRADE_ALL_TEST_LOG.many")" = 60 -a "$(sort -u "$GRADE_ALL_TEST_LOG.many" | wc -l)" = 60

# The same race with two submissions the grader cannot grade: each is tried once per run, not
# once more by every slot that had not yet passed it in the list (a second try of one or both in
# 6 runs of 6 with 24 submissions, before grade-all.sh marked them in .failed); the next run
# tries them again.
few=$work/few
mkdir -p "$few"
for i in $(seq 1 24); do mkdir "$few/s$i"; echo "s$i" > "$few/s$i/name"; echo "done" > "$few/s$i/queue.txt"; done
touch "$few/s2/crash" "$few/s13/crash"
: > "$GRADE_ALL_TEST_LOG.many"
few_run() {
  rc=0
  GRADE_ALL_TEST_LOG=$GRADE_ALL_TEST_LOG.many bash "$source_dir/grader/grade-all.sh" --submissions "$few" \
    --out "$work/few-out" --grader "$grader" --gradebook "$gradebook" --lab 3 --jobs 6 > "$work/many.out" 2>&1 || rc=$?
}
tries() { cut -d' ' -f2 "$GRADE_ALL_TEST_LOG.many" | grep -cx "$1" || true; }
few_run
check "many slots, two failures: exit non-zero" test "$rc" != 0
check "many slots, two failures: each submission tried once" \
  test "$(wc -l < "$GRADE_ALL_TEST_LOG.many")" = 24 -a "$(tries s2)" = 1 -a "$(tries s13)" = 1
few_run
check "many slots, two failures: the next run tries the two again, and only them" \
  test "$(wc -l < "$GRADE_ALL_TEST_LOG.many")" = 26 -a "$(tries s2)" = 2 -a "$(tries s13)" = 2

# Stopped by a TERM to grade-all.sh alone: it stops its slots and their graders before it exits,
# so none goes on grading beside the run started again (one did, and graded it a second time).
held=$work/held
mkdir -p "$held"
for i in 1 2 3; do mkdir "$held/h$i"; echo "h$i" > "$held/h$i/name"; echo "done" > "$held/h$i/queue.txt"; done
touch "$held/h2/hold"
rm -f "$GRADE_ALL_TEST_LOG.held"
bash "$source_dir/grader/grade-all.sh" --submissions "$held" --out "$work/held-out" --grader "$grader" \
  --gradebook "$gradebook" --lab 3 --jobs 2 > "$work/held.out" 2>&1 &
main=$!
for _ in $(seq 200); do [ -s "$GRADE_ALL_TEST_LOG.held" ] && break; sleep 0.1; done  # 20 s deadline
held_pid=$(cat "$GRADE_ALL_TEST_LOG.held")
# A second run on the same output folder meanwhile: refused, and the first left as it was (it
# would have cleared the first's claims and graded h2 beside it).
rc=0
# (timeout: a second run let in would wait on its own held grader)
timeout 30 bash "$source_dir/grader/grade-all.sh" --submissions "$held" --out "$work/held-out" \
  --grader "$grader" --gradebook "$gradebook" --lab 3 --jobs 2 > "$work/second.out" 2>&1 || rc=$?
check "two runs, one folder: the second is refused" test "$rc" = 2
check "two runs, one folder: and says why" grep -q "another grade-all run is writing to" "$work/second.out"
check "two runs, one folder: the first's claim and grader untouched" \
  bash -c "test -d '$work/held-out/.claims/h2' && kill -0 $held_pid && test \$(grep -c '^graded h2' '$GRADE_ALL_TEST_LOG') = 1"
kill -TERM "$main"
rc=0
wait "$main" || rc=$?
check "stopped: grade-all.sh exits with TERM's status" test "$rc" = 143
check "stopped: the grader it was running is stopped too" bash -c "! kill -0 $held_pid 2> /dev/null"
kill "$held_pid" 2> /dev/null || true

# Stage mode: each submission is laid over its slot's tree, so nothing of the previous one stays.
rm -rf "$out"
submission aaron queue.txt=done extra.txt=done  # graded first: alice comes next in its slot
run --jobs 1
check "stage mode: exit 0" test "$rc" = 0
check "stage mode: a file only aaron has is graded for aaron alone" \
  bash -c "grep -qx 'aaron,20,20,10,10,' '$out/gradebook.csv' && grep -qx 'alice,20,20,,10,10' '$out/gradebook.csv'"
check "stage mode: one slot's tree reused for every submission" \
  test "$(grep -c 'mode=stages build=1/build' "$GRADE_ALL_TEST_LOG")" = 4

if [ "$failures" -ne 0 ]; then
  echo "$failures FAILED"
  exit 1
fi
echo "all passed"
