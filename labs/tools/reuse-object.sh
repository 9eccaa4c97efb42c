#!/bin/sh
# The compiler launcher of a lab starter's build (labs/tools/check-starter.sh sets it as
# CMAKE_CXX_COMPILER_LAUNCHER). A starter differs from the reference in a handful of files; every
# other object file would come out of the compiler identical to the one the reference build
# already made. check-starter.sh lists those objects in REUSE/d/: same compile command (paths
# aside), and no source or header among the reference object's dependencies differs in the
# starter tree. For a listed object this copies the reference's object and writes the dependency
# file ninja expects; anything else is compiled.
#
#   reuse-object.sh REUSE COMPILER ARG...      (ninja runs it from the build folder)
#
# REUSE/ref_build holds the reference build folder; REUSE/d/KEY the dependency file for the
# object whose path (relative to the build folder) is KEY with '/' written as '%'.
set -eu
reuse=$1
shift
out= depfile= prev=
for arg in "$@"; do
  case $prev in
    -o) out=$arg ;;
    -MF) depfile=$arg ;;
  esac
  prev=$arg
done
if [ -n "$out" ] && [ -n "$depfile" ] && [ -f "$reuse/ref_build" ]; then
  key=$(printf '%s' "$out" | tr '/' '%')
  if [ -f "$reuse/d/$key" ]; then
    ref_build=$(cat "$reuse/ref_build")
    mkdir -p "$(dirname "$out")"
    cp "$ref_build/$out" "$out"
    cp "$reuse/d/$key" "$depfile"
    exit 0
  fi
fi
# Not reusable: compile, through the launcher the user's environment names (ccache), if any.
# shellcheck disable=SC2086
exec ${CMAKE_CXX_COMPILER_LAUNCHER:-} "$@"
