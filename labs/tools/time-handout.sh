#!/usr/bin/env bash
# Times lab N as a student meets it (labs/README.md, "A fresh handout, measured"): a fresh
# handout, its first `make`, the lab's graded files replaced by the reference's (a finished lab),
# `make` again, then the first self-grade with an empty grader cache. Prints one line per step:
# wall, user and system seconds.
# Usage: labs/tools/time-handout.sh N [WORK]   from the top of the reference, after `make`
#   WORK (default build/time-handout/labN) is emptied first; the handout is WORK/tree and the
#   grader's build WORK/cache. No ccache: a student's machine has none.
set -euo pipefail
lab="${1:?usage: labs/tools/time-handout.sh N [WORK]}"
case "$lab" in 1|2|3|4) ;; *) echo "time-handout: N is 1, 2, 3 or 4" >&2; exit 2;; esac
reference="$(pwd)"
work="$(realpath -m "${2:-build/time-handout/lab$lab}")"
handout="$reference/build/release/bin/lab-handout"
[[ -x $handout ]] || { echo "time-handout: build the reference first (make)" >&2; exit 2; }
rm -rf "$work"
mkdir -p "$work/cache" "$work/logs"
unset CMAKE_CXX_COMPILER_LAUNCHER

# step NAME CMD...: runs CMD in the handout, its output to WORK/logs/NAME.log, and prints its times.
step() {
  local name="$1"; shift
  if ! /usr/bin/time -f "$name: wall %e s, user %U s, system %S s" -o "$work/logs/$name.time" \
      "$@" > "$work/logs/$name.log" 2>&1; then
    cat "$work/logs/$name.time"
    echo "time-handout: $name failed; see $work/logs/$name.log" >&2
    exit 1
  fi
  echo "$(cat "$work/logs/$name.time")  (load average $(cut -d' ' -f1 /proc/loadavg))"
}

"$handout" --lab "$lab" --source "$reference" --out "$work/tree" > /dev/null
cd "$work/tree"
step first-make make
python3 - "$lab" labs/manifest.json > "$work/graded-files" <<'PY'
import json, sys
lab = [l for l in json.load(open(sys.argv[2]))["labs"] if l["number"] == int(sys.argv[1])][0]
print("\n".join(lab["graded_files"]))
PY
# Lab 4's plot is the student's own: the reference has none to copy, and the build needs none.
while read -r file; do
  if [[ -f $reference/$file ]]; then cp "$reference/$file" "$file"; fi
done < "$work/graded-files"
step make-after-the-lab make
step first-self-grade env XDG_CACHE_HOME="$work/cache" make grade LAB="$lab"
grep -E '^TOTAL' "$work/logs/first-self-grade.log" || true
