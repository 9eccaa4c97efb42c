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

# ---- the compiler: Ubuntu 22.04's g++ is 11 (choose_cxx in collect.sh, setup.sh) ----
# A fake g++ answers -dumpversion with $FAKE_GXX; a fake installer records its arguments and
# puts a g++-12 beside it. PATH holds only the fake folder, so the machine's own g++-12 is unseen.
fake=$work/fakebin
rm -rf "$fake"; mkdir -p "$fake"
printf '#!/bin/sh\necho "$FAKE_GXX"\n' > "$fake/g++"
printf '#!/bin/sh\necho "$*" >> "%s/installed"\n[ "$FAKE_INSTALL_FAILS" = 1 ] && exit 1\nprintf "#!/bin/sh\\n" > "%s/g++-12"\n/bin/chmod +x "%s/g++-12"\n' \
  "$fake" "$fake" "$fake" > "$fake/install"
/bin/chmod +x "$fake/g++" "$fake/install"
chosen() {  # chosen VERSION [INSTALL_FAILS]: what choose_cxx prints; its status in $chosen_rc
  rm -f "$fake/g++-12" "$fake/installed"
  chosen_rc=0
  FAKE_GXX=$1 FAKE_INSTALL_FAILS=${2:-0} PATH=$fake choose_cxx "$fake/install" gxx12 2> /dev/null || chosen_rc=$?
}
out=$(chosen 12); check "compiler: g++ 12 is used as it is (nothing printed)" test -z "$out"
chosen 12 > /dev/null; check "compiler: g++ 12 installs nothing" test ! -e "$fake/installed"
out=$(chosen 13.2.0); check "compiler: g++ 13 is used as it is" test -z "$out"
out=$(chosen 11); check "compiler: g++ 11 -> g++-12" test "$out" = "g++-12"
chosen 11 > /dev/null; check "compiler: g++ 11 -> the installer is run for the gxx12 group" grep -qx "gxx12" "$fake/installed"
chosen 11 1 > /dev/null; check "compiler: g++ 11 and g++-12 not installable -> an error" test "$chosen_rc" = 1
check "compiler: install-deps has the gxx12 group (g++-12) that setup.sh installs" \
  grep -q 'GROUPS_PACKAGES\[gxx12\]="g++-12"' "$source_dir/scripts/install-deps"

# setup.sh and run_autograder themselves, with g++ 11 on PATH: a fake cmake and a fake grader
# record the CXX they were run with (no apt: SKIP_INSTALL_DEPS=1, and a fake g++-12 is there).
for version in 11 12; do
  root=$work/cxx$version-root
  rm -rf "$root"; mkdir -p "$root/source"
  cp -r "$work/unzipped/." "$root/source/"
  # A small reference (the wiring is what is tested, and sync_tree over the real one is slow).
  mkdir -p "$root/small/scripts"
  echo "int main() {}" > "$root/small/main.cpp"
  tar -C "$root/small" -czf "$root/source/reference.tar.gz" .
  bin=$root/fakebin
  mkdir -p "$bin"
  printf '#!/bin/sh\necho %s\n' "$version" > "$bin/g++"
  printf '#!/bin/sh\nexit 0\n' > "$bin/g++-12"
  printf '#!/bin/sh\necho "grader CXX=${CXX:-}" >> "%s/seen"\n' "$root" > "$bin/fake-grader"
  printf '#!/bin/sh\necho "cmake CXX=${CXX:-}" >> "%s/seen"\ncase "$*" in *--build*)\n  mkdir -p build/release/bin && cp "%s" build/release/bin/grader ;;\nesac\n' \
    "$root" "$bin/fake-grader" > "$bin/cmake"
  chmod +x "$bin/g++" "$bin/g++-12" "$bin/cmake" "$bin/fake-grader"
  (export PATH="$bin:$PATH"; unset CXX
   AUTOGRADER_ROOT=$root SKIP_INSTALL_DEPS=1 bash "$root/source/setup.sh" > "$root/setup.log" 2>&1
   mkdir -p "$root/submission"
   AUTOGRADER_ROOT=$root bash "$root/source/run_autograder" > "$root/run.log" 2>&1) || true
done
check "setup.sh, g++ 11: cmake configured and built with CXX=g++-12" \
  test "$(grep -c '^cmake CXX=g++-12$' "$work/cxx11-root/seen")" = 2
check "setup.sh, g++ 11: the reference graded with CXX=g++-12 (in setup.sh and in run_autograder)" \
  test "$(grep -c '^grader CXX=g++-12$' "$work/cxx11-root/seen")" = 2
check "setup.sh, g++ 11: says so in its log" grep -q "building with CXX=g++-12" "$work/cxx11-root/setup.log"
check "setup.sh, g++ 12: CXX left unset everywhere" test "$(grep -c 'CXX=$' "$work/cxx12-root/seen")" = 4

if [ "$failures" -ne 0 ]; then
  echo "$failures FAILED"
  exit 1
fi
echo "all passed"
