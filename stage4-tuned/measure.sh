#!/usr/bin/env bash
# Stage 4's runs (docs/stage4-runs.md): the origin alone, stage 3, stage 4 (auto and fixed) and the
# peers (squid, nginx proxy_cache, Varnish) side by side in ONE run, driven by wrk and the shared
# bench/wrk/proxy.lua. Prints one TSV line per measurement: scenario, server, requests/s
# (answered: 2xx/3xx), p50 ms, p99 ms, errors (socket), non-2xx (503s), peak RSS KiB, and the CPU
# time (user + system) per answered request of the server measured, of the origin behind it and
# of wrk, in microseconds; and after each stage 4 run with its defaults (BASE's too) a "# ... at stop: workers=..." line
# from its stats line. The servers run one after another in a fixed order, so a change in the
# machine's load during the run skews the ratios between them: for a ratio that matters, repeat
# the run (or the pair) in alternating order and compare the rounds.
# Usage: stage4-tuned/measure.sh [SECONDS]   (from the repository root, after `make`; SECONDS
#        per measurement, default 10, after a 2 s warm-up)
# Env: LUA (default bench/wrk/proxy.lua), PEERS (default bench/peers), OUT (default /tmp/s4bench),
#      MEASURE_PEERS (default "squid nginx-cache varnish"; "" for none),
#      CONNS (default "100 400"), FIXED (fixed worker counts, default "128 512"),
#      DELAYS (origin latencies in ms, default "20"), CAPACITY (when set, also an origin that
#      serves at most CAPACITY requests at once). An empty CONNS, FIXED or DELAYS means the
#      default. VARIANTS (default "fixed noreuse nobatch nopoller"; "" for none): which stage 4
#      variants run beside its defaults. HITS=1 adds a hit scenario per CONNS (one cached 1 KiB
#      object). BASE=DIR (a bin/ folder of another build, e.g. of the commit before a refactor)
#      runs that build's stage 4 too, as stage4-base, just before stage4-auto in every scenario:
#      the side-by-side "nothing lost" check of a change that should not change speed;
#      BASE_ORDER=after runs it just after instead.
set -euo pipefail
DUR="${1:-10}"
command -v wrk > /dev/null || { echo "measure.sh: wrk is not installed (scripts/install-deps bench)" >&2; exit 2; }
BIN=build/release/bin
LUA="$(realpath "${LUA:-bench/wrk/proxy.lua}")"
PEERS="$(realpath "${PEERS:-bench/peers}")"
OUT="${OUT:-/tmp/s4bench}"
mkdir -p "$OUT"

# start NAME CMD... and stop NAME (PORT_NAME, PID_NAME).
source "$(dirname "$0")/../bench/servers.sh"
# peak_rss PID: the largest peak RSS (VmHWM, KiB) of PID and its descendants: a peer runs under its
# start script (bench/peers/), whose own ~3 MB would otherwise stand for the daemon's.
peak_rss() {
  local kib child best
  best="$(awk '/VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || true)"
  for child in $(pgrep -P "$1" 2>/dev/null); do
    kib="$(peak_rss "$child")"
    if [[ $kib != - && ( -z $best || $kib -gt $best ) ]]; then best="$kib"; fi
  done
  echo "${best:--}"
}
# cpu_ticks PID: clock ticks of CPU (user + system, every thread) used by PID and its descendants
# so far: a peer runs under its start script (bench/peers/), so the peer itself is a child.
cpu_ticks() {
  [[ -n $1 ]] || { echo 0; return; }
  local total child
  total="$(awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || true)"
  total="${total:-0}"
  for child in $(pgrep -P "$1" 2>/dev/null); do total=$((total + $(cpu_ticks "$child"))); done
  echo "$total"
}
TICKS_PER_SECOND="$(getconf CLK_TCK)"
ORIGIN_PID=""

