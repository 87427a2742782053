#!/usr/bin/env bash
# A Redis Cluster beside the plain stack (own ports, own data, own processes), from Debian's
# redis-server on loopback: three primaries with one replica each (six nodes), append-only
# (everysec, as the stack's Redis), a small memory limit (noeviction: a table is never
# evicted), and a short cluster-node-timeout so that a dead primary's replica takes over
# within seconds. The plain stack's Redis (:6379) is never touched.
#
#   ops/cluster.sh up|down|status|env   (also: ops/stack.sh cluster-up|cluster-down|
#                                        cluster-status|cluster-env, make cluster-up / cluster-down)
#   ops/cluster.sh node-start <n>       start node n (1-6) again: it rejoins the cluster with its
#                                       own nodes.conf (a former primary as a replica of the one
#                                       that took over)
#   ops/cluster.sh node-stop <n> [--kill|--stop|--cont]
#                                       stop node n (SHUTDOWN; --kill: SIGKILL, a crash), or
#                                       pause it (--stop: SIGSTOP) and let it go on (--cont)
#   ops/cluster.sh ports                the six ports, one a line (node 1 first)
#
# The first `up` creates the cluster (`redis-cli --cluster create ... --cluster-replicas 1`);
# later ones start the nodes on their nodes.conf. Either way `up` returns once every node
# says cluster_state:ok, at most ROUTER_STACK_START_TIMEOUT seconds.
# Everything lives in $ROUTER_CLUSTER_DIR (default .stack/cluster, git-ignored):
#   node-<n>/      each node's data, generated redis.conf and nodes.conf
#   logs/ run/     logs and pid files
#
# With ROUTER_CLUSTER_TLS=1 the nodes speak TLS only (clients, replication and the cluster bus;
# a CA and the nodes' certificate in pki/, made with openssl) and know ACL users only: the
# default user is off, `admin` (password in secrets/admin.password, mode 600) may do anything;
# replicas authenticate to their primary as admin. Role users are not made here.
#
# Settings (environment): ROUTER_CLUSTER_DIR, ROUTER_CLUSTER_PORTS (6401,...,6406; each node's
# cluster bus is its port + 10000), ROUTER_CLUSTER_NODE_TIMEOUT_MS (2000),
# ROUTER_CLUSTER_MAXMEMORY (128mb), ROUTER_CLUSTER_TLS (0), and ops/stack.sh's
# ROUTER_KAFKA_PORT and ROUTER_STACK_START_TIMEOUT.
set -euo pipefail

# shellcheck source=ops/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/stack.sh"

