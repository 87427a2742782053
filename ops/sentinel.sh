#!/usr/bin/env bash
# Redis with Sentinel, beside the plain stack (own ports, own data, own processes): two data
# nodes, a primary and its replica (append-only, everysec, as the stack's Redis), watched by
# three Sentinels (quorum 2) that promote the replica when the primary fails. The plain
# stack's Redis (:6379) is never touched.
#
#   ops/sentinel.sh up|down|status|env      (also: ops/stack.sh sentinel-up|sentinel-down|
#                                            sentinel-status|sentinel-env|sentinel-kill-primary,
#                                            make sentinel-up / sentinel-down)
#   ops/sentinel.sh kill-primary            SIGKILL the node that is primary now (a crash); the
#                                           Sentinels promote the replica. Prints the node
#   ops/sentinel.sh primary                 the primary now, as the Sentinels say (host:port)
#   ops/sentinel.sh node-start <n>          start data node n (1, 2) again: as a replica of the
#                                           primary the Sentinels name, unless it is that primary
#   ops/sentinel.sh node-stop <n> [--kill|--stop|--cont]
#                                           stop node n (SHUTDOWN; --kill: SIGKILL), or pause it
#                                           (--stop: SIGSTOP) and let it go on (--cont: SIGCONT)
#
# Node 1 starts as the primary and node 2 as its replica; after a failover the Sentinels'
# rewritten configuration names the primary, and `up` and `node-start` follow it.
# Everything lives in $ROUTER_SENTINEL_DIR (default .stack/sentinel, git-ignored):
#   node-<n>/ sentinel-<n>/   each node's data and generated redis.conf, each Sentinel's
#                             sentinel.conf (which the Sentinel rewrites with what it learns)
#   logs/ run/                logs and pid files
#
# Settings (environment): ROUTER_SENTINEL_DIR, ROUTER_REDIS_PRIMARY_PORT (6391),
# ROUTER_REDIS_REPLICA_PORT (6392), ROUTER_SENTINEL_PORTS (26391,26392,26393),
# ROUTER_SENTINEL_SERVICE (router), ROUTER_SENTINEL_DOWN_AFTER_MS (2000: a primary silent this
# long is down), ROUTER_SENTINEL_FAILOVER_TIMEOUT_MS (10000), and ops/stack.sh's
# ROUTER_KAFKA_PORT and ROUTER_STACK_START_TIMEOUT.
set -euo pipefail

# shellcheck source=ops/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/stack.sh"

