#!/usr/bin/env bash
# Grades every subfolder of a folder of submissions (make grade-all; grader/README.md, "Many
# submissions on one machine"):
#   grader/grade-all.sh --submissions DIR [--lab N | --stages 1,3] [--jobs K] [--out DIR]
#                       [--grader BIN] [--gradebook BIN] [-- GRADER_ARGS...]
# K submissions at a time, each slot with build folders of its own that it reuses from one
# submission to the next (the files are laid over the previous submission's tree, so ninja
# recompiles only the files that differ). Each submission's report goes to OUT/NAME/ (report.md,
# results.json, junit.xml, logs/) and its grader output to OUT/NAME/grader.log; a folder whose
# OUT/NAME/results.json exists is finished and skipped, so an interrupted run resumes where it
# stopped. At the end OUT/gradebook.csv has a row per submission and a column per check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$here/gradescope/collect.sh"
submissions=""
out=results/grade-all
jobs=1
lab=""
stages=""
grader=build/release/bin/grader
gradebook=build/release/bin/gradebook
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --submissions) submissions=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --lab) lab=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --grader) grader=$2; shift 2 ;;
    --gradebook) gradebook=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
    *) echo "grade-all: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$submissions" ] || [ ! -d "$submissions" ]; then
  echo "usage: make grade-all SUBMISSIONS=DIR [LAB=N | STAGES=1,3] [JOBS=K]" >&2
  exit 2
fi
case $jobs in ''|*[!0-9]*|0) echo "grade-all: --jobs must be a positive number" >&2; exit 2 ;; esac
submissions=$(cd "$submissions" && pwd)
grader=$(cd "$(dirname "$grader")" && pwd)/$(basename "$grader")
gradebook=$(cd "$(dirname "$gradebook")" && pwd)/$(basename "$gradebook")
mkdir -p "$out/.slots" "$out/.claims" "$out/.failed"
out=$(cd "$out" && pwd)
# One run per output folder: a second would clear this one's claims (below) and grade its
# submissions beside it. The lock is this script's and its slots' (the graders close it), and
# the kernel lets go of it when they end, however they end (flock(1)).
exec 9> "$out/.lock"
if ! flock -n 9; then
  echo "grade-all: another grade-all run is writing to $out; let it finish, or stop it first" >&2
  exit 2
fi
# Claims of an interrupted run, and the failures of the last one: those submissions are graded
# again.
rm -rf "${out:?}/.claims"/* "${out:?}/.failed"/*

mode_args=()
[ -n "$lab" ] && mode_args+=(--lab "$lab")
[ -n "$stages" ] && mode_args+=(--stages "$stages")

names=()
for d in "$submissions"/*/; do
  [ -d "$d" ] || continue
  names+=("$(basename "$d")")
done
total=${#names[@]}
if [ "$total" -eq 0 ]; then
  echo "grade-all: no subfolder in $submissions" >&2
  exit 2
fi
finished_count() {
  local n=0 name
  for name in "${names[@]}"; do [ -f "$out/$name/results.json" ] && n=$((n + 1)); done
  echo "$n"
}
already=$(finished_count)
echo "grade-all: $total submissions in $submissions, $already already graded, $jobs at a time -> $out"

# One slot: takes the next unclaimed, unfinished submission until none is left. A claim is a
# directory made with mkdir, atomic, so two slots never hold the same submission at once; a slot
# finishes a submission (moves its folder in, or marks it in .failed when the grader wrote no
# results) before it lets go of the claim, so the look for results.json and .failed after taking
# a claim is the one that decides. Without the .failed mark a slot that had not yet passed a
# failed submission in the list would grade it again in the same run.
slot() {
  local id=$1 name dir tree build src grading=""
  # Stopped (the run's stop below): the grader goes with the slot, so that no grader of this run
  # still writes into .partial-NAME when the next run grades NAME again.
  trap 'trap - TERM; [ -n "$grading" ] && kill -TERM "$grading" 2> /dev/null; wait; exit 143' TERM
  dir=$out/.slots/$id
  tree=$dir/tree
  build=$dir/build
  for name in "${names[@]}"; do
    [ -f "$out/$name/results.json" ] && continue
    mkdir "$out/.claims/$name" 2> /dev/null || continue
    # Look again now that the claim is ours: another slot may have finished this submission (its
    # results.json moved in, or its .failed mark made, then its claim removed) between the look
    # above and the mkdir.
    if [ -f "$out/$name/results.json" ] || [ -d "$out/.failed/$name" ]; then
      rmdir "$out/.claims/$name"
      continue
    fi
    src=$submissions/$name
    if [ -z "$lab" ]; then
      # Stage mode builds from the tree itself: lay the submission over this slot's tree so that
      # unchanged files keep their mtimes. (Lab mode copies into its build folder by itself.)
      sync_tree "$src" "$tree"
      src=$tree
    fi
    rm -rf "${out:?}/.partial-$name"
    mkdir -p "$out/.partial-$name"
    # In the background, so that the trap above runs at once; env gives it back the Ctrl-C
    # (SIGINT, SIGQUIT) a background command of a script ignores, for the programs it starts.
    env --default-signal=INT,QUIT "$grader" --submission "$src" --build-dir "$build" \
      --out "$out/.partial-$name" "${mode_args[@]}" "${extra[@]}" > "$out/.partial-$name/grader.log" 2>&1 9>&- &
    grading=$!
    wait "$grading" || true  # returns at once on TERM, for the trap above
    grading=""
    if [ -f "$out/.partial-$name/results.json" ]; then
      rm -rf "${out:?}/$name"
      mv "$out/.partial-$name" "$out/$name"  # finished: results.json appears with the folder
    else
      echo "grade-all: $name: the grader wrote no results (see $out/.partial-$name/grader.log)" >&2
      mkdir -p "$out/.failed/$name"
    fi
    rm -rf "$out/.claims/$name"
  done
}

start=$(date +%s)
pids=()
# Stopped by a signal to this process alone (kill PID, a CI job cancelled), the slots and their
# graders would go on grading unseen, and a run started again would grade their submissions a
# second time beside them: stop them first.
stop() {
  trap - INT TERM HUP
  kill -TERM "${pids[@]}" 2> /dev/null || true
  wait
  printf '\ngrade-all: stopped; a run started again grades what was not finished\n' >&2
  exit "$1"
}
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP
for ((i = 1; i <= jobs; i++)); do
  slot "$i" &
  pids+=($!)
done
format() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
running() {
  local p
  for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && return 0; done
  return 1
}
# The progress line: what is done, what runs, and an estimate from this run's own pace.
while running; do
  done_now=$(finished_count)
  elapsed=$(( $(date +%s) - start ))
  graded=$((done_now - already))
  left=$((total - done_now))
  eta="?"
  [ "$graded" -gt 0 ] && eta=$(format $(( elapsed * left / graded )))
  printf '\r[grade-all %s] %d/%d graded, %d running, ETA %s   ' "$(format "$elapsed")" "$done_now" "$total" \
    "$(find "$out/.claims" -mindepth 1 -maxdepth 1 | wc -l)" "$eta" >&2
  sleep 1  # a progress line, not a test: polling is fine here
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
printf '\n' >&2
"$gradebook" csv "$out/gradebook.csv" "$out"
done_now=$(finished_count)
echo "grade-all: $done_now/$total graded in $(format $(( $(date +%s) - start ))); gradebook: $out/gradebook.csv"
[ "$done_now" -eq "$total" ] && [ "$failed" -eq 0 ]