CL_DIR="${ROUTER_CLUSTER_DIR:-$STACK_DIR/cluster}"
IFS=, read -r -a CL_PORTS <<<"${ROUTER_CLUSTER_PORTS:-6401,6402,6403,6404,6405,6406}"
NODE_TIMEOUT_MS="${ROUTER_CLUSTER_NODE_TIMEOUT_MS:-2000}"
MAXMEMORY="${ROUTER_CLUSTER_MAXMEMORY:-128mb}"
CL_TLS="${ROUTER_CLUSTER_TLS:-0}"
PKI="$CL_DIR/pki"
SECRETS="$CL_DIR/secrets"
C_LOG_DIR="$CL_DIR/logs"
C_RUN_DIR="$CL_DIR/run"
NODES=${#CL_PORTS[@]}

say() { printf '[cluster] %s\n' "$*"; }

node_port() { echo "${CL_PORTS[$(($1 - 1))]}"; }
node_dir() { echo "$CL_DIR/node-$1"; }
node_pid() { echo "$C_RUN_DIR/node-$1.pid"; }
node_log() { echo "$C_LOG_DIR/node-$1.log"; }

rcli() {  # <port> [args...]: redis-cli to one node (over TLS as admin with ROUTER_CLUSTER_TLS=1)
  local port="$1"; shift
  if [ "$CL_TLS" = 1 ]; then
    REDISCLI_AUTH="$(cat "$SECRETS/admin.password")" redis-cli --no-auth-warning --tls \
      --cacert "$PKI/ca.pem" --user admin -h "$HOST" -p "$port" "$@"
  else
    redis-cli -h "$HOST" -p "$port" "$@"
  fi
}

answers() { rcli "$1" ping 2>/dev/null | grep -q PONG; }

# ---------------------------------------------------------------- TLS and ACL (ROUTER_CLUSTER_TLS=1)

make_pki() {  # once: a CA and the nodes' certificate (server and client: the bus, replication)
  [ -f "$PKI/.complete" ] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl is required for a TLS cluster (Debian: apt-get install openssl)."
  rm -rf "$PKI"; mkdir -p "$PKI"
  local log="$C_LOG_DIR/openssl.log"
  (umask 077
   openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.pem" \
     -days 365 -sha256 -subj "/CN=router-cluster-ca" \
   && openssl req -newkey rsa:2048 -nodes -keyout "$PKI/node.key" -out "$PKI/node.csr" -subj "/CN=router-cluster-node" \
   && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$PKI/node.ext" \
   && openssl x509 -req -in "$PKI/node.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" -CAcreateserial \
     -days 365 -sha256 -extfile "$PKI/node.ext" -out "$PKI/node.pem") >>"$log" 2>&1 \
    || { log_tail "$log"; die "openssl could not make the cluster's certificates."; }
  rm -f "$PKI/node.csr" "$PKI/node.ext"
  touch "$PKI/.complete"
}

make_secret() {  # once: the admin user's password
  [ -s "$SECRETS/admin.password" ] && return 0
  mkdir -p "$SECRETS"; chmod 700 "$SECRETS"
  (umask 077; openssl rand -hex 16 >"$SECRETS/admin.password")
}

tls_conf() {  # <dir> <port>: the node's TLS and ACL lines
  local hash
  hash="$(printf '%s' "$(cat "$SECRETS/admin.password")" | sha256sum | cut -d' ' -f1)"
  (umask 077; printf 'user default off\nuser admin on #%s ~* &* +@all\n' "$hash" >"$1/users.acl")
  echo "port 0"
  echo "tls-port $2"
  echo "cluster-port $(($2 + 10000))"
  echo "tls-cluster yes"
  echo "tls-replication yes"
  echo "tls-cert-file $PKI/node.pem"
  echo "tls-key-file $PKI/node.key"
  echo "tls-ca-cert-file $PKI/ca.pem"
  echo "tls-auth-clients optional"
  echo "aclfile $1/users.acl"
  echo "masteruser admin"
  echo "masterauth $(cat "$SECRETS/admin.password")"
}

check_node() {  # <n>
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$NODES" ] \
    || die "no node '${1:-}': the cluster has nodes 1 to $NODES"
}

node_start() {  # <n>
  local n="$1" port dir pidfile logfile deadline
  port="$(node_port "$n")"; dir="$(node_dir "$n")"; pidfile="$(node_pid "$n")"; logfile="$(node_log "$n")"
  if pid_alive "$pidfile" ":$port" && answers "$port"; then
    say "node $n already running on $HOST:$port"; return 0
  fi
  port_open "$port" && die "port $port (node $n) is in use by a process this cluster did not start." \
    "Stop it, or choose other ports with ROUTER_CLUSTER_PORTS."
  mkdir -p "$dir"
  if [ "$CL_TLS" = 1 ]; then make_pki; make_secret; fi
  (umask 077; {
    echo "# Generated by ops/cluster.sh: node $n."
    echo "bind $HOST"
    if [ "$CL_TLS" = 1 ]; then tls_conf "$dir" "$port"; else echo "port $port"; fi
    echo "protected-mode yes"
    echo "dir $dir"
    echo "cluster-enabled yes"
    echo "cluster-config-file nodes.conf"
    echo "cluster-node-timeout $NODE_TIMEOUT_MS"
    echo "appendonly yes"
    echo "appendfsync everysec"
    echo 'save ""'
    echo "maxmemory $MAXMEMORY"
    echo "maxmemory-policy noeviction"
    echo "daemonize yes"
    echo "pidfile $pidfile"
    echo "logfile $logfile"
  } >"$dir/redis.conf")  # mode 600: masterauth
  redis-server "$dir/redis.conf" 9>&- || { log_tail "$logfile"; die "node $n did not start."; }
  deadline=$((SECONDS + START_TIMEOUT))
  until answers "$port"; do
    [ $SECONDS -ge $deadline ] && { log_tail "$logfile"; die "node $n did not answer on $HOST:$port within ${START_TIMEOUT}s."; }
    sleep 0.1
  done
  say "node $n up on $HOST:$port"
}

node_stop() {  # <n> [--kill]
  local n="$1" how="${2:-}" port pidfile pid
  port="$(node_port "$n")"; pidfile="$(node_pid "$n")"
  if ! pid_alive "$pidfile" ":$port"; then rm -f "$pidfile"; return 0; fi
  pid="$(cat "$pidfile")"
  case "$how" in
    --stop) kill -STOP "$pid"; say "node $n paused (SIGSTOP)"; return 0 ;;
    --cont) kill -CONT "$pid"; say "node $n resumed (SIGCONT)"; return 0 ;;
    --kill) kill -CONT "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true ;;
    "") kill -CONT "$pid" 2>/dev/null || true
        rcli "$port" shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true ;;
    *) die "node-stop takes --kill, --stop or --cont, not '$how'" ;;
  esac
  wait_gone "$pid" "node $n"
  rm -f "$pidfile"
  say "node $n stopped${how:+ ($how)}"
}

cluster_info() {  # <port>: CLUSTER INFO of one node (empty if it does not answer)
  rcli "$1" cluster info 2>/dev/null | tr -d '\r' || true
}