SENT_DIR="${ROUTER_SENTINEL_DIR:-$STACK_DIR/sentinel}"
NODE_PORTS=("${ROUTER_REDIS_PRIMARY_PORT:-6391}" "${ROUTER_REDIS_REPLICA_PORT:-6392}")
IFS=, read -r -a SENTINEL_PORTS <<<"${ROUTER_SENTINEL_PORTS:-26391,26392,26393}"
SERVICE="${ROUTER_SENTINEL_SERVICE:-router}"
DOWN_AFTER_MS="${ROUTER_SENTINEL_DOWN_AFTER_MS:-2000}"
FAILOVER_TIMEOUT_MS="${ROUTER_SENTINEL_FAILOVER_TIMEOUT_MS:-10000}"
QUORUM=$(( ${#SENTINEL_PORTS[@]} / 2 + 1 ))
X_LOG_DIR="$SENT_DIR/logs"
X_RUN_DIR="$SENT_DIR/run"

say() { printf '[sentinel] %s\n' "$*"; }

node_port() { echo "${NODE_PORTS[$(($1 - 1))]}"; }
node_dir() { echo "$SENT_DIR/node-$1"; }
node_pid() { echo "$X_RUN_DIR/node-$1.pid"; }
node_log() { echo "$X_LOG_DIR/node-$1.log"; }
sent_port() { echo "${SENTINEL_PORTS[$(($1 - 1))]}"; }
sent_dir() { echo "$SENT_DIR/sentinel-$1"; }
sent_pid() { echo "$X_RUN_DIR/sentinel-$1.pid"; }
sent_log() { echo "$X_LOG_DIR/sentinel-$1.log"; }

answers() { redis-cli -h "$HOST" -p "$1" ping 2>/dev/null | grep -q PONG; }

check_node() {  # <n>
  [[ "${1:-}" =~ ^[12]$ ]] || die "no data node '${1:-}': the set has nodes 1 (primary at first) and 2"
}

node_of_port() {  # <port>: the node number, or nothing
  local n
  for n in 1 2; do [ "$(node_port "$n")" = "$1" ] && echo "$n"; done
  return 0
}

# ---------------------------------------------------------------- who is primary

asked_primary() {  # host:port of the primary, as the first Sentinel that answers says
  local n out
  for n in $(seq 1 ${#SENTINEL_PORTS[@]}); do
    out="$(redis-cli -h "$HOST" -p "$(sent_port "$n")" sentinel get-master-addr-by-name "$SERVICE" 2>/dev/null || true)"
    if [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] && [ -n "$(printf '%s' "$out" | tail -n 1)" ]; then
      printf '%s:%s\n' "$(printf '%s\n' "$out" | head -n 1)" "$(printf '%s\n' "$out" | tail -n 1)"
      return 0
    fi
  done
  return 1
}

recorded_primary_port() {  # from a Sentinel's (rewritten) configuration, or node 1's port
  local conf port
  for conf in "$SENT_DIR"/sentinel-*/sentinel.conf; do
    [ -f "$conf" ] || continue
    port="$(awk -v s="$SERVICE" '$1 == "sentinel" && $2 == "monitor" && $3 == s {print $5; exit}' "$conf")"
    if [ -n "$port" ] && [ -n "$(node_of_port "$port")" ]; then echo "$port"; return 0; fi
  done
  node_port 1
}

primary_port() {  # the Sentinels' word if they answer, else what they last wrote down
  local addr
  if addr="$(asked_primary)"; then echo "${addr##*:}"; else recorded_primary_port; fi
}

# ---------------------------------------------------------------- data nodes

node_start() {  # <n>: as the primary if the Sentinels say so, else as the primary's replica
  local n="$1" port dir pidfile logfile primary deadline
  port="$(node_port "$n")"; dir="$(node_dir "$n")"; pidfile="$(node_pid "$n")"; logfile="$(node_log "$n")"
  if pid_alive "$pidfile" ":$port" && answers "$port"; then
    say "node $n already running on $HOST:$port"; return 0
  fi
  port_open "$port" && die "port $port (node $n) is in use by a process this set did not start." \
    "Stop it, or choose other ports with ROUTER_REDIS_PRIMARY_PORT / ROUTER_REDIS_REPLICA_PORT."
  primary="$(primary_port)"
  mkdir -p "$dir"
  # A configuration file of its own (made anew at each start), so that the Sentinels' CONFIG
  # REWRITE after a role change has somewhere to go.
  {
    echo "# Generated by ops/sentinel.sh: data node $n."
    echo "bind $HOST"
    echo "port $port"
    echo "protected-mode yes"
    echo "dir $dir"
    echo "appendonly yes"
    echo "appendfsync everysec"
    echo 'save ""'
    echo "daemonize yes"
    echo "pidfile $pidfile"
    echo "logfile $logfile"
    echo "replica-read-only yes"
    [ "$primary" != "$port" ] && echo "replicaof $HOST $primary"
  } >"$dir/redis.conf"
  redis-server "$dir/redis.conf" 9>&- || { log_tail "$logfile"; die "node $n did not start."; }
  deadline=$((SECONDS + START_TIMEOUT))
  until answers "$port"; do
    [ $SECONDS -ge $deadline ] && { log_tail "$logfile"; die "node $n did not answer on $HOST:$port within ${START_TIMEOUT}s."; }
    sleep 0.1
  done
  if [ "$primary" = "$port" ]; then say "node $n up on $HOST:$port (primary)"
  else say "node $n up on $HOST:$port (replica of $HOST:$primary)"; fi
}

node_stop() {  # <n> [--kill|--stop|--cont]
  local n="$1" how="${2:-}" port pidfile pid
  port="$(node_port "$n")"; pidfile="$(node_pid "$n")"
  if ! pid_alive "$pidfile" ":$port"; then rm -f "$pidfile"; return 0; fi
  pid="$(cat "$pidfile")"
  case "$how" in
    --stop) kill -STOP "$pid"; say "node $n paused (SIGSTOP)"; return 0 ;;
    --cont) kill -CONT "$pid"; say "node $n resumed (SIGCONT)"; return 0 ;;
    --kill) kill -CONT "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true ;;
    "") kill -CONT "$pid" 2>/dev/null || true
        redis-cli -h "$HOST" -p "$port" shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true ;;
    *) die "node-stop takes --kill, --stop or --cont, not '$how'" ;;
  esac
  wait_gone "$pid" "node $n"
  rm -f "$pidfile"
  say "node $n stopped${how:+ ($how)}"
}

