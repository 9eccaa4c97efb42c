#!/usr/bin/env bash
# The cheap part of the Gradescope bundle's checks, in make test (ctest -R grader.gradescope):
# the lab 3 bundle's contents, the file mapping of collect.sh (tree layout, flat, one wrapping
# folder, a missing file, a stage folder missing), sync_tree keeping unchanged files' mtimes,
# and gradebook's note, summary and csv. The real run_autograder against a simulated
# /autograder is make gradescope-check (slow: it builds and grades).
#   bundle_test.sh SOURCE_DIR LAB_HANDOUT GRADEBOOK WORK_DIR
set -euo pipefail
source_dir=$1
handout=$2
gradebook=$3
work=$4
rm -rf "$work"
mkdir -p "$work"
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok:   $what"; else echo "FAIL: $what"; failures=$((failures + 1)); fi
}

# ---- the bundle ----
"$source_dir/grader/gradescope/make-bundle.sh" --lab 3 --handout "$handout" --out "$work/bundles" > "$work/bundle.log"
listing=$(cmake -E tar tf "$work/bundles/lab3.zip")
for f in setup.sh run_autograder collect.sh bundle.conf reference.tar.gz starter/stage3-pool/bounded_queue.h \
         starter/stage3-pool/worker_pool.h starter/stage3-pool/worker_pool.cpp starter/stage3-pool/main.cpp; do
  check "lab3.zip holds $f" grep -qx "$f" <<< "$listing"
done
mkdir -p "$work/unzipped"
(cd "$work/unzipped" && cmake -E tar xf "$work/bundles/lab3.zip")
check "run_autograder and setup.sh are executable once unzipped" test -x "$work/unzipped/run_autograder" -a -x "$work/unzipped/setup.sh"
check "the starter's files are the handout's stubs" grep -q "TODO(student) lab 3" "$work/unzipped/starter/stage3-pool/bounded_queue.h"
tar -tzf "$work/unzipped/reference.tar.gz" > "$work/reference.list"
check "the reference holds the hidden tests" grep -q "tests/unit/lab3_hidden_test.cpp" "$work/reference.list"
check "the reference holds scripts/install-deps (setup.sh calls the one list)" grep -q "scripts/install-deps$" "$work/reference.list"
check "the reference leaves out build/ and .git/" bash -c "! grep -qE '^\./(build|\.git)/' '$work/reference.list'"
check "setup.sh installs through scripts/install-deps" grep -q 'scripts/install-deps" build test grade' "$work/unzipped/setup.sh"
# shellcheck disable=SC1091
. "$work/unzipped/bundle.conf"
check "bundle.conf names lab 3's graded files" test "$GRADED_FILES" = \
  "stage3-pool/bounded_queue.h stage3-pool/worker_pool.h stage3-pool/worker_pool.cpp stage3-pool/main.cpp"

# ---- the file mapping ----
# shellcheck disable=SC1091
. "$source_dir/grader/gradescope/collect.sh"
starter=$work/unzipped/starter
new_tree() { rm -rf "$work/tree"; mkdir -p "$work/tree/stage3-pool"; for p in $GRADED_FILES; do echo "reference $p" > "$work/tree/$p"; done; }
sub=$work/submission

new_tree; rm -rf "$sub"; mkdir -p "$sub/stage3-pool"
for p in $GRADED_FILES; do echo "student $p" > "$sub/$p"; done
collect_lab "$sub" "$work/tree" "$starter" > "$work/tree.out"
check "tree layout: every file taken from its path" bash -c "for p in $GRADED_FILES; do grep -qx \"student \$p\" '$work/tree/'\$p || exit 1; done"
check "tree layout: nothing reported missing" bash -c "! grep -q MISSING '$work/tree.out'"

new_tree; rm -rf "$sub"; mkdir -p "$sub"
for p in $GRADED_FILES; do echo "flat $p" > "$sub/${p##*/}"; done
collect_lab "$sub" "$work/tree" "$starter" > "$work/flat.out"
check "flat: every file mapped to its tree path" grep -qx "flat stage3-pool/main.cpp" "$work/tree/stage3-pool/main.cpp"
check "flat: the mapping is printed" grep -q "found    stage3-pool/worker_pool.h <- worker_pool.h" "$work/flat.out"

new_tree; rm -rf "$sub"; mkdir -p "$sub/my-proxy/stage3-pool" "$sub/__MACOSX"
for p in $GRADED_FILES; do echo "wrapped $p" > "$sub/my-proxy/$p"; done
collect_lab "$sub" "$work/tree" "$starter" > "$work/wrapped.out"
check "one wrapping folder (a zip of the repository's folder) is looked into" \
  grep -qx "wrapped stage3-pool/bounded_queue.h" "$work/tree/stage3-pool/bounded_queue.h"

