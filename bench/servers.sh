# Sourced by the side-by-side runs (stage4-tuned/measure.sh, measure-limit.sh, bench/timeline.sh):
# start and stop servers that print "listening on HOST:PORT", their output in $OUT.

# start NAME CMD...: runs CMD in the background until its "listening on" line (30 s at most);
# sets PORT_NAME and PID_NAME. The file is emptied here, not by the child's redirection: until
# the child runs, it would still hold the last instance's line, and its port.
start() {
  local name="$1"; shift
  : > "$OUT/$name.out"
  "$@" > "$OUT/$name.out" 2> "$OUT/$name.err" &
  local pid=$!
  for _ in $(seq 1 300); do
    grep -q "listening on" "$OUT/$name.out" 2>/dev/null && break
    sleep 0.1
  done
  local port; port="$(grep -m1 "listening on" "$OUT/$name.out" | sed 's/.*://')"
  eval "PORT_${name}=$port PID_${name}=$pid"
}

# stop NAME: SIGTERM, and wait for it to exit.
stop() { local pid="PID_$1"; kill -TERM "${!pid}" 2>/dev/null || true; wait "${!pid}" 2>/dev/null || true; }