# ---------------------------------------------------------------- sentinels

sentinel_start() {  # <n>
  local n="$1" port dir pidfile logfile deadline
  port="$(sent_port "$n")"; dir="$(sent_dir "$n")"; pidfile="$(sent_pid "$n")"; logfile="$(sent_log "$n")"
  if pid_alive "$pidfile" ":$port" && answers "$port"; then
    say "sentinel $n already running on $HOST:$port"; return 0
  fi
  port_open "$port" && die "port $port (sentinel $n) is in use by a process this set did not start." \
    "Stop it, or choose other ports with ROUTER_SENTINEL_PORTS."
  mkdir -p "$dir"
  # Written once: the Sentinel rewrites it with the primary, replicas and peers it learns
  # (a restarted Sentinel knows about a failover that happened before). Anew if the ports
  # changed: what it learnt is about other servers.
  if [ -f "$dir/sentinel.conf" ] && ! sentinel_conf_current "$dir/sentinel.conf" "$port"; then
    say "sentinel $n: ports changed since $dir/sentinel.conf was written: starting it afresh"
    rm -f "$dir/sentinel.conf"
  fi
  if [ ! -f "$dir/sentinel.conf" ]; then
    cat >"$dir/sentinel.conf" <<EOF
# Generated by ops/sentinel.sh: sentinel $n (rewritten by the Sentinel itself).
bind $HOST
port $port
protected-mode no
dir $dir
sentinel resolve-hostnames no
sentinel monitor $SERVICE $HOST $(recorded_primary_port) $QUORUM
sentinel down-after-milliseconds $SERVICE $DOWN_AFTER_MS
sentinel failover-timeout $SERVICE $FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $SERVICE 1
EOF
  fi
  redis-server "$dir/sentinel.conf" --sentinel --daemonize yes --pidfile "$pidfile" \
    --logfile "$logfile" 9>&- || { log_tail "$logfile"; die "sentinel $n did not start."; }
  deadline=$((SECONDS + START_TIMEOUT))
  until answers "$port"; do
    [ $SECONDS -ge $deadline ] && { log_tail "$logfile"; die "sentinel $n did not answer on $HOST:$port within ${START_TIMEOUT}s."; }
    sleep 0.1
  done
  say "sentinel $n up on $HOST:$port (service $SERVICE, quorum $QUORUM)"
}

sentinel_conf_current() {  # <conf> <port>: its own port, and it watches one of our nodes
  local conf="$1" port="$2" watched
  grep -q "^port $port\$" "$conf" || return 1
  watched="$(awk -v s="$SERVICE" '$1 == "sentinel" && $2 == "monitor" && $3 == s {print $5; exit}' "$conf")"
  [ -n "$watched" ] && [ -n "$(node_of_port "$watched")" ]
}

sentinel_stop() {  # <n>
  local n="$1" port pidfile pid
  port="$(sent_port "$n")"; pidfile="$(sent_pid "$n")"
  if ! pid_alive "$pidfile" ":$port"; then rm -f "$pidfile"; return 0; fi
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" "sentinel $n"
  rm -f "$pidfile"
  say "sentinel $n stopped"
}

