#!/usr/bin/env bash
# make gradescope-check: builds the bundle(s), unzips each into a simulated Gradescope root
# (AUTOGRADER_ROOT=WORK/NAME-root), runs the real setup.sh once, then the real run_autograder on
# submissions whose outcome is known, and checks each results.json. Prints the time of every
# step (the figures of grader/README.md, "Gradescope"). Slow: a cold build of the reference's
# tests and of the TSan and debug stage builds, then one grading per submission.
#   grader/gradescope/check.sh --lab 3 [--stages 1,2,3,4] [--handout BIN] [--work DIR]
# (--lab 0: the stages bundle only.) Each step's time is appended to WORK/timings.txt.
# Lab: the reference (full marks), the untouched starter handed in flat (low score, outputs
# naming TODO(student)), a submission that does not compile (0, the compiler's error shown),
# one missing a file (named as missing). Stages: the reference (everything passes but stage 1's
# expected lesson), stage 3 not compiling (its checks 0, the others full), stage 4's folder
# missing (named, its checks 0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
lab=3
stages=""
handout=$source_dir/build/release/bin/lab-handout
work=$source_dir/results/gradescope-check
while [ $# -gt 0 ]; do
  case $1 in
    --lab) lab=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --handout) handout=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$work"
work=$(cd "$work" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }

# timed LABEL CMD...: runs CMD, prints wall and CPU seconds (children included) to the log.
timed() {
  local label=$1 t0 c0 t1 c1
  shift
  t0=$(date +%s.%N)
  c0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  "$@"
  local rc=$?
  t1=$(date +%s.%N)
  # The CPU of everything it ran: this shell's waited-for children (cutime + cstime).
  c1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  awk -v l="$label" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "TIME %-40s wall %6.1f s   cpu %6.1f s\n", l, t1 - t0, (c1 - c0) / hz }' | tee -a "$work/timings.txt"
  return $rc
}

# prepare ROOT NAME: a fresh simulated /autograder with bundle NAME unzipped in source/.
prepare() {
  local root=$1 name=$2
  rm -rf "$root"
  mkdir -p "$root/source"
  (cd "$root/source" && cmake -E tar xf "$work/bundles/$name.zip")
  [ -x "$root/source/run_autograder" ] && [ -x "$root/source/setup.sh" ] ||
    fail "$name.zip: setup.sh and run_autograder must be executable after unzipping"
}

# submit ROOT LABEL: run_autograder on whatever is in ROOT/submission; leaves results in
# ROOT/results/results.json and prints "SCORE MAX UNEXPECTED" in $summary.
submit() {
  local root=$1 label=$2 rc=0
  rm -rf "$root/results"
  timed "run_autograder: $label" env AUTOGRADER_ROOT="$root" "$root/source/run_autograder" \
    > "$work/$label.log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || fail "$label: run_autograder exited $rc (must always exit 0)"
  if [ ! -f "$root/results/results.json" ]; then
    fail "$label: no results/results.json"
    summary="0 0 0"
    return
  fi
  cp "$root/results/results.json" "$work/$label.results.json"
  summary=$("$root/reference/build/release/bin/gradebook" summary "$root/results/results.json")
  echo "      $label: score, max, unexpected failures = $summary"
}

has() { grep -q -- "$2" "$1"; }

mkdir -p "$work/bundles"
touch "$work/timings.txt"

# ---- lab mode (--lab 0 skips it) -----------------------------------------------------------
if [ "$lab" != 0 ]; then
"$here/make-bundle.sh" --lab "$lab" --handout "$handout" --out "$work/bundles" > "$work/bundle-lab$lab.log"
root=$work/lab$lab-root
prepare "$root" "lab$lab"
timed "setup.sh (lab $lab, cold)" env AUTOGRADER_ROOT="$root" bash "$root/source/setup.sh" > "$work/lab$lab-setup.log" 2>&1 ||
  { fail "setup.sh failed: $work/lab$lab-setup.log"; exit 1; }
# shellcheck disable=SC1091
. "$root/source/bundle.conf"

# The reference, in the tree layout.
rm -rf "$root/submission"
for p in $GRADED_FILES; do
  [ -f "$root/reference/$p" ] || continue
  mkdir -p "$root/submission/$(dirname "$p")"
  cp "$root/reference/$p" "$root/submission/$p"
done
submit "$root" "lab$lab-reference"
read -r score max unexpected <<< "$summary"
[ "$max" != 0 ] && [ "$score" = "$max" ] && [ "$unexpected" = 0 ] && pass "reference: full marks ($score/$max)" ||
  fail "reference: $score/$max with $unexpected failures (expected full marks; see $work/lab$lab-reference.results.json)"

