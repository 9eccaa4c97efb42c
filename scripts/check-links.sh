#!/bin/sh
# The repository's Markdown pages point only at what exists (ctest: docs.links_resolve).
#   scripts/check-links.sh [SOURCE_DIR]        (default: the folder above this script)
# Checks, in every *.md outside build/ and results/, outside code fences:
#   - each relative link [text](target): the file or folder exists, and a #fragment names a
#     heading of the page it points into (GitHub's anchors: the heading lowercased, punctuation
#     but '-' and '_' dropped, each space a '-', "-1", "-2" after repeats);
#   - each path in backticks that starts at a top-level folder of this tree
#     (`common/transaction/proxy.cpp`, `tests/blackbox/stage_test.cpp`): it exists. Patterns and
#     placeholders (`*`, `<target>`, `{h,cpp}`, `labN`) are passed over, and so are the files
#     below that are made later.
# POSIX sh + awk; prints each broken reference as PAGE:LINE: WHAT and exits 1 if there is one.
set -eu
root=${1:-$(dirname "$0")/..}
cd "$root"

# Named in pages but not in the tree: written by lab-handout (labs/HANDOUT), by the student
# (the lab 4 plot), or a path in another repository (Gradescope's autograder_samples).
made_later="labs/HANDOUT labs/lab4-tuning/sweep.png docs/base_images.md"

# The anchors of Markdown page $1, one per line.
anchors() {
  awk '/^```/ { fence = !fence; next }
       !fence && /^#+ / {
         h = $0; sub(/^#+ +/, "", h); h = tolower(h)
         gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
         n = seen[h]++; print (n ? h "-" n : h)
       }' "$1"
}

tab=$(printf '\t')
list=${TMPDIR:-/tmp}/check-links.$$
trap 'rm -f "$list"' EXIT
status=0
pages=$(find . \( -path ./build -o -path ./results -o -name .git \) -prune -o -name '*.md' -type f -print |
        sed 's|^\./||' | sort)
tops=$(find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' ! -name build ! -name results |
       sed 's|^\./||' | tr '\n' '|')
for page in $pages; do
  dir=$(dirname "$page")
  # KIND TAB LINE TAB TARGET: "link" for [text](target), "path" for a backticked tree path.
  awk -v tops="|$tops" '
    /^```/ { fence = !fence; next }
    fence { next }
    {
      line = $0
      while (match(line, /`[^`]+`/)) {
        token = substr(line, RSTART + 1, RLENGTH - 2)
        line = substr(line, 1, RSTART - 1) " " substr(line, RSTART + RLENGTH)
        top = token; sub(/\/.*/, "", top)
        if (token ~ /^[A-Za-z0-9_.-]+\/[^ ]*$/ && index(tops, "|" top "|") &&
            token !~ /[*<>{}$]|labN|N-/)
          print "path\t" NR "\t" token
      }
      while (match(line, /\]\([^) ]+\)/)) {
        print "link\t" NR "\t" substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$page" > "$list"
  while IFS="$tab" read -r kind nr target; do
    case $target in http://* | https://* | mailto:*) continue ;; esac
    if [ "$kind" = path ]; then
      path=${target%%:*}  # file:line
      case " $made_later " in *" $path "*) continue ;; esac
      [ -e "$path" ] || { echo "$page:$nr: \`$target\`: no such file in the tree"; status=1; }
      continue
    fi
    path=${target%%#*}
    fragment=
    case $target in *'#'*) fragment=${target#*#} ;; esac
    if [ -z "$path" ]; then file=$page; else file=$dir/$path; fi
    if [ ! -e "$file" ]; then
      echo "$page:$nr: $target: no such file"
      status=1
    elif [ -n "$fragment" ] && [ -f "$file" ] && ! anchors "$file" | grep -qx -- "$fragment"; then
      echo "$page:$nr: $target: no heading with that anchor in $file"
      status=1
    fi
  done < "$list"
done
if [ "$status" -eq 0 ]; then
  echo "every link and tree path in $(echo "$pages" | wc -l) Markdown pages resolves"
fi
exit "$status"