new_tree; rm -rf "$sub"; mkdir -p "$sub"
for p in $GRADED_FILES; do [ "$p" = stage3-pool/worker_pool.cpp ] || echo "flat $p" > "$sub/${p##*/}"; done
collect_lab "$sub" "$work/tree" "$starter" > "$work/missing.out"
check "a missing file is named, with where it was looked for" \
  grep -q "MISSING  stage3-pool/worker_pool.cpp: expected stage3-pool/worker_pool.cpp (tree layout) or worker_pool.cpp (flat)" "$work/missing.out"
check "a missing file is graded as the handout's stub" cmp -s "$starter/stage3-pool/worker_pool.cpp" "$work/tree/stage3-pool/worker_pool.cpp"

# Two graded files with the same name cannot be handed in flat: only the tree layout counts.
new_tree; rm -rf "$sub"; mkdir -p "$sub"; echo "flat main" > "$sub/main.cpp"
(GRADED_FILES="stage2-per-thread/main.cpp stage3-pool/main.cpp"; mkdir -p "$work/tree/stage2-per-thread"
 collect_lab "$sub" "$work/tree" "$starter" > "$work/ambiguous.out")
check "an ambiguous flat name is not guessed" grep -q "MISSING  stage3-pool/main.cpp: expected stage3-pool/main.cpp in" "$work/ambiguous.out"

# sync_tree: identical files keep their mtime (ninja must not rebuild them), changed ones do not.
rm -rf "$work/a" "$work/b"; mkdir -p "$work/a/d" "$work/b/d"
echo same > "$work/a/d/same"; echo new > "$work/a/d/changed"; echo old > "$work/b/d/changed"
cp "$work/a/d/same" "$work/b/d/same"; echo stale > "$work/b/d/stale"
touch -d '2001-01-01' "$work/b/d/same" "$work/b/d/changed"
sync_tree "$work/a" "$work/b"
check "sync_tree: an unchanged file keeps its mtime" test "$(stat -c %Y "$work/b/d/same")" = "$(date -d 2001-01-01 +%s)"
check "sync_tree: a changed file is copied with a new mtime" bash -c "grep -qx new '$work/b/d/changed' && [ \$(stat -c %Y '$work/b/d/changed') -gt $(date -d 2001-01-01 +%s) ]"
check "sync_tree: a file the source lacks is removed" test ! -e "$work/b/d/stale"

# collect_stages: a missing stage folder is replaced by sources that fail to compile, naming it.
rm -rf "$work/stree" "$sub"; mkdir -p "$work/stree/common" "$work/stree/stage4-tuned" "$sub/common"
echo "int ref;" > "$work/stree/stage4-tuned/main.cpp"; echo "int student;" > "$sub/common/x.cpp"
(GRADED_DIRS="common stage4-tuned"; collect_stages "$sub" "$work/stree" > "$work/stages.out")
check "stages: a present folder is mirrored" grep -qx "int student;" "$work/stree/common/x.cpp"
check "stages: a missing folder is named" grep -q "MISSING  stage4-tuned/" "$work/stages.out"
check "stages: a missing folder's sources fail to compile, saying why" grep -q '#error "stage4-tuned/ was missing' "$work/stree/stage4-tuned/main.cpp"

# ---- gradebook ----
mkdir -p "$work/book/alice" "$work/book/bob" "$work/book/.slots/x"
cat > "$work/book/alice/results.json" <<'EOF'
{"score": 30, "output": "Graded.", "tests": [
 {"name": "lab3-pool: BoundedQueue, \"FIFO\"", "score": 15, "max_score": 15, "status": "passed", "output": ""},
 {"name": "stage3-pool: Races", "score": 15, "max_score": 15, "status": "passed", "output": ""}]}
EOF
cat > "$work/book/bob/results.json" <<'EOF'
{"score": 0, "output": "Graded.", "tests": [
 {"name": "lab3-pool: BoundedQueue, \"FIFO\"", "score": 0, "max_score": 15, "status": "failed", "output": "TODO(student)"}]}
EOF
echo '{"score": 99, "tests": []}' > "$work/book/.slots/x/results.json"
"$gradebook" csv "$work/book/gradebook.csv" "$work/book" > /dev/null
check "csv: a header with one column per check" grep -qx 'submission,score,max_score,"lab3-pool: BoundedQueue, ""FIFO""",stage3-pool: Races' "$work/book/gradebook.csv"
check "csv: a row per submission, an empty cell for a check not graded" grep -qx 'bob,0,15,0,' "$work/book/gradebook.csv"
check "csv: grade-all's own dot folders are not submissions" test "$(wc -l < "$work/book/gradebook.csv")" = 3
check "summary: score, max and unexpected failures" test "$("$gradebook" summary "$work/book/bob/results.json")" = "0 15 1"
printf 'MISSING  stage3-pool/main.cpp\n' > "$work/notes.txt"
"$gradebook" note "$work/book/alice/results.json" "$work/notes.txt"
check "note: the file mapping comes first in results.json's output" grep -q '"output": "MISSING  stage3-pool/main.cpp\\n\\nGraded."' "$work/book/alice/results.json"

if [ "$failures" -ne 0 ]; then
  echo "$failures FAILED"
  exit 1
fi
echo "all passed"
