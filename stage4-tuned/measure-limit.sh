#!/usr/bin/env bash
# Does stage 4 find the peak of a downstream that collapses when oversubscribed? Its defaults
# side by side with the best fixed pools, in ONE run, against the origin's overload laws
# (harness/downstream.h): for each law, capacity and client count, stage 4
# (defaults), stage 3 --workers N and stage 4 --workers N --no-poller-misses --origin-limit off
# for each N in FIXED, one after another, each with a fresh origin and a 2 s warm-up after which
# the origin is left to finish what the warm-up's clients abandoned. Prints one TSV line per
# measurement — law, capacity, clients, server, answered/s (2xx/3xx), p99 ms, 503s, timeouts,
# the most requests the origin had in service at once — and after each group a summary line:
# the best fixed pool by answered/s, the fixed pool with the best p99 (the sweet spot), and
# stage 4's ratios to them. ROUNDS > 1 repeats everything, so a ratio can be read against the
# machine's noise.
# Usage: stage4-tuned/measure-limit.sh [SECONDS]   (from the repository root, after `make`)
# Env: LAWS (default "thrash"), CAPACITIES ("16 32"), CONNS ("200 1000"), FIXED ("16 32 64"),
#      DELAY (origin delay, ms: 20), ROUNDS (1), OUT (/tmp/s4limit), STAGE4 (the binary:
#      build/release/bin/stage4-tuned), BASE (another stage 4 binary measured with its defaults
#      beside it, e.g. an older build; unset: none).
set -euo pipefail
DUR="${1:-8}"
command -v wrk > /dev/null || { echo "measure-limit.sh: wrk is not installed (scripts/install-deps bench)" >&2; exit 2; }
BIN=build/release/bin
STAGE4="${STAGE4:-$BIN/stage4-tuned}"
LUA="$(realpath bench/wrk/proxy.lua)"
OUT="${OUT:-/tmp/s4limit}"
LAWS="${LAWS:-thrash}"
CAPACITIES="${CAPACITIES:-16 32}"  # 0: an origin without a capacity
CONNS="${CONNS:-200 1000}"
FIXED="${FIXED-16 32 64}"  # set but empty: no fixed pools (only the defaults and BASE)
DELAY="${DELAY:-20}"
ROUNDS="${ROUNDS:-1}"
mkdir -p "$OUT"

# start NAME CMD... and stop NAME (PORT_NAME, PID_NAME).
source "$(dirname "$0")/../bench/servers.sh"

# drained: waits (at most 30 s) until the origin has nothing in service. A proxy whose clients
# left drops their requests, but the origin serves them to the end, as a real one would; a
# thrashing origin full of them would slow the next measurement down.
drained() {
  for _ in $(seq 1 300); do
    curl -s "http://127.0.0.1:$PORT_origin/__load" | grep -q '"in_service":0,' && return 0
    sleep 0.1
  done
  echo "# measure-limit.sh: the origin still had requests in service after 30 s" >&2
}

# measure SERVER_NAME CMD...: one server against a fresh origin; prints its TSV line.
measure() {
  local name="$1"; shift
  start origin "$BIN/origin" --port 0 --delay-ms "$DELAY" --capacity "$cap" --overload "$law"
  start proxy "$@" --port 0
  local target="http://127.0.0.1:$PORT_origin/bytes/1024"
  # A warm-up on other URLs (proxy.lua's counters restart in every run), at 50 connections at
  # most: the pool and the origin connections are ready, and the requests its clients abandon
  # when it stops — which a proxy without a limit sends on regardless — stay few.
  TARGET="$target?warmup=1" WORKLOAD=miss wrk -t2 -c "$((conns < 50 ? conns : 50))" -d 2s \
    -s "$LUA" "http://127.0.0.1:$PORT_proxy" > /dev/null 2>&1 || true
  drained
  curl -s "http://127.0.0.1:$PORT_origin/__load?reset_peak=1" > /dev/null
  TARGET="$target" WORKLOAD=miss JSON="$OUT/run.json" wrk -t2 -c "$conns" -d "${DUR}s" \
    --timeout 5s -s "$LUA" "http://127.0.0.1:$PORT_proxy" > /dev/null 2>&1 || true
  local peak; peak="$(curl -s "http://127.0.0.1:$PORT_origin/__load" | sed 's/.*"peak_in_service":\([0-9]*\).*/\1/')"
  stop proxy
  stop origin
  awk -v law="$law" -v cap="$cap" -v c="$conns" -v server="$name" -v peak="$peak" '
    { gsub(/[{}"]/, ""); n = split($0, kv, ",");
      for (i = 1; i <= n; i++) { split(kv[i], p, ":"); v[p[1]] = p[2]; if (p[1] == "latency_ms") v["mean"] = p[3] } }
    END { ok = (v["requests"] - v["status"]) / v["duration_s"];
          printf "%s\t%d\t%d\t%s\t%.0f\t%.1f\t%d\t%d\t%s\n", law, cap, c, server, ok, v["p99"],
                 v["status"], v["timeout"], peak }' "$OUT/run.json"
}

# summary: the best fixed pool (answered/s), the sweet spot (best p99 among fixed pools that
# answered with no timeouts and at most 1 % 503s: a 503 answers fast, and would pass for a good
# p99), and stage 4's ratios to them, from the group's lines in $OUT/group.tsv.
summary() {
  awk -F'\t' -v dur="$DUR" '
    $4 == "stage4-defaults" { s4 = $5; s4p99 = $6; s4shed = $7 }
    $4 ~ /--workers/ { if ($5 > best) { best = $5; bestname = $4; bestshed = $7 }
                       if ($5 > 0 && $8 == 0 && $7 <= 0.01 * $5 * dur &&
                           (sweet == "" || $6 < sweetp99)) { sweet = $4; sweetp99 = $6 } }
    END { printf "# %s %s cap %s, %s clients: best fixed %s %.0f/s (503s %d); sweet spot %s p99 %.1f ms; stage 4 defaults %.0f/s = %.2fx best, p99 %.1f ms = %.2fx sweet spot, 503s %d\n",
                 $1, "", $2, $3, bestname, best, bestshed, sweet, sweetp99, s4, s4 / best, s4p99, s4p99 / sweetp99, s4shed }' "$OUT/group.tsv"
}

printf "law\tcapacity\tclients\tserver\tanswered_per_s\tp99_ms\t503s\ttimeouts\torigin_peak_in_service\n"
for round in $(seq 1 "$ROUNDS"); do
  for law in $LAWS; do
    for cap in $CAPACITIES; do
      for conns in $CONNS; do
        : > "$OUT/group.tsv"
        {
          measure stage4-defaults "$STAGE4"
          [[ -n ${BASE:-} ]] && measure base-defaults "$BASE"
          for n in $FIXED; do
            measure "stage3 --workers $n" "$BIN/stage3-pool" --workers "$n"
            measure "stage4 --workers $n --no-poller-misses --origin-limit off" "$STAGE4" \
              --workers "$n" --no-poller-misses --origin-limit off
          done
        } | tee -a "$OUT/group.tsv"
        summary
      done
    done
  done
done
