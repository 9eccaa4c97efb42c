#!/usr/bin/env bash
# make timeline: an origin that changes character mid-run — fast, then collapsing, then fast —
# and what stage 4 does about it, second by second, beside fixed pools in the same run. For each
# server: a fresh origin (unlimited, DELAY ms), wrk in one-second runs back to back (answered/s
# and p99 per second), the origin switched through /__load at each phase, and stage 4's
# /metrics sampled every second (its limit toward the origin, requests in flight and waiting,
# the queueing delay, workers). Writes OUT/timeline.tsv, OUT/timeline.gp and OUT/timeline.png.
# Usage: bench/timeline.sh   (from the repository root, after `make`)
# Env: PHASES ("fast:10 thrash:10 fast:10": LAW:SECONDS, LAW one of fast, queue, thrash, fail),
#      CAPACITY (32), DELAY (20 ms), CONNS (200), OUT (results/timeline),
#      SERVERS (default: stage 4's defaults, stage 3 with 32 and with 256 workers; each
#      "NAME=BINARY ARGS...", separated by ';').
set -euo pipefail
command -v wrk > /dev/null || { echo "timeline.sh: wrk is not installed (scripts/install-deps bench)" >&2; exit 2; }
BIN=build/release/bin
LUA="$(realpath bench/wrk/proxy.lua)"
PHASES="${PHASES:-fast:10 thrash:10 fast:10}"
CAPACITY="${CAPACITY:-32}"
DELAY="${DELAY:-20}"
CONNS="${CONNS:-200}"
OUT="${OUT:-results/timeline}"
SERVERS="${SERVERS:-stage4 defaults=$BIN/stage4-tuned;stage3 --workers 32=$BIN/stage3-pool --workers 32;stage3 --workers 256=$BIN/stage3-pool --workers 256}"
mkdir -p "$OUT"

# start NAME CMD... and stop NAME (PORT_NAME, PID_NAME).
source "$(dirname "$0")/servers.sh"