# run SCENARIO SERVER PORT PID CONNECTIONS TARGET [WORKLOAD] [CLOSE]
run() {
  local scenario="$1" server="$2" port="$3" pid="$4" conns="$5" target="$6"
  local workload="${7:-hit}" close="${8:-0}" json="$OUT/$1-$2.json"
  # Warm-up: fills the cache (hit) and the pool before the measured run. For misses it asks
  # for other URLs: proxy.lua's counters restart in every wrk run, so the measured run would
  # otherwise hit what the warm-up stored.
  local warm="$target" threads=$((conns < 2 ? conns : 2))  # wrk: connections >= threads
  if [[ $workload == miss ]]; then warm="$target?warmup=1"; fi
  TARGET="$warm" WORKLOAD="$workload" CLOSE="$close" wrk -t "$threads" -c "$conns" -d 2s \
    -s "$LUA" "http://127.0.0.1:$port" > /dev/null 2>&1 || true
  # The warm-up's last requests are still queued when wrk closes their connections; a server
  # that still serves them (each a 20 ms miss) must not be measured while doing so.
  sleep 1
  rm -f "$json"  # an earlier run's, in the same OUT, must not pass for this one's
  local server_cpu origin_cpu
  server_cpu="$(cpu_ticks "$pid")"; origin_cpu="$(cpu_ticks "$ORIGIN_PID")"
  # bash's `time` gives wrk's own CPU (user and system seconds), the third share of the machine.
  local wrk_cpu
  wrk_cpu="$( { TIMEFORMAT='%U %S'; time TARGET="$target" WORKLOAD="$workload" CLOSE="$close" \
    JSON="$json" wrk -t "$threads" -c "$conns" -d "${DUR}s" --latency -s "$LUA" \
    "http://127.0.0.1:$port" > "$OUT/$1-$2.txt" 2>&1; } 2>&1 || true)"
  server_cpu=$(($(cpu_ticks "$pid") - server_cpu)); origin_cpu=$(($(cpu_ticks "$ORIGIN_PID") - origin_cpu))
  # A process that died during the run took its CPU count with it: "-", not a negative number.
  kill -0 "$pid" 2>/dev/null || server_cpu=-
  kill -0 "$ORIGIN_PID" 2>/dev/null || origin_cpu=-
  python3 - "$json" "$scenario" "$server" "$(peak_rss "$pid")" "$server_cpu" "$origin_cpu" \
    "$TICKS_PER_SECOND" "$([[ $pid == "$ORIGIN_PID" ]] && echo 1 || echo 0)" "$wrk_cpu" <<'PY'
import json, os, sys
if not os.path.exists(sys.argv[1]):  # wrk could not run (its .txt says why): a row that says so
    print("\t".join([sys.argv[2], sys.argv[3], "failed", "-", "-", "-", "-", sys.argv[4], "-", "-", "-"]))
    sys.exit(0)
j = json.load(open(sys.argv[1]))
e = j["errors"]
answered = j["requests"] - e["status"]
ticks = float(sys.argv[7])
def per_request(t):
    return "%.0f" % (int(t) / ticks * 1e6 / answered) if answered > 0 and t != "-" else "-"
def wrk_per_request(times):  # "USER SYS" in seconds, from bash's time
    try:
        seconds = sum(float(x) for x in times.split()[-2:])
    except ValueError:
        return "-"
    return "%.0f" % (seconds * 1e6 / answered) if answered > 0 else "-"
alone = sys.argv[8] == "1"  # the origin measured alone: it is the server
print("\t".join([sys.argv[2], sys.argv[3], "%.0f" % (answered / j["duration_s"]),
                 "%.2f" % j["latency_ms"]["p50"], "%.2f" % j["latency_ms"]["p99"],
                 str(e["connect"] + e["read"] + e["write"] + e["timeout"]), str(e["status"]),
                 sys.argv[4], "-" if alone else per_request(sys.argv[5]),
                 per_request(sys.argv[6]), wrk_per_request(sys.argv[9])]), flush=True)
PY
}

start origin "$BIN/origin" --port 0
O="http://127.0.0.1:$PORT_origin"
echo -e "scenario\tserver\treq/s\tp50_ms\tp99_ms\terrors\tnon2xx\tpeak_rss_kib\tserver_cpu_us\torigin_cpu_us\twrk_cpu_us"

