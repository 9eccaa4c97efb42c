#!/bin/sh
# The labs' checks in `make test` (ctest -L labs; labs/CMakeLists.txt registers them).
#
#   check-starter.sh reference TOOL SOURCE BIN_DIR LAB...
#       every test group of each LAB in labs/manifest.json names at least one test that exists
#       in the reference's binaries (BIN_DIR/unit_tests, BIN_DIR/blackbox_tests), so a renamed
#       test cannot silently drop out of a lab; and the handout and hints file the manifest names
#       for each LAB exist (lab-handout refuses to write a starter without them).
#   check-starter.sh starter TOOL SOURCE WORK LAB
#       writes lab LAB's starter tree to WORK/tree (the same folder for every lab, so the build
#       in WORK/build is incremental from one lab to the next), builds it (RelWithDebInfo,
#       -Werror: a build is a warning-free build; each object the lab leaves unchanged is copied
#       from the reference build REF_BUILD, by default TOOL's bin/..: plan-reuse.sh), then runs
#       each visible test of the lab on its own, with a time limit: every one must FAIL and
#       print `TODO(student)` (the stub it hit).
# POSIX sh + awk; exits 1 naming what failed.
set -eu

mode=$1 tool=$2 source=$3
shift 3

# The full names of the tests `binary` runs under gtest `filter`, one per line.
list_tests() {
  "$1" --gtest_filter="$2" --gtest_list_tests |
    awk '/^[^ ]/ { suite = $1; next } /^  / { print suite $1 }'
}

# Test groups of lab $1, visible ones only when $2 is "visible": binary TAB filter TAB vis TAB id.
groups() {
  "$tool" --lab "$1" --source "$source" --print tests |
    awk -F '\t' -v only="$2" 'only != "visible" || $3 == "visible"'
}

tab=$(printf '\t')

if [ "$mode" = reference ]; then
  bin_dir=$1
  shift
  status=0
  for lab in "$@"; do
    groups "$lab" all > "${TMPDIR:-/tmp}/labs-groups.$$"
    while IFS="$tab" read -r binary filter visibility id; do
      n=$(list_tests "$bin_dir/$binary" "$filter" | wc -l)
      if [ "$n" -eq 0 ]; then
        echo "FAIL: lab $lab, group $id ($visibility): '$filter' matches no test in $binary"
        status=1
      else
        echo "lab $lab, $id ($visibility): $n tests in $binary match '$filter'"
      fi
    done < "${TMPDIR:-/tmp}/labs-groups.$$"
    rm -f "${TMPDIR:-/tmp}/labs-groups.$$"
    for doc in $("$tool" --lab "$lab" --source "$source" --print docs); do
      if [ -f "$source/$doc" ]; then
        echo "lab $lab: $doc is there"
      else
        echo "FAIL: lab $lab: $doc, named by labs/manifest.json, does not exist"
        status=1
      fi
    done
  done
  exit $status
fi

[ "$mode" = starter ] || { echo "usage: $0 reference|starter ..." >&2; exit 2; }
work=$1 lab=$2
tree=$work/tree build=$work/build logs=$work/lab$lab
mkdir -p "$logs"
start=$(date +%s)

"$tool" --lab "$lab" --source "$source" --out "$tree"
launcher="sh;$(cd "$(dirname "$0")" && pwd)/reuse-object.sh;$work/reuse"
if [ ! -f "$build/build.ninja" ] ||
   ! grep -qF "CMAKE_CXX_COMPILER_LAUNCHER:STRING=$launcher" "$build/CMakeCache.txt"; then
  # The students' build type; the warnings are the project's own. The launcher takes from the
  # reference build every object this lab does not change (plan-reuse.sh).
  cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" > "$logs/configure.log" 2>&1 ||
    { cat "$logs/configure.log"; echo "FAIL: the lab $lab starter does not configure"; exit 1; }