# The untouched starter, flat (every graded file at the top of the submission).
rm -rf "$root/submission"
mkdir -p "$root/submission"
for p in $GRADED_FILES; do
  [ -f "$root/source/starter/$p" ] && cp "$root/source/starter/$p" "$root/submission/"
done
submit "$root" "lab$lab-starter"
read -r score max unexpected <<< "$summary"
awk -v s="$score" -v m="$max" 'BEGIN { exit !(m > 0 && s <= m / 4) }' && pass "starter: low score ($score/$max)" ||
  fail "starter: $score/$max (expected at most a quarter)"
has "$work/lab$lab-starter.results.json" "TODO(student) lab $lab" && pass "starter: outputs name the TODO(student) stubs" ||
  fail "starter: no output names a TODO(student) stub"
first=${GRADED_FILES%% *}
has "$work/lab$lab-starter.results.json" "found    $first <- ${first##*/}" && pass "starter: flat files mapped to the tree" ||
  fail "starter: the output does not show $first taken from the flat ${first##*/}"

# A submission that does not compile: the reference with a syntax error in one C++ file.
broken=""
for p in $GRADED_FILES; do case $p in *.cpp|*.h) broken=$p; break ;; esac; done
rm -rf "$root/submission"
for p in $GRADED_FILES; do
  [ -f "$root/reference/$p" ] || continue
  mkdir -p "$root/submission/$(dirname "$p")"
  cp "$root/reference/$p" "$root/submission/$p"
done
printf '\nthis line does not compile;\n' >> "$root/submission/$broken"
submit "$root" "lab$lab-no-compile"
read -r score max unexpected <<< "$summary"
[ "$score" = 0 ] && pass "not compiling: 0/$max" || fail "not compiling: $score/$max (expected 0)"
has "$work/lab$lab-no-compile.results.json" "${broken##*/}.*error" && pass "not compiling: the compiler's error on ${broken##*/} is shown" ||
  fail "not compiling: no compiler error naming ${broken##*/} in the output"

# A submission missing a file: the reference without its last graded C++ file.
gone=""
for p in $GRADED_FILES; do case $p in *.cpp) gone=$p ;; esac; done
rm -f "$root/submission/$broken"
cp "$root/reference/$broken" "$root/submission/$broken"
rm -f "$root/submission/$gone"
submit "$root" "lab$lab-missing"
read -r score max unexpected <<< "$summary"
has "$work/lab$lab-missing.results.json" "MISSING  $gone" && pass "missing file: $gone named as missing" ||
  fail "missing file: the output does not name $gone"
awk -v s="$score" -v m="$max" 'BEGIN { exit !(s < m) }' && pass "missing file: not full marks ($score/$max)" ||
  fail "missing file: $score/$max"

fi

# ---- stage mode ----------------------------------------------------------------------------
if [ -n "$stages" ]; then
  name=stages-${stages//,/}
  "$here/make-bundle.sh" --stages "$stages" --out "$work/bundles" > "$work/bundle-$name.log"
  root=$work/$name-root
  prepare "$root" "$name"
  timed "setup.sh ($name, cold)" env AUTOGRADER_ROOT="$root" bash "$root/source/setup.sh" > "$work/$name-setup.log" 2>&1 ||
    { fail "setup.sh failed: $work/$name-setup.log"; exit 1; }
  # shellcheck disable=SC1091
  . "$root/source/bundle.conf"
  rm -rf "$root/submission"
  mkdir -p "$root/submission/proxy"  # a zip of the repository's top folder: one wrapping folder
  for d in $GRADED_DIRS; do cp -r "$root/reference/$d" "$root/submission/proxy/"; done
  submit "$root" "$name-reference"
  read -r score max unexpected <<< "$summary"
  [ "$unexpected" = 0 ] && [ "$max" != 0 ] && pass "stages reference: $score/$max, no failure but the expected lessons" ||
    fail "stages reference: $score/$max with $unexpected unexpected failures"
  last=${GRADED_DIRS##* }
  rm -rf "$root/submission/proxy/$last"
  submit "$root" "$name-missing-$last"
  read -r score2 max2 unexpected2 <<< "$summary"
  has "$work/$name-missing-$last.results.json" "MISSING  $last/" && pass "stages: $last/ named as missing" ||
    fail "stages: the output does not name $last/ as missing"
  awk -v s="$score2" -v m="$score" 'BEGIN { exit !(s < m) }' && pass "stages: missing $last/ scores less ($score2/$max2)" ||
    fail "stages: missing $last/ still scores $score2/$max2"
fi

echo
cat "$work/timings.txt"
if [ "$failures" -eq 0 ]; then
  echo "gradescope-check: all passed (logs and results in $work)"
else
  echo "gradescope-check: $failures FAILED (logs and results in $work)"
  exit 1
fi
