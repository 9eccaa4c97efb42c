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
#       from the reference build REF_BUILD, by default TOOL's bin/..: plan_reuse), then runs
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
  # reference build every object this lab does not change (plan_reuse below).
  cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" > "$logs/configure.log" 2>&1 ||
    { cat "$logs/configure.log"; echo "FAIL: the lab $lab starter does not configure"; exit 1; }
else
  # Brings build.ninja and compile_commands.json up to date with the tree's CMake files.
  cmake --build "$build" --target build.ninja > "$logs/configure.log" 2>&1 ||
    { cat "$logs/configure.log"; echo "FAIL: the lab $lab starter does not configure"; exit 1; }
fi

# Which objects of the starter build may be copied from the reference build (REF_BUILD, by
# default the folder above TOOL's bin/) instead of compiled: those whose compile command is the
# reference's (only the tree's -I paths and source path told apart from the reference's: a
# definition naming a folder, such as the bin/ the black-box tests start stages from, keeps an
# object apart), and whose reference object is up to date (ninja's deps log: VALID, newer than
# each of its sources and headers) with no dependency that differs in the starter tree. Each
# gets its ninja dependency file in $work/reuse/d/, which labs/tools/reuse-object.sh reads.
plan_reuse() {
  ref_build=$1 reuse=$2
  rm -rf "$reuse"
  mkdir -p "$reuse/d"
  [ -f "$ref_build/compile_commands.json" ] && [ -f "$ref_build/.ninja_deps" ] || return 0
  # The reference's files that the starter tree changed or left out.
  LC_ALL=C diff -rq -x build -x results -x .git "$source" "$tree" 2>/dev/null |
    awk -v source="$source" -v tree="$tree" '
      /^Files / { p = substr($0, 7); print substr(p, 1, index(p, " and " tree "/") - 1); next }
      /^Only in / { p = substr($0, 9); sub(/: /, "/", p); if (index(p, source "/") == 1) print p }
    ' > "$reuse/changed"
  # Candidate objects: the starter's compile commands that are the reference's.
  awk -v source="$source" -v tree="$tree" '
    function swap(s, from, to,    i, out) {
      out = ""
      while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) }
      return out s
    }
    !/^  "command": / { next }
    FNR == NR { reference[$0] = 1; next }
    {
      c = swap(swap($0, "-I" tree "/", "-I" source "/"), " -c " tree "/", " -c " source "/")
      if (!(c in reference)) next
      o = substr(c, index(c, " -o ") + 4)
      print substr(o, 1, index(o, " ") - 1)
    }' "$ref_build/compile_commands.json" "$build/compile_commands.json" > "$reuse/candidates"
  [ -s "$reuse/candidates" ] || return 0
  find "$source" -path "$source/build" -prune -o -type f -printf '%T@ %p\n' > "$reuse/mtimes"
  (cd "$ref_build" && xargs sh -c 'find "$@" -maxdepth 0 -printf "%T@ %p\n"' find) \
    < "$reuse/candidates" > "$reuse/objects" 2>/dev/null || true
  # shellcheck disable=SC2046
  ninja -C "$ref_build" -t deps $(cat "$reuse/candidates") 2>/dev/null |
    awk -v source="$source" -v tree="$tree" -v ref_build="$ref_build" -v out="$reuse/d" \
        -v changed="$reuse/changed" -v mtimes="$reuse/mtimes" -v objects="$reuse/objects" '
      function flush(    key) {
        if (obj != "" && ok) {
          key = obj
          gsub("/", "%", key)
          printf "%s:%s\n", obj, deps > (out "/" key)
          close(out "/" key)
        }
        obj = ""
      }
      # An absolute path without "." or ".." segments; a relative one is relative to the
      # reference build folder (ccache with base_dir writes relative paths into the deps log).
      function canonical(p,    n, i, part, out, k) {
        if (substr(p, 1, 1) != "/") p = ref_build "/" p
        n = split(p, part, "/")
        k = 0
        for (i = 1; i <= n; i++) {
          if (part[i] == "" || part[i] == ".") continue
          if (part[i] == "..") { if (k > 0) k--; continue }
          out[++k] = part[i]
        }
        p = ""
        for (i = 1; i <= k; i++) p = p "/" out[i]
        return p
      }
      FILENAME == changed { is_changed[$0] = 1; next }
      FILENAME == mtimes || FILENAME == objects { mtime[substr($0, index($0, " ") + 1)] = $1 + 0; next }
      /^[^ ].*: #deps / {
        flush()
        obj = substr($0, 1, index($0, ": #deps") - 1)
        built = mtime[obj]
        ok = built > 0 && $0 ~ /\(VALID\)$/
        deps = ""
        next
      }
      /^    / {
        dep = canonical(substr($0, 5))
        if (index(dep, ref_build "/") == 1) {
          ok = 0  # a generated file
        } else if (index(dep, source "/") == 1) {
          if ((dep in is_changed) || !(dep in mtime) || mtime[dep] >= built) ok = 0
          dep = tree substr(dep, length(source) + 1)
        }
        deps = deps " \\\n  " dep
      }
      END { flush() }
    ' "$reuse/changed" "$reuse/mtimes" "$reuse/objects" -
  echo "$ref_build" > "$reuse/ref_build"
}
plan_reuse "${REF_BUILD:-$(cd "$(dirname "$tool")/.." && pwd)}" "$work/reuse"
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
