#!/usr/bin/env bash
# Does a collapsing origin cost a fast one anything behind stage 4? Each origin has its own
# concurrency limit (stage4-tuned/origin_gates.h), so it should not. One stage 4 with its
# defaults; a fast origin (20 ms, no capacity) and one that thrashes past 32 in service (20 ms).
# Per round: the fast origin's misses alone, then the same load beside as many clients on the
# thrashing origin at once; prints each one's answered/s and the limits /metrics showed at the
# end, and the fast origin's ratio beside / alone.
# Usage: bench/two-origins.sh [SECONDS]   (from the repository root, after `make`)
# Env: CONNS (clients per origin: 200), ROUNDS (2), STAGE4 (build/release/bin/stage4-tuned),
#      OUT (/tmp/two-origins).
set -euo pipefail
command -v wrk > /dev/null || { echo "two-origins.sh: wrk is not installed (scripts/install-deps bench)" >&2; exit 2; }
DUR="${1:-8}"
BIN=build/release/bin
STAGE4="${STAGE4:-$BIN/stage4-tuned}"
CONNS="${CONNS:-200}"
ROUNDS="${ROUNDS:-2}"
OUT="${OUT:-/tmp/two-origins}"
LUA="$(realpath bench/wrk/proxy.lua)"
mkdir -p "$OUT"
source "$(dirname "$0")/servers.sh"
LOADS=()

answered() {  # JSON file -> answered (2xx/3xx) per second
  awk '{ gsub(/[{}"]/, ""); n = split($0, kv, ",");
         for (i = 1; i <= n; i++) { split(kv[i], p, ":"); v[p[1]] = p[2] } }
       END { printf "%.0f", (v["requests"] - v["status"]) / v["duration_s"] }' "$1"
}
load() {  # NAME ORIGIN_PORT: misses on that origin through the proxy, in the background
  TARGET="http://127.0.0.1:$2/bytes/1024?$1" WORKLOAD=miss JSON="$OUT/$1.json" \
    wrk -t1 -c "$CONNS" -d "${DUR}s" --timeout 5s -s "$LUA" "http://127.0.0.1:$PORT_proxy" \
    > /dev/null 2>&1 &
  LOADS+=($!)
}
settle() { wait "${LOADS[@]}"; LOADS=(); }  # the loads only: the servers run on
limit() {  # ORIGIN_PORT -> proxy_origin_limit for it
  curl -s "http://127.0.0.1:$PORT_proxy/metrics" |
    awk -v o="origin=\"127.0.0.1:$1\"" 'index($0, o) && /^proxy_origin_limit/ { print $2 }'
}

printf "round\tfast_alone_per_s\tfast_beside_per_s\tthrash_beside_per_s\tratio\tfast_limit\tthrash_limit\n"
for round in $(seq 1 "$ROUNDS"); do
  start fast "$BIN/origin" --port 0 --delay-ms 20
  start thrash "$BIN/origin" --port 0 --delay-ms 20 --capacity 32 --overload thrash
  start proxy "$STAGE4" --port 0
  load "alone$round" "$PORT_fast"; settle
  load "beside$round" "$PORT_fast"; load "thrash$round" "$PORT_thrash"; settle
  fast_limit="$(limit "$PORT_fast")"; thrash_limit="$(limit "$PORT_thrash")"
  stop proxy; stop thrash; stop fast
  a="$(answered "$OUT/alone$round.json")"; b="$(answered "$OUT/beside$round.json")"
  t="$(answered "$OUT/thrash$round.json")"
  printf "%d\t%s\t%s\t%s\t%.2f\t%s\t%s\n" "$round" "$a" "$b" "$t" "$(awk -v b="$b" -v a="$a" 'BEGIN { print b / a }')" \
    "$fast_limit" "$thrash_limit"
done