# The stage 4 gauges for the origin, "-" where the server has none (stages 1-3).
gauges() {
  curl -s -m 1 "http://127.0.0.1:$PORT_proxy/metrics" 2>/dev/null | awk '
    /^proxy_origin_limit\{/ { limit = $2 } /^proxy_origin_in_flight\{/ { flight = $2 }
    /^proxy_origin_waiting\{/ { waiting = $2 } /^proxy_origin_queue_delay_seconds\{/ { qd = $2 * 1000 }
    /^proxy_workers_total / { workers = $2 }
    END { printf "%s\t%s\t%s\t%s\t%s", limit == "" ? "-" : limit, flight == "" ? "-" : flight,
                 waiting == "" ? "-" : waiting, qd == "" ? "-" : qd, workers == "" ? "-" : workers }'
}

printf "server\tt_s\tphase\tanswered_per_s\tp99_ms\t503s\tlimit\tin_flight\twaiting\tqueue_delay_ms\tworkers\n" > "$OUT/timeline.tsv"
IFS=';' read -r -a servers <<< "$SERVERS"
for entry in "${servers[@]}"; do
  name="${entry%%=*}"
  read -r -a cmd <<< "${entry#*=}"
  start origin "$BIN/origin" --port 0 --delay-ms "$DELAY" --capacity "$CAPACITY"
  start proxy "${cmd[@]}" --port 0
  target="http://127.0.0.1:$PORT_origin/bytes/1024"
  TARGET="$target?warmup=1" WORKLOAD=miss wrk -t2 -c "$CONNS" -d 2s -s "$LUA" "http://127.0.0.1:$PORT_proxy" > /dev/null 2>&1 || true
  t=0
  for phase in $PHASES; do
    law="${phase%%:*}"
    seconds="${phase#*:}"
    if [[ $law == fast ]]; then
      curl -s "http://127.0.0.1:$PORT_origin/__load?law=queue&capacity=0" > /dev/null
    else
      curl -s "http://127.0.0.1:$PORT_origin/__load?law=$law&capacity=$CAPACITY" > /dev/null
    fi
    for _ in $(seq 1 "$seconds"); do
      TARGET="$target?t=$t" WORKLOAD=miss JSON="$OUT/second.json" wrk -t2 -c "$CONNS" -d 1s \
        --timeout 5s -s "$LUA" "http://127.0.0.1:$PORT_proxy" > /dev/null 2>&1 &
      local_wrk=$!
      sleep 0.6  # the gauges mid-second, under load: after wrk, nothing is in flight
      sampled="$(gauges)"
      wait "$local_wrk" || true
      t=$((t + 1))
      line="$(awk '{ gsub(/[{}"]/, ""); n = split($0, kv, ",");
                     for (i = 1; i <= n; i++) { split(kv[i], p, ":"); v[p[1]] = p[2] } }
                   END { printf "%.0f\t%.1f\t%d", (v["requests"] - v["status"]) / v["duration_s"], v["p99"], v["status"] }' "$OUT/second.json")"
      printf "%s\t%d\t%s\t%s\t%s\n" "$name" "$t" "$law" "$line" "$sampled" | tee -a "$OUT/timeline.tsv"
    done
  done
  stop proxy
  stop origin
done

# One panel per question: how much was answered, how long the tail waited, what the limit did.
{
  echo "set terminal pngcairo size 1200,1000 font 'sans,10'"
  echo "set output '$OUT/timeline.png'"
  echo "set datafile separator tab"
  echo "set datafile missing '-'"
  echo "set multiplot layout 3,1 title 'origin: $PHASES (capacity $CAPACITY, ${DELAY} ms), $CONNS clients' noenhanced"
  echo "set key outside right top noenhanced"
  echo "set grid"
  echo "set xlabel 'seconds'"
  echo "set ylabel 'answered/s (2xx)'"
  printf "plot "
  i=0
  for entry in "${servers[@]}"; do
    name="${entry%%=*}"
    [[ $i -gt 0 ]] && printf ", "
    printf "'%s' using 2:(strcol(1) eq '%s' ? \$4 : 1/0) with linespoints title '%s'" "$OUT/timeline.tsv" "$name" "$name"
    i=$((i + 1))
  done
  echo
  echo "set ylabel 'p99, ms (log)'"
  echo "set logscale y"
  printf "plot "
  i=0
  for entry in "${servers[@]}"; do
    name="${entry%%=*}"
    [[ $i -gt 0 ]] && printf ", "
    printf "'%s' using 2:(strcol(1) eq '%s' ? \$5 : 1/0) with linespoints title '%s'" "$OUT/timeline.tsv" "$name" "$name"
    i=$((i + 1))
  done
  echo
  echo "unset logscale y"
  first="${servers[0]%%=*}"
  echo "set ylabel 'requests'"
  echo "set y2label 'queueing delay, ms'"
  echo "set y2tics"
  echo "plot '$OUT/timeline.tsv' using 2:(strcol(1) eq '$first' ? \$7 : 1/0) with steps lw 2 title '$first: origin limit', \\"
  echo "     '$OUT/timeline.tsv' using 2:(strcol(1) eq '$first' ? \$8 : 1/0) with steps title 'in flight', \\"
  echo "     '$OUT/timeline.tsv' using 2:(strcol(1) eq '$first' ? \$11 : 1/0) with steps title 'workers', \\"
  echo "     '$OUT/timeline.tsv' using 2:(strcol(1) eq '$first' ? \$10 : 1/0) axes x1y2 with lines dt 2 title 'queueing delay (y2)'"
  echo "unset multiplot"
} > "$OUT/timeline.gp"
if command -v gnuplot > /dev/null; then gnuplot "$OUT/timeline.gp" && echo "timeline.sh: wrote $OUT/timeline.tsv and $OUT/timeline.png"; fi