else
  # Brings build.ninja and compile_commands.json up to date with the tree's CMake files.
  cmake --build "$build" --target build.ninja > "$logs/configure.log" 2>&1 ||
    { cat "$logs/configure.log"; echo "FAIL: the lab $lab starter does not configure"; exit 1; }
fi

# Which objects of the starter build may be copied from the reference build (REF_BUILD, by
# default the folder above TOOL's bin/): labs/tools/plan-reuse.sh says which and how.
sh "$(cd "$(dirname "$0")" && pwd)/plan-reuse.sh" "${REF_BUILD:-$(cd "$(dirname "$tool")/.." && pwd)}" \
  "$source" "$tree" "$build" "$work/reuse"
reused=$(find "$work/reuse/d" -type f | wc -l)
stages=$("$tool" --lab "$lab" --source "$source" --print stages | tr '\n' ' ')
# shellcheck disable=SC2086
if ! cmake --build "$build" --target unit_tests blackbox_tests origin $stages -j "${JOBS:-2}" \
    > "$logs/build.log" 2>&1; then
  grep -E -B2 -A6 'error|warning' "$logs/build.log" | head -80
  echo "FAIL: the lab $lab starter does not build warning-free (-Wall -Wextra -Werror); log: $logs/build.log"
  exit 1
fi
echo "lab $lab: the starter built warning-free in $(( $(date +%s) - start )) s ($reused objects the lab does not change were the reference's)"

status=0
total=0
groups "$lab" visible > "$logs/groups.tsv"
: > "$logs/all.tests"
while IFS="$tab" read -r binary filter visibility id; do
  list_tests "$build/bin/$binary" "$filter" > "$logs/$id.tests"
  if [ ! -s "$logs/$id.tests" ]; then
    echo "FAIL: lab $lab, group $id: '$filter' matches no test in the starter's $binary"
    status=1
  fi
  sed "s|^|$build/bin/$binary $logs/ |" "$logs/$id.tests" >> "$logs/all.tests"
done < "$logs/groups.tsv"

# Every test alone, a few at a time (they use port 0, so they can share the machine): some wait
# out a generous deadline on a stub that never answers. A stub must fail, not hang: the time
# limit turns a hang into a failure of this check. Each run leaves LOG and LOG.status.
# shellcheck disable=SC2016
xargs -P "${LABS_CHECK_PARALLEL:-4}" -L 1 sh -c '
  log="$1$(printf "%s" "$2" | tr "/" "_").log"
  timeout 120 "$0" --gtest_filter="$2" > "$log" 2>&1 < /dev/null
  echo $? > "$log.status"' < "$logs/all.tests"

while IFS="$tab" read -r binary filter visibility id; do
  n=$(wc -l < "$logs/$id.tests")
  [ "$n" -gt 0 ] || continue
  bad=0
  while read -r test; do
    total=$((total + 1))
    log="$logs/$(printf '%s' "$test" | tr '/' '_').log"
    if [ "$(cat "$log.status" 2>/dev/null)" = 0 ]; then
      echo "FAIL: lab $lab: $test PASSES on the starter (a visible test must fail until the TODO is done)"
      bad=$((bad + 1))
      status=1
    elif ! grep -q 'TODO(student)' "$log"; then
      echo "FAIL: lab $lab: $test fails on the starter without naming a TODO(student); log: $log"
      [ "$bad" -ge 3 ] || grep -E 'Failure|Expected|Actual|exception' "$log" | head -8
      bad=$((bad + 1))
      status=1
    fi
  done < "$logs/$id.tests"
  echo "lab $lab, $id: $n visible tests; $((n - bad)) fail on the starter and name their TODO(student)"
done < "$logs/groups.tsv"
[ "$total" -gt 0 ] || { echo "FAIL: lab $lab has no visible test"; status=1; }
echo "lab $lab: $total visible tests checked in $(( $(date +%s) - start )) s"
exit $status
