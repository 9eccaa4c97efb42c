#!/bin/sh
# Which objects of a build may be copied from another build of (almost) the same tree instead of
# compiled, for labs/tools/reuse-object.sh (the compiler launcher that copies them).
#
#   plan-reuse.sh REF_BUILD SOURCE TREE BUILD REUSE
#
# REF_BUILD is a ninja build of SOURCE; BUILD (already configured) builds TREE, a copy of SOURCE
# with some files changed. Used by check-starter.sh (a lab starter against the reference's
# build) and by the grader's lab mode on a self-grade (the grader's copy of a student's tree
# against the student's own build/release: grader --reuse-build).
#
# Which objects of the starter build may be copied from the reference build (REF_BUILD, by
# default the folder above TOOL's bin/) instead of compiled: those whose compile command is the
# reference's (only the tree's -I paths and source path told apart from the reference's: a
# definition naming a folder, such as the bin/ the black-box tests start stages from, keeps an
# object apart), and whose reference object is up to date (ninja's deps log: VALID, newer than
# each of its sources and headers) with no dependency that differs in the starter tree. Each
# gets its ninja dependency file in REUSE/d/, which labs/tools/reuse-object.sh reads.
set -eu
ref_build=$1 source=$2 tree=$3 build=$4 reuse=$5
rm -rf "$reuse"
mkdir -p "$reuse/d"
[ -f "$ref_build/compile_commands.json" ] && [ -f "$ref_build/.ninja_deps" ] || exit 0
# The reference's files that the starter tree changed or left out.
LC_ALL=C diff -rq -x build -x results -x .git "$source" "$tree" 2>/dev/null |
  awk -v source="$source" -v tree="$tree" '
    /^Files / { p = substr($0, 7); print substr(p, 1, index(p, " and " tree "/") - 1); next }
    /^Only in / { p = substr($0, 9); sub(/: /, "/", p); if (index(p, source "/") == 1) print p }
  ' > "$reuse/changed"
# Candidate objects: the starter's compile commands that are the reference's. A target with
# precompiled headers (tests/CMakeLists.txt) includes its build folder's own copy of them, which
# holds only headers from outside the tree and so is the same in both builds.
awk -v source="$source" -v tree="$tree" -v build="$build" -v ref_build="$ref_build" '
  function swap(s, from, to,    i, out) {
    out = ""
    while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) }
    return out s
  }
  !/^  "command": / { next }
  FNR == NR { reference[$0] = 1; next }
  {
    c = swap(swap($0, "-I" tree "/", "-I" source "/"), " -c " tree "/", " -c " source "/")
    c = swap(c, " -include " build "/", " -include " ref_build "/")
    if (!(c in reference)) next
    o = substr(c, index(c, " -o ") + 4)
    print substr(o, 1, index(o, " ") - 1)
  }' "$ref_build/compile_commands.json" "$build/compile_commands.json" > "$reuse/candidates"
[ -s "$reuse/candidates" ] || exit 0
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