created() {  # the cluster was created once: some node knows all the others
  local n
  for n in $(seq 1 "$NODES"); do
    [ -f "$(node_dir "$n")/nodes.conf" ] && [ "$(grep -c . "$(node_dir "$n")/nodes.conf")" -gt "$NODES" ] && return 0
  done
  return 1
}

wait_ok() {  # every node says cluster_state:ok and knows every node
  local n port deadline=$((SECONDS + START_TIMEOUT)) info
  for n in $(seq 1 "$NODES"); do
    port="$(node_port "$n")"
    until info="$(cluster_info "$port")" && printf '%s' "$info" | grep -q '^cluster_state:ok' \
        && printf '%s' "$info" | grep -q "^cluster_known_nodes:$NODES\$"; do
      [ $SECONDS -ge $deadline ] && { log_tail "$(node_log "$n")"; die "node $n did not say cluster_state:ok within ${START_TIMEOUT}s."; }
      sleep 0.2
    done
  done
}

c_up() {
  local t0=$SECONDS n addrs=()
  need_redis
  [ "$NODES" -ge 6 ] || die "ROUTER_CLUSTER_PORTS names $NODES ports: three primaries with a replica each need 6"
  for n in $(seq 1 "$NODES"); do node_start "$n"; addrs+=("$HOST:$(node_port "$n")"); done
  if ! created; then
    say "creating the cluster: ${addrs[*]} (3 primaries, 1 replica each)"
    rcli "$(node_port 1)" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
      >"$C_LOG_DIR/create.log" 2>&1 || { log_tail "$C_LOG_DIR/create.log"; die "redis-cli --cluster create failed."; }
  fi
  wait_ok
  say "cluster up in $((SECONDS - t0))s: nodes $(nodes_csv)"
}

c_down() {  # the replicas first (a primary's SHUTDOWN then waits for no lagging replica)
  local n role later=()
  for n in $(seq 1 "$NODES"); do
    role="$(rcli "$(node_port "$n")" info replication 2>/dev/null | tr -d '\r' | awk -F: '$1 == "role" {print $2}' || true)"
    if [ "$role" = master ]; then later+=("$n"); else node_stop "$n" & fi
  done
  wait  # each takes a second or two to exit: side by side
  for n in "${later[@]}"; do node_stop "$n" & done
  wait
}

c_status() {
  local rc=0 n port role state
  for n in $(seq 1 "$NODES"); do
    port="$(node_port "$n")"
    if pid_alive "$(node_pid "$n")" ":$port"; then
      role="$(rcli "$port" info replication 2>/dev/null | tr -d '\r' | awk -F: '$1 == "role" {print $2}')"
      state="$(cluster_info "$port" | awk -F: '$1 == "cluster_state" {print $2}')"
      say "node $n: running (pid $(cat "$(node_pid "$n")")) on $HOST:$port, role ${role:-unknown}, cluster_state ${state:-unknown}"
    else say "node $n: stopped"; rc=1; fi
  done
  return $rc
}

nodes_csv() {
  local port out=""
  for port in "${CL_PORTS[@]}"; do out="${out:+$out,}$HOST:$port"; done
  echo "$out"
}

c_env() {
  local port json=""
  for port in "${CL_PORTS[@]}"; do json="${json:+$json,}\"$HOST:$port\""; done
  echo "ROUTER_KAFKA__BOOTSTRAP_SERVERS=$HOST:$KAFKA_PORT"
  echo "ROUTER_REDIS__CLUSTER_NODES='[$json]'"  # quoted: `source`-able
  if [ "$CL_TLS" = 1 ]; then
    echo "ROUTER_REDIS__URL=rediss://$HOST/0"
    echo "ROUTER_REDIS__TLS_CA_FILE=$PKI/ca.pem"
    echo "ROUTER_REDIS__USERNAME=admin"
    echo "ROUTER_REDIS__PASSWORD_FILE=$SECRETS/admin.password"
  fi
}

c_lock() {
  mkdir -p "$CL_DIR"
  exec 9>"$CL_DIR/.lock"
  flock -w 120 9 || die "another ops/cluster.sh holds $CL_DIR/.lock for over 120s."
}

c_main() {
  local cmd="${1:-}"; shift || true
  mkdir -p "$C_LOG_DIR" "$C_RUN_DIR"
  case "$cmd" in
    up) c_lock; c_up ;;
    down) c_lock; kill_all_in "$C_RUN_DIR"; c_down ;;
    status) c_status ;;
    env) c_env ;;
    ports) printf '%s\n' "${CL_PORTS[@]}" ;;
    node-start) check_node "${1:-}"; c_lock; need_redis; node_start "$1" ;;
    node-stop) check_node "${1:-}"; c_lock; node_stop "$1" "${2:-}" ;;
    *) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
  esac
}

c_main "$@"