wait_watched() {  # every Sentinel names a primary and knows its replica and its peers
  local n port deadline=$((SECONDS + START_TIMEOUT)) info
  for n in $(seq 1 ${#SENTINEL_PORTS[@]}); do
    port="$(sent_port "$n")"
    until info="$(redis-cli -h "$HOST" -p "$port" info sentinel 2>/dev/null)" \
        && printf '%s' "$info" | grep -q "status=ok,.*slaves=[1-9].*sentinels=${#SENTINEL_PORTS[@]}"; do
      [ $SECONDS -ge $deadline ] && { log_tail "$(sent_log "$n")"; die "sentinel $n did not see the primary, its replica and every peer within ${START_TIMEOUT}s."; }
      sleep 0.2
    done
  done
}

# ---------------------------------------------------------------- commands

x_up() {
  local t0=$SECONDS n p
  need_redis
  # The primary first, so that the replica has one to follow; then the Sentinels.
  p="$(node_of_port "$(primary_port)")"
  node_start "$p"
  node_start $((3 - p))
  for n in $(seq 1 ${#SENTINEL_PORTS[@]}); do sentinel_start "$n"; done
  wait_watched
  say "sentinel set up in $((SECONDS - t0))s: primary $HOST:$(primary_port), service $SERVICE at $(sentinels_csv)"
}

x_down() {
  local n p
  # The Sentinels first: stopping the primary must not start a failover.
  for n in $(seq 1 ${#SENTINEL_PORTS[@]}); do sentinel_stop "$n"; done
  p="$(node_of_port "$(recorded_primary_port)")"
  for n in 1 2; do [ "$n" = "$p" ] || node_stop "$n"; done
  node_stop "$p"
}

x_status() {
  local rc=0 n port role
  for n in 1 2; do
    port="$(node_port "$n")"
    if pid_alive "$(node_pid "$n")" ":$port"; then
      role="$(redis-cli -h "$HOST" -p "$port" info replication 2>/dev/null | tr -d '\r' | awk -F: '$1 == "role" {print $2}')"
      say "node $n: running (pid $(cat "$(node_pid "$n")")) on $HOST:$port, role ${role:-unknown (not answering)}"
    else say "node $n: stopped"; rc=1; fi
  done
  for n in $(seq 1 ${#SENTINEL_PORTS[@]}); do
    port="$(sent_port "$n")"
    if pid_alive "$(sent_pid "$n")" ":$port"; then say "sentinel $n: running (pid $(cat "$(sent_pid "$n")")) on $HOST:$port"
    else say "sentinel $n: stopped"; rc=1; fi
  done
  say "primary (service $SERVICE): $(asked_primary || echo 'no Sentinel answers')"
  return $rc
}

sentinels_csv() {
  local port out=""
  for port in "${SENTINEL_PORTS[@]}"; do out="${out:+$out,}$HOST:$port"; done
  echo "$out"
}

x_env() {
  local port json=""
  for port in "${SENTINEL_PORTS[@]}"; do json="${json:+$json,}\"$HOST:$port\""; done
  echo "ROUTER_KAFKA__BOOTSTRAP_SERVERS=$HOST:$KAFKA_PORT"
  echo "ROUTER_REDIS__SENTINELS=[$json]"
  echo "ROUTER_REDIS__SENTINEL_SERVICE=$SERVICE"
}

x_kill_primary() {
  local addr n
  addr="$(asked_primary)" || die "no Sentinel answers: cannot tell which node is primary."
  n="$(node_of_port "${addr##*:}")"
  [ -n "$n" ] || die "the Sentinels name $addr, which is not a node of this set."
  node_stop "$n" --kill >/dev/null
  say "killed node $n ($addr), the primary (SIGKILL)"
  echo "$n"
}

x_lock() {
  mkdir -p "$SENT_DIR"
  exec 9>"$SENT_DIR/.lock"
  flock -w 120 9 || die "another ops/sentinel.sh holds $SENT_DIR/.lock for over 120s."
}

x_main() {
  local cmd="${1:-}"; shift || true
  mkdir -p "$X_LOG_DIR" "$X_RUN_DIR"
  case "$cmd" in
    up) x_lock; x_up ;;
    down) x_lock; kill_all_in "$X_RUN_DIR"; x_down ;;
    status) x_status ;;
    env) x_env ;;
    primary) asked_primary || die "no Sentinel answers." ;;
    kill-primary) x_lock; x_kill_primary ;;
    node-start) check_node "${1:-}"; x_lock; need_redis; node_start "$1" ;;
    node-stop) check_node "${1:-}"; x_lock; node_stop "$1" "${2:-}" ;;
    *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
  esac
}

x_main "$@"
