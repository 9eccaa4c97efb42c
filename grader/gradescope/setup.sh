#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image, with the bundle unzipped in
# $AUTOGRADER_ROOT/source (default /autograder/source). It installs the Debian/Ubuntu packages
# the grading needs (scripts/install-deps, the project's one list: groups build, test, grade),
# unpacks the reference tree, builds the grader, then grades the reference once so that every
# build the lab's checks need (the tests, the TSan and debug builds of its stages) is in the
# image: run_autograder lays a submission's files over that tree and ninja recompiles only
# what they touch. grader/README.md, "Gradescope".
set -euo pipefail
ROOT=${AUTOGRADER_ROOT:-/autograder}
SRC=$ROOT/source
# shellcheck disable=SC1091
. "$SRC/bundle.conf"
# shellcheck disable=SC1091
. "$SRC/collect.sh"
REF=$ROOT/reference
TREE=$ROOT/work/tree
BUILD=$ROOT/build/$BUNDLE_NAME
start=$(date +%s)

rm -rf "$REF"
mkdir -p "$REF"
tar -xzf "$SRC/reference.tar.gz" -C "$REF"
if [ "${SKIP_INSTALL_DEPS:-0}" != 1 ]; then
  "$REF/scripts/install-deps" build test grade
  install_cxx=("$REF/scripts/install-deps" gxx12)
else
  install_cxx=(false)
fi
# Ubuntu 22.04's g++ is 11: use g++-12 there (choose_cxx, collect.sh). CMake reads CXX when it
# first configures a build folder; compiler.env carries the choice to run_autograder.
cxx=$(choose_cxx "${install_cxx[@]}")
mkdir -p "$ROOT/build"
if [ -n "$cxx" ]; then
  export CXX=$cxx
  echo "export CXX=$cxx" > "$ROOT/build/compiler.env"
  echo "setup.sh: the default g++ is older than 12: building with CXX=$cxx"
else
  : > "$ROOT/build/compiler.env"
fi

jobs=$(nproc)
(cd "$REF" && cmake --preset release -DPROXY_BUILD_TESTS=OFF > /dev/null &&
  cmake --build --preset release -j "$jobs" --target grader gradebook)

if [ "$MODE" = lab ]; then
  args=(--lab "$LAB")
else
  args=(--stages "$STAGES" --stage-lanes "$(nproc)")  # one stage per core at once: grade.cpp
fi
# The tree every submission is laid over, and the grader's build folders for it. Grading the
# reference here both fills the builds and shows, in the image's log, that it gets full marks.
sync_tree "$REF" "$TREE"
"$REF/build/release/bin/grader" --submission "$TREE" --build-dir "$BUILD" --out "$ROOT/work/setup-grade" \
  -j "$jobs" "${args[@]}"
echo "setup.sh: done in $(( $(date +%s) - start )) s"
