# Shared by the peer scripts in this folder (sourced, not run). Each peer script writes a
# throw-away config under its --dir (default results/peers/NAME), never touching /etc, starts
# the daemon in the foreground on 127.0.0.1, prints `listening on 127.0.0.1:PORT` once the port
# accepts connections (the same first line as the stages, so harness::Process can run it),
# and stops the daemon on SIGTERM/SIGINT. Reverse proxies (nginx-cache, varnish) are told the
# origin they cache with --origin HOST:PORT: they forward every request there, whatever its
# absolute-form target names.

peer_usage() {
  cat >&2 <<USAGE
usage: $0 [--port P] [--dir DIR] [--origin HOST:PORT]
  --port P            port on 127.0.0.1; 0 or absent: a free one
  --dir DIR           where the generated config, logs and state go (default: results/peers/$PEER)
  --origin HOST:PORT  the origin a reverse proxy forwards to (nginx-cache and varnish need it)
Prints 'listening on 127.0.0.1:PORT' when ready; SIGTERM or SIGINT stops it.
USAGE
  exit 2
}

PORT=0
DIR=""
ORIGIN=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --port) PORT="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --origin) ORIGIN="$2"; shift 2 ;;
    -h|--help) peer_usage ;;
    *) echo "$0: unknown argument $1" >&2; peer_usage ;;
  esac
done
if [[ "${PEER_NEEDS_ORIGIN:-0}" == 1 && ! "$ORIGIN" =~ ^[0-9.]+:[0-9]+$ ]]; then
  echo "$0: --origin HOST:PORT (an IPv4 address and a port) is required" >&2
  peer_usage
fi
DIR="${DIR:-results/peers/$PEER}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"

command -v "$PEER_BINARY" >/dev/null 2>&1 || {
  echo "$0: $PEER_BINARY not found (Debian: scripts/install-deps peers)" >&2
  exit 1
}

# A free port: one from the ephemeral range that nothing listens on. Another program may take
# it before the daemon binds; the daemon then fails to start and says so in its log.
pick_port() {
  local low high port
  read -r low high < /proc/sys/net/ipv4/ip_local_port_range
  local used
  used="$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)"
  for _ in $(seq 1 100); do
    port=$((low + (RANDOM * 32768 + RANDOM) % (high - low + 1)))
    if ! grep -qx "$port" <<<"$used"; then
      echo "$port"
      return 0
    fi
  done
  echo "$0: no free port found" >&2
  return 1
}

if [[ "$PORT" == 0 ]]; then PORT="$(pick_port)"; fi

# The daemon's process id, set by the peer script; stopped on SIGTERM/SIGINT.
DAEMON_PID=""
# A peer script may define peer_cleanup (e.g. to remove a cache kept in /dev/shm); it runs on
# every exit, after the daemon stopped.
stop_daemon() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
  fi
  exit 0
}
run_peer_cleanup() {
  if declare -F peer_cleanup >/dev/null; then peer_cleanup || true; fi
}
trap stop_daemon TERM INT
trap run_peer_cleanup EXIT

# Waits (up to 30 s) until 127.0.0.1:PORT accepts a connection while the daemon lives, then
# prints the listening line and waits for the daemon. Exits 1 with the log's tail otherwise.
announce_and_wait() {
  local log="$1"
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
      echo "$0: $PEER exited before listening; $log:" >&2
      tail -n 20 "$log" >&2 || true
      exit 1
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
      echo "listening on 127.0.0.1:$PORT"
      # `wait` returns early when a trapped signal arrives; the trap then stops the daemon.
      wait "$DAEMON_PID"
      exit $?
    fi
    sleep 0.1
  done
  echo "$0: $PEER did not listen on 127.0.0.1:$PORT within 30 s; $log:" >&2
  tail -n 20 "$log" >&2 || true
  kill -KILL "$DAEMON_PID" 2>/dev/null || true
  exit 1
}