# Misses at an origin with DELAY ms latency (unique URLs, keep-alive clients), at each count of
# CONNS connections: the origin alone, with a new connection per request (as stages 1-3 reach it)
# and with keep-alive (as stage 4 and squid do: the ceiling on this machine), stage 3 at fixed
# sizes (its best is near the connection count), stage 4 with its defaults (--workers auto), with
# --no-origin-reuse, with --no-batch-workers, with --no-poller-misses, and at the same fixed
# sizes, and the peers. PORT and
# PID are the origin's: the one above, or (CAPACITY) one that serves a few requests at a time.
miss_scenario() {
  local sc="$1" c="$2" target="$3" port="$4" pid="$5"
  ORIGIN_PID="$pid"
  run "$sc" origin-direct-close "$port" "$pid" "$c" "$target" miss 1
  run "$sc" origin-direct "$port" "$pid" "$c" "$target" miss
  variant fixed && for w in ${FIXED:-128 512}; do
    start s3 "$BIN/stage3-pool" --port 0 --workers "$w" --queue 1024
    run "$sc" "stage3-w$w" "$PORT_s3" "$PID_s3" "$c" "$target" miss
    stop s3
    start s4 "$BIN/stage4-tuned" --port 0 --workers "$w"
    run "$sc" "stage4-w$w" "$PORT_s4" "$PID_s4" "$c" "$target" miss
    stop s4
  done
  local flag
  for flag in noreuse:--no-origin-reuse nobatch:--no-batch-workers nopoller:--no-poller-misses; do
    variant "${flag%%:*}" || continue
    start s4 "$BIN/stage4-tuned" --port 0 "${flag#*:}"
    run "$sc" "stage4-auto-${flag%%:*}" "$PORT_s4" "$PID_s4" "$c" "$target" miss
    stop s4
  done
  stage4_pair "$sc" "$c" "$target" miss
  peers "$sc" "$c" "$target" "$port" miss
}
# peers SCENARIO CONNS TARGET ORIGIN_PORT WORKLOAD: the peers (bench/peers/): squid, a forward
# proxy like the stages, and nginx proxy_cache and Varnish, reverse proxies told the origin (the
# same absolute-form requests reach them). Each one's package may be missing: the peer is left
# out (scripts/install-deps peers).
peers() {
  local peer name
  for peer in ${MEASURE_PEERS-squid nginx-cache varnish}; do
    [[ -x "$PEERS/$peer" ]] && command -v "$(peer_binary "$peer")" > /dev/null || continue
    name="${peer//-/_}"
    start "$name" "$PEERS/$peer" --dir "$OUT/$peer" --origin "127.0.0.1:$4"
    run "$1" "$peer" "$(eval echo "\$PORT_$name")" "$(eval echo "\$PID_$name")" "$2" "$3" "$5"
    stop "$name"
  done
}
# variant NAME: whether VARIANTS asks for stage 4 variant NAME.
variant() { [[ " ${VARIANTS-fixed noreuse nobatch nopoller} " == *" $1 "* ]]; }
# stage4_pair SCENARIO CONNS TARGET WORKLOAD: BASE's stage 4 (when set) and this build's, in the
# order BASE_ORDER says (before, the default, or after: run the pair both ways to see the drift
# of a shared machine), each followed by its stats line at stop.
stage4_pair() {
  local first=base second=auto
  [[ ${BASE_ORDER:-before} == after ]] && { first=auto; second=base; }
  local which bin
  for which in $first $second; do
    [[ $which == base && -z "${BASE:-}" ]] && continue
    bin="$BIN"; [[ $which == base ]] && bin="$BASE"
    start s4 "$bin/stage4-tuned" --port 0
    run "$1" "stage4-$which" "$PORT_s4" "$PID_s4" "$2" "$3" "$4"
    stop s4
    grep -o 'workers=[0-9]* ([^)]*) queue=[0-9]* shed=[0-9]*' "$OUT/s4.out" |
      sed "s/^/# $1 stage4-$which at stop: /" || true
  done
}
# peer_binary PEER: the daemon a peer script runs (its PEER_BINARY line).
peer_binary() { sed -n 's/^PEER_BINARY=//p' "$PEERS/$1"; }

# Hits: one cached object, every client asking for it (stage 4 answers them on the poller).
if [[ ${HITS:-0} == 1 ]]; then
  for c in ${CONNS:-100 400}; do
    ORIGIN_PID="$PID_origin"
    stage4_pair "hit-c$c" "$c" "$O/bytes/1024" hit
    peers "hit-c$c" "$c" "$O/bytes/1024" "$PORT_origin" hit
  done
fi
for d in ${DELAYS:-20}; do
  for c in ${CONNS:-100 400}; do
    miss_scenario "miss-${d}ms-c$c" "$c" "$O/delay/$d/bytes/1024" "$PORT_origin" "$PID_origin"
  done
done
# A downstream bottleneck: an origin that serves at most CAPACITY requests at once, 20 ms each
# (Little's bound CAPACITY / 0.02 s): more workers than that only queue at the origin.
if [[ -n "${CAPACITY:-}" ]]; then
  start capped "$BIN/origin" --port 0 --capacity "$CAPACITY"
  for c in ${CONNS:-100 400}; do
    miss_scenario "miss-20ms-cap$CAPACITY-c$c" "$c" "http://127.0.0.1:$PORT_capped/delay/20/bytes/1024" \
      "$PORT_capped" "$PID_capped"
  done
  stop capped
fi
stop origin
