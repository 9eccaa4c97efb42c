#!/usr/bin/env bash
# Writes a Gradescope autograder bundle (make gradescope; grader/README.md, "Gradescope"):
#   grader/gradescope/make-bundle.sh --lab N    [--handout BIN] [--out DIR]   -> DIR/labN.zip
#   grader/gradescope/make-bundle.sh --stages 1,2,3,4              [--out DIR] -> DIR/stages-1234.zip
# The zip holds setup.sh and run_autograder (Gradescope's two entry points), collect.sh (the
# file mapping), bundle.conf (what to grade), reference.tar.gz (this tree without build/,
# results/ or .git: the reference code, the hidden tests, the grader's sources) and, for a lab,
# starter/ (the handout's version of each graded file, used when a submission lacks one).
# The unzipped folder is kept next to the zip (DIR/NAME/) for inspection.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
out=results/gradescope
lab=""
stages=""
handout=build/release/bin/lab-handout
while [ $# -gt 0 ]; do
  case $1 in
    --lab) lab=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --handout) handout=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set /p' "$0" | grep '^#'; exit 0 ;;
    *) echo "make-bundle: unknown argument $1" >&2; exit 2 ;;
  esac
done
if { [ -z "$lab" ] && [ -z "$stages" ]; } || { [ -n "$lab" ] && [ -n "$stages" ]; }; then
  echo "usage: make gradescope LAB=N   or   make gradescope STAGES=1,2,3,4" >&2
  exit 2
fi

if [ -n "$lab" ]; then
  name=lab$lab
else
  name=stages-${stages//,/}
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
bundle=$out/$name
rm -rf "$bundle" "$out/$name.zip"
mkdir -p "$bundle"

{
  echo "# What this bundle grades (written by grader/gradescope/make-bundle.sh)."
  echo "BUNDLE_NAME='$name'"
  if [ -n "$lab" ]; then
    cmake -DMANIFEST="$source_dir/labs/manifest.json" -DLAB="$lab" -DOUT="$bundle/lab.conf" \
      -P "$here/lab-files.cmake"
    cat "$bundle/lab.conf"
    rm "$bundle/lab.conf"
    echo "MODE=lab"
    echo "LAB=$lab"
  else
    dirs="common"
    IFS=, read -r -a numbers <<< "$stages"
    for n in "${numbers[@]}"; do
      d=$(cd "$source_dir" && ls -d stage"$n"-* 2>/dev/null | head -n 1)
      if [ -z "$d" ]; then
        echo "make-bundle: no stage$n-* folder in $source_dir" >&2
        exit 2
      fi
      dirs+=" $d"
    done
    echo "MODE=stages"
    echo "STAGES='$stages'"
    echo "GRADED_DIRS='$dirs'"
  fi
} > "$bundle/bundle.conf"

tar -C "$source_dir" --exclude=./build --exclude=./results --exclude=./.git -czf "$bundle/reference.tar.gz" .

if [ -n "$lab" ]; then
  # The handout's version of each graded file: what a submission lacking it is graded with.
  # lab-handout refuses an --out inside the reference, so the starter is made in a temp folder.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$handout" --lab "$lab" --source "$source_dir" --out "$tmp/starter" > "$tmp/handout.log" 2>&1 ||
    { cat "$tmp/handout.log" >&2; exit 1; }
  # shellcheck disable=SC1091
  . "$bundle/bundle.conf"
  for p in $GRADED_FILES; do
    if [ -f "$tmp/starter/$p" ]; then
      mkdir -p "$bundle/starter/$(dirname "$p")"
      cp "$tmp/starter/$p" "$bundle/starter/$p"
    fi
  done
  mkdir -p "$bundle/starter"
fi

cp "$here/setup.sh" "$here/run_autograder" "$here/collect.sh" "$bundle/"
chmod +x "$bundle/setup.sh" "$bundle/run_autograder"
(cd "$bundle" && cmake -E tar cf "../$name.zip" --format=zip -- *)
echo "make-bundle: $out/$name.zip ($(du -k "$out/$name.zip" | cut -f1) kB): upload it as the assignment's autograder"
(cd "$bundle" && find . -maxdepth 2 -not -path . | sort | sed 's/^\.\//  /')
