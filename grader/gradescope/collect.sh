# Shell functions shared by the Gradescope bundle's run_autograder and setup.sh, by
# grader/grade-all.sh and by the bundle's test (sourced, not run). Bash.
#
# sync_tree FROM TO     make TO's files equal FROM's (top-level build/, results/, .git left out
#                       of both), copying only files whose bytes differ so that unchanged files
#                       keep their mtimes and ninja recompiles only what changed; files TO has
#                       and FROM lacks are removed.
# submission_root DIR   DIR, or its one folder when DIR holds nothing else (a zip of the repo's
#                       top folder), ignoring dotfiles and macOS's __MACOSX; not when that
#                       folder is a graded path's own (a lab 3 tree holding only stage3-pool/).
# collect_lab SUB TREE STARTER   copy each of $GRADED_FILES from the submission SUB into TREE,
#                       found at its path in the tree layout or, when its file name is unique
#                       among the graded files, flat at the top; a missing file is replaced by
#                       the handout's version from STARTER (its TODO(student) stub) or removed.
#                       Prints one line per file; returns 0.
# collect_stages SUB TREE        for each of $GRADED_DIRS (common, stage dirs), mirror SUB's
#                       folder into TREE; a missing folder gets sources that fail to compile
#                       with a message naming it, so its checks score 0 and say why.
# choose_cxx INSTALL...  print the C++ compiler CMake must be given: nothing when `g++` is 12
#                       or newer (Debian 12), else `g++-12`, after running INSTALL... (the
#                       command that installs it: scripts/install-deps gxx12) when it is not on
#                       PATH. Returns 1 when no g++ 12 or newer can be had.

sync_tree() {
  local from=$1 to=$2 rel
  mkdir -p "$to"
  # Files TO has that FROM lacks (a previous submission's), then FROM's files that differ.
  while IFS= read -r -d '' rel; do
    rel=${rel#./}
    [ -e "$from/$rel" ] || [ -L "$from/$rel" ] || rm -rf -- "${to:?}/$rel"
  done < <(cd "$to" && find . -mindepth 1 \( -path ./build -o -path ./results -o -path ./.git \) -prune -o -print0)
  while IFS= read -r -d '' rel; do
    rel=${rel#./}
    if [ -d "$from/$rel" ]; then
      mkdir -p "$to/$rel"
    elif ! cmp -s "$from/$rel" "$to/$rel"; then
      rm -rf -- "${to:?}/$rel"
      cp -p -- "$from/$rel" "$to/$rel"
      touch -- "$to/$rel"  # a new mtime: ninja must see the change even if FROM's file is older
    fi
  done < <(cd "$from" && find . -mindepth 1 \( -path ./build -o -path ./results -o -path ./.git \) -prune -o \( -type d -o -type f \) -print0)
}

submission_root() {
  local dir=$1 entries=() e
  for e in "$dir"/* "$dir"/.[!.]*; do
    [ -e "$e" ] || continue
    case ${e##*/} in __MACOSX|.*) continue ;; esac
    entries+=("$e")
  done
  local only=${entries[0]:-} top
  # Not a wrapper when that one folder is itself a graded path's first folder (stage3-pool/).
  for top in ${GRADED_FILES:-} ${GRADED_DIRS:-}; do
    [ "${top%%/*}" = "${only##*/}" ] && only=""
  done
  if [ ${#entries[@]} -eq 1 ] && [ -n "$only" ] && [ -d "$only" ]; then
    printf '%s\n' "$only"
  else
    printf '%s\n' "$dir"
  fi
}

# install_file FROM TO: copy only when the bytes differ (keeps the mtime otherwise).
install_file() {
  mkdir -p "$(dirname "$2")"
  if ! cmp -s "$1" "$2"; then
    rm -f -- "$2"
    cp -- "$1" "$2"
    touch -- "$2"
  fi
}

collect_lab() {
  local sub=$1 tree=$2 starter=$3 root p base found n other missing=0
  root=$(submission_root "$sub")
  for p in $GRADED_FILES; do
    base=${p##*/}
    n=0
    for other in $GRADED_FILES; do [ "${other##*/}" = "$base" ] && n=$((n + 1)); done
    found=""
    if [ -f "$root/$p" ] && [ ! -L "$root/$p" ]; then
      found=$root/$p
    elif [ "$n" -eq 1 ] && [ -f "$root/$base" ] && [ ! -L "$root/$base" ]; then
      found=$root/$base
    fi
    if [ -n "$found" ]; then
      install_file "$found" "$tree/$p"
      echo "found    $p <- ${found#"$sub"/}"
      continue
    fi
    missing=$((missing + 1))
    local where="$p"
    [ "$n" -eq 1 ] && [ "$base" != "$p" ] && where="$p (tree layout) or $base (flat)"
    if [ -f "$starter/$p" ]; then
      install_file "$starter/$p" "$tree/$p"
      echo "MISSING  $p: expected $where in the submission; graded with the handout's TODO(student) stub in its place"
    else
      rm -f -- "$tree/$p"
      echo "MISSING  $p: expected $where in the submission; graded without it"
    fi
  done
  [ "$missing" -eq 0 ] || echo "($missing of the lab's files missing: hand in every file the handout lists under \"Hand in\")"
  return 0
}

collect_stages() {
  local sub=$1 tree=$2 root d f
  root=$(submission_root "$sub")
  for d in $GRADED_DIRS; do
    if [ -d "$root/$d" ] && [ ! -L "$root/$d" ]; then
      sync_tree "$root/$d" "$tree/$d"
      echo "found    $d/ <- ${root#"$sub"}/$d/"
    else
      echo "MISSING  $d/: expected the folder $d/ at the top of the submission (the repository's layout); its checks score 0"
      while IFS= read -r -d '' f; do
        printf '#error "%s/ was missing from the submission: hand in the whole folder"\n' "$d" > "$f.missing"
        install_file "$f.missing" "$f"
        rm -f -- "$f.missing"
      done < <(find "$tree/$d" -name '*.cpp' -print0 2>/dev/null)
    fi
  done
  return 0
}

# The project is built and tested with g++ 12 (Debian 12's g++; C++20 without std::format or
# std::expected was chosen for it). Ubuntu 22.04, Gradescope's default base image, has g++ 11 as
# `g++` and g++ 12 as the package g++-12 (universe).
choose_cxx() {
  local major
  major=$(g++ -dumpversion 2> /dev/null) || major=0
  major=${major%%.*}
  case $major in ''|*[!0-9]*) major=0 ;; esac
  if [ "$major" -ge 12 ]; then
    return 0
  fi
  if ! command -v g++-12 > /dev/null 2>&1; then
    echo "choose_cxx: g++ is version $major, below 12: installing g++-12" >&2
    "$@" >&2 || return 1
  fi
  if ! command -v g++-12 > /dev/null 2>&1; then
    echo "choose_cxx: g++ is version $major and g++-12 could not be installed" >&2
    return 1
  fi
  echo "g++-12"
}
