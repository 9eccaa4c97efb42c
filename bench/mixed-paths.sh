#!/usr/bin/env bash
# One origin, two paths alike: a fast miss (/no-store/5000) and a 20 ms one (/delay/20/no-store/10),
# every request a miss (no-store), through stage 4 with --origin-limit LIMIT (default auto). The
# origin has room for every request (no --capacity), so the limit should stay out of the way; a
# limit that takes the fast path's latency for the origin's reads the mix as queueing and falls
# (docs/stage4-runs.md, "An eleventh run"). Prints, per connection count, wrk's latency and
# req/s and the origin's limit, in flight, waiting, min RTT and RTT from /metrics.
# Usage: bench/mixed-paths.sh [auto|off|N] [CONNS...]   (from the repository root, after `make`)
# Env: BIN (default build/release/bin), SECONDS_PER_POINT (default 6).
set -euo pipefail
BIN="${BIN:-build/release/bin}"
LIMIT="${1:-auto}"; shift || true
CONNS="${*:-200 800 200}"
DUR="${SECONDS_PER_POINT:-6}"
command -v wrk > /dev/null || { echo "mixed-paths.sh: wrk is not installed (scripts/install-deps bench)" >&2; exit 2; }
OUT="$(mktemp -d)"
"$BIN/origin" --port 0 > "$OUT/origin.out" 2>&1 & ORIGIN=$!
"$BIN/stage4-tuned" --port 0 --origin-limit "$LIMIT" > "$OUT/proxy.out" 2> "$OUT/proxy.err" & PROXY=$!
trap 'kill "$PROXY" "$ORIGIN" 2> /dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 50); do
  grep -q listening "$OUT/origin.out" && grep -q listening "$OUT/proxy.out" && break
  sleep 0.1
done
OPORT="$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$OUT/origin.out" | head -1)"
PORT="$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$OUT/proxy.out" | head -1)"
cat > "$OUT/mix.lua" <<LUA
local paths = {"/no-store/5000", "/delay/20/no-store/10"}
local i = 0
request = function()
  i = i + 1
  return "GET http://127.0.0.1:$OPORT" .. paths[(i % #paths) + 1] .. " HTTP/1.1\r\nHost: 127.0.0.1:$OPORT\r\n\r\n"
end
LUA
for c in $CONNS; do
  result="$(wrk -t2 -c"$c" -d"${DUR}s" --timeout 10s -s "$OUT/mix.lua" "http://127.0.0.1:$PORT/" 2>&1 |
    grep -E "Requests/sec|Latency|Non-2xx|timeout" | tr -s ' ' | tr '\n' ' ')"
  limit="$(curl -s "http://127.0.0.1:$PORT/metrics" |
    grep -E '^proxy_origin_(limit|in_flight|waiting|min_rtt_seconds|rtt_seconds)\{' |
    sed 's/{[^}]*}//' | tr '\n' ' ')"
  echo "origin-limit=$LIMIT c=$c: $result| $limit"
done
