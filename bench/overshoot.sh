#!/usr/bin/env bash
# Does a stage 4 overshoot a downstream that collapses when oversubscribed? Lab 4's question 6,
# as a check anyone can run: the origin thrashes past CAPACITY requests in service
# (harness/downstream.h: throughput peaks at the capacity and halves at twice it), and the same
# stage 4 binary meets it twice, one after the other, each time with a fresh origin:
#   1. sized by Little's law alone: --origin-limit off --no-poller-misses, so every miss goes to
#      a worker and the pool is sized by L = λ·W (--workers auto);
#   2. with its defaults: --origin-limit auto, the latency gradient (concurrency_limit.h).
# For each it prints answered/s, p99, the requests the origin had in service (on average, and
# the most at once) and what /metrics said at the end (workers, the origin's limit); then a
# verdict per run: it overshoots when the origin had over 1.5× its capacity in service on
# average.
# Usage: bench/overshoot.sh   (from the repository root, after `make`; `make overshoot` does both)
# Env: STAGE4 (the binary: build/release/bin/stage4-tuned), CAPACITY (32), CONNS (200),
#      DURATION (s per run: 10), DELAY (origin delay, ms: 20), OUT (/tmp/overshoot).
set -euo pipefail
command -v wrk > /dev/null || { echo "overshoot.sh: wrk is not installed (scripts/install-deps bench)" >&2; exit 2; }
BIN=build/release/bin
STAGE4="${STAGE4:-$BIN/stage4-tuned}"
CAPACITY="${CAPACITY:-32}"
CONNS="${CONNS:-200}"
DURATION="${DURATION:-10}"
DELAY="${DELAY:-20}"
OUT="${OUT:-/tmp/overshoot}"
LUA="$(realpath bench/wrk/proxy.lua)"
mkdir -p "$OUT"
source "$(dirname "$0")/servers.sh"

metric() { curl -s "http://127.0.0.1:$PORT_proxy/metrics" | awk -v m="$1" '$1 ~ "^"m"({|$)" { print $2; exit }'; }

# run NAME FLAGS...: prints "answered/s p99_ms peak workers limit" for one run.
run() {
  local name="$1"; shift
  start origin "$BIN/origin" --port 0 --delay-ms "$DELAY" --capacity "$CAPACITY" --overload thrash
  start proxy "$STAGE4" --port 0 "$@"
  # The origin's requests in service, twice a second from the second second on: the average
  # says what the proxy keeps there (the peak alone includes the start's slow start).
  ( sleep 1
    for _ in $(seq 2 $(( DURATION * 2 - 1 ))); do
      curl -s "http://127.0.0.1:$PORT_origin/__load" | sed 's/.*"in_service":\([0-9]*\).*/\1/'
      sleep 0.5
    done ) > "$OUT/$name.in_service" &
  local sampler=$!
  TARGET="http://127.0.0.1:$PORT_origin/bytes/1024" WORKLOAD=miss JSON="$OUT/$name.json" \
    wrk -t2 -c "$CONNS" -d "${DURATION}s" --timeout 5s -s "$LUA" "http://127.0.0.1:$PORT_proxy" \
    > "$OUT/$name.wrk" 2>&1 || true
  wait "$sampler"
  local workers limit peak mean
  mean="$(awk '{ s += $1; n++ } END { printf "%.0f", n ? s / n : 0 }' "$OUT/$name.in_service")"
  workers="$(metric proxy_workers_total)"
  limit="$(metric proxy_origin_limit)"
  peak="$(curl -s "http://127.0.0.1:$PORT_origin/__load" | sed 's/.*"peak_in_service":\([0-9]*\).*/\1/')"
  stop proxy
  stop origin
  awk -v peak="$peak" -v mean="$mean" -v workers="${workers:-?}" -v limit="${limit:-off}" '
    { gsub(/[{}"]/, ""); n = split($0, kv, ",");
      for (i = 1; i <= n; i++) { split(kv[i], p, ":"); v[p[1]] = p[2] } }
    END { printf "%.0f %.1f %s %s %s %s\n", (v["requests"] - v["status"]) / v["duration_s"], v["p99"],
                 mean, peak, workers, limit }' "$OUT/$name.json"
}

peak_rate=$(( CAPACITY * 1000 / DELAY ))
echo "origin: thrashes past $CAPACITY in service, ${DELAY} ms each; at most $peak_rate answers/s (capacity / delay), at $CAPACITY in service"
echo "load: $CONNS keep-alive clients, a unique URL per request (misses), ${DURATION} s per run"
fmt="%-40s %11s %7s %17s %9s %8s %13s\n"
printf "$fmt" run answered/s p99_ms origin_in_service its_peak workers origin_limit
read -r l_ok l_p99 l_mean l_peak l_workers _ < <(run littles --origin-limit off --no-poller-misses)
printf "$fmt" "Little's law alone (--origin-limit off)" "$l_ok" "$l_p99" "$l_mean" "$l_peak" "$l_workers" off
read -r a_ok a_p99 a_mean a_peak a_workers a_limit < <(run auto)
printf "$fmt" "stage 4 defaults (--origin-limit auto)" "$a_ok" "$a_p99" "$a_mean" "$a_peak" "$a_workers" "$a_limit"
echo "(origin_in_service: the average the origin had in service, sampled twice a second; its_peak: the most at once)"
verdict() {  # NAME MEAN OK
  if (( $2 > CAPACITY * 3 / 2 )); then
    echo "$1: OVERSHOOTS: the origin had $2 in service on average, $(( $2 * 100 / CAPACITY ))% of the $CAPACITY it serves best, and answered $3/s of its at most $peak_rate/s"
  else
    echo "$1: holds near the peak: $2 in service on average (the origin serves $CAPACITY best), $3/s of its at most $peak_rate/s"
  fi
}
verdict "Little's law alone" "$l_mean" "$l_ok"
verdict "stage 4 defaults" "$a_mean" "$a_ok"
