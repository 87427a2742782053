#!/usr/bin/env bash
# The secured local stack, beside the plain one (own ports, own data, own processes):
#   Redis  TLS only on 127.0.0.1:6380, ACL users (the default user is off)
#   Kafka  KRaft single node, SASL_SSL (SCRAM-SHA-512) on 127.0.0.1:9192, the controller on
#          :9193 over mutual TLS, StandardAuthorizer: only the admin (and the broker itself)
#          is a super user; every other principal gets what ACLs grant (`router acls`)
#
#   ops/secure.sh up|down|status|env        (also: ops/stack.sh secure-up|secure-down|...)
#   ops/secure.sh redis-up|redis-down|kafka-up|kafka-down
#
# Everything generated lives in $ROUTER_SECURE_DIR (default .stack/secure, git-ignored):
#   pki/      a CA (ca.pem) and the server and client certificates it signed (openssl)
#   secrets/  redis-admin.password, kafka-admin.password (mode 600; never on a command line)
#   redis/ kafka/ logs/ run/   data, generated configuration, logs and pid files
# Role users are not created here: the tests make their own, operators run `router acls apply`.
#
# Settings (environment): ROUTER_SECURE_DIR, ROUTER_SECURE_REDIS_PORT (6380),
# ROUTER_SECURE_KAFKA_PORT (9192), ROUTER_SECURE_KAFKA_CONTROLLER_PORT (9193),
# ROUTER_SECURE_KAFKA_HEAP (384m), and ops/stack.sh's ROUTER_CACHE_DIR, ROUTER_KAFKA_VERSION.
set -euo pipefail

# shellcheck source=ops/stack.sh
source "$(dirname "${BASH_SOURCE[0]}")/stack.sh"

SECURE_DIR="${ROUTER_SECURE_DIR:-$STACK_DIR/secure}"
S_REDIS_PORT="${ROUTER_SECURE_REDIS_PORT:-6380}"
S_KAFKA_PORT="${ROUTER_SECURE_KAFKA_PORT:-9192}"
S_CONTROLLER_PORT="${ROUTER_SECURE_KAFKA_CONTROLLER_PORT:-9193}"
S_KAFKA_HEAP="${ROUTER_SECURE_KAFKA_HEAP:-384m}"
PKI="$SECURE_DIR/pki"
SECRETS="$SECURE_DIR/secrets"
S_LOG_DIR="$SECURE_DIR/logs"
S_RUN_DIR="$SECURE_DIR/run"
S_REDIS_DIR="$SECURE_DIR/redis"
S_KAFKA_DIR="$SECURE_DIR/kafka"
S_REDIS_PID="$S_RUN_DIR/redis.pid"
S_KAFKA_PID="$S_RUN_DIR/kafka.pid"
S_REDIS_LOG="$S_LOG_DIR/redis.log"
S_KAFKA_LOG="$S_LOG_DIR/kafka.log"

say() { printf '[secure] %s\n' "$*"; }

# ---------------------------------------------------------------- certificates and secrets

need_openssl() {
  command -v openssl >/dev/null 2>&1 \
    || die "openssl is required to make the secure stack's certificates (Debian: apt-get install openssl)."
}

sign() {  # <name> <CN> <extendedKeyUsage>: a key and a certificate signed by the CA
  local name="$1" cn="$2" usage="$3"
  openssl req -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -out "$PKI/$name.csr" \
    -subj "/CN=$cn" >>"$S_LOG_DIR/openssl.log" 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=%s\n' "$usage" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 365 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.pem" >>"$S_LOG_DIR/openssl.log" 2>&1
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
  chmod 600 "$PKI/$name.key"
}

make_pki() {  # once: a CA, the servers' certificate (Redis and the broker) and a client's
  [ -f "$PKI/.complete" ] && return 0
  need_openssl
  rm -rf "$PKI"; mkdir -p "$PKI"
  (umask 077; openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.pem" \
    -days 365 -sha256 -subj "/CN=router-local-ca" >>"$S_LOG_DIR/openssl.log" 2>&1) \
    || { log_tail "$S_LOG_DIR/openssl.log"; die "openssl could not make the CA."; }
  sign server router-broker serverAuth,clientAuth \
    || { log_tail "$S_LOG_DIR/openssl.log"; die "openssl could not sign the server certificate."; }
  sign client router-client clientAuth \
    || { log_tail "$S_LOG_DIR/openssl.log"; die "openssl could not sign the client certificate."; }
  # Kafka's PEM keystore: the private key (PKCS#8, unencrypted) and its certificate.
  (umask 077; cat "$PKI/server.key" "$PKI/server.pem" >"$PKI/server-keystore.pem")
  touch "$PKI/.complete"
  say "certificates in $PKI (CA: ca.pem)"
}

secret() {  # <name>: the secret's file, made once (32 hex characters, mode 600)
  local file="$SECRETS/$1.password"
  if [ ! -s "$file" ]; then
    mkdir -p "$SECRETS"; chmod 700 "$SECRETS"
    (umask 077; openssl rand -hex 16 >"$file")
  fi
  printf '%s' "$file"
}

# ---------------------------------------------------------------- redis (TLS + ACL)

s_redis_cli() {  # redis-cli as the admin, the password through the environment
  REDISCLI_AUTH="$(cat "$(secret redis-admin)")" redis-cli --no-auth-warning --tls \
    --cacert "$PKI/ca.pem" -h "$HOST" -p "$S_REDIS_PORT" --user admin "$@"
}

s_redis_answers() { s_redis_cli ping 2>/dev/null | grep -q PONG; }

s_redis_up() {
  need_redis
  mkdir -p "$S_REDIS_DIR" "$S_LOG_DIR" "$S_RUN_DIR"
  make_pki
  if pid_alive "$S_REDIS_PID" redis-server && s_redis_answers; then
    say "redis (TLS, ACL) already running on $HOST:$S_REDIS_PORT"; return 0
  fi
  port_open "$S_REDIS_PORT" && die "port $S_REDIS_PORT is in use by a process this stack did not start." \
    "Stop it, or choose another port with ROUTER_SECURE_REDIS_PORT."
  local hash
  hash="$(printf '%s' "$(cat "$(secret redis-admin)")" | sha256sum | cut -d' ' -f1)"
  # The default user is off: every client names its user. Only the hash is written here.
  (umask 077; printf 'user default off\nuser admin on #%s ~* &* +@all\n' "$hash" >"$S_REDIS_DIR/users.acl")
  (umask 077; cat >"$S_REDIS_DIR/redis.conf" <<EOF
# Generated by ops/secure.sh: TLS only, ACL users from users.acl.
bind $HOST
protected-mode yes
port 0
tls-port $S_REDIS_PORT
tls-cert-file $PKI/server.pem
tls-key-file $PKI/server.key
tls-ca-cert-file $PKI/ca.pem
# A client certificate is checked when one is presented (mutual TLS), not required.
tls-auth-clients optional
aclfile $S_REDIS_DIR/users.acl
dir $S_REDIS_DIR
appendonly yes
appendfsync everysec
save ""
daemonize yes
pidfile $S_REDIS_PID
logfile $S_REDIS_LOG
EOF
)
  redis-server "$S_REDIS_DIR/redis.conf" 9>&- || { log_tail "$S_REDIS_LOG"; die "redis-server (TLS) did not start."; }
  local deadline=$((SECONDS + START_TIMEOUT))
  until s_redis_answers; do
    [ $SECONDS -ge $deadline ] && { log_tail "$S_REDIS_LOG"; die "redis (TLS) did not answer on $HOST:$S_REDIS_PORT within ${START_TIMEOUT}s."; }
    sleep 0.1
  done
  say "redis up on rediss://$HOST:$S_REDIS_PORT (TLS, ACL; admin password in $(secret redis-admin))"
}

s_redis_down() {
  local pid
  if ! pid_alive "$S_REDIS_PID" redis-server; then rm -f "$S_REDIS_PID"; return 0; fi
  pid="$(cat "$S_REDIS_PID")"
  s_redis_cli shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" redis
  rm -f "$S_REDIS_PID"
  say "redis (TLS) stopped"
}

# ---------------------------------------------------------------- kafka (SASL_SSL + ACLs)

s_kafka_config() {
  mkdir -p "$S_KAFKA_DIR/data"
  local password; password="$(cat "$(secret kafka-admin)")"
  (umask 077; cat >"$S_KAFKA_DIR/server.properties" <<EOF
# Generated by ops/secure.sh (mode 600: it holds the broker's own SCRAM login).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$S_CONTROLLER_PORT
listeners=SASL_SSL://$HOST:$S_KAFKA_PORT,CONTROLLER://$HOST:$S_CONTROLLER_PORT
advertised.listeners=SASL_SSL://$HOST:$S_KAFKA_PORT
controller.listener.names=CONTROLLER
# Clients: SASL (SCRAM-SHA-512) inside TLS. The controller: mutual TLS, the broker's certificate.
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$password";
ssl.keystore.type=PEM
ssl.keystore.location=$PKI/server-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$PKI/ca.pem
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:CN=router-broker
log.dirs=$S_KAFKA_DIR/data
num.network.threads=2
num.io.threads=2
$(kafka_common_properties 1 1 4)
EOF
)
}

s_kafka_up() {
  need_java
  fetch_kafka_jars
  mkdir -p "$S_LOG_DIR" "$S_RUN_DIR"
  make_pki
  if pid_alive "$S_KAFKA_PID" kafka.Kafka && port_open "$S_KAFKA_PORT"; then
    say "kafka (SASL_SSL) already running on $HOST:$S_KAFKA_PORT"; return 0
  fi
  local port
  for port in "$S_KAFKA_PORT" "$S_CONTROLLER_PORT"; do
    port_open "$port" && die "port $port is in use by a process this stack did not start." \
      "Stop it, or choose others with ROUTER_SECURE_KAFKA_PORT / ROUTER_SECURE_KAFKA_CONTROLLER_PORT."
  done
  s_kafka_config
  local cp="$KAFKA_JARS/*"
  if [ ! -f "$S_KAFKA_DIR/data/meta.properties" ]; then
    local cluster_id args="$SECRETS/format.args"
    cluster_id="$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>>"$S_LOG_DIR/kafka-format.log")"
    # The admin's SCRAM credential is created with the storage, before the first start. Its
    # password goes through a java @argfile (mode 600, removed at once), not the command line.
    (umask 077; printf '%s\n' -cp "$cp" "-Dlog4j2.configurationFile=$ROOT/ops/kafka/log4j2.properties" \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$S_KAFKA_DIR/server.properties" \
      --add-scram "SCRAM-SHA-512=[name=admin,password=$(cat "$(secret kafka-admin)")]" >"$args")
    local rc=0
    java "@$args" >>"$S_LOG_DIR/kafka-format.log" 2>&1 || rc=$?
    rm -f "$args"
    [ $rc -eq 0 ] || { log_tail "$S_LOG_DIR/kafka-format.log"; die "formatting the secure Kafka storage failed."; }
    say "formatted $S_KAFKA_DIR/data (cluster id $cluster_id, SCRAM user admin)"
  fi
  kafka_launch "$S_KAFKA_DIR/server.properties" "$S_KAFKA_LOG" "$S_KAFKA_PID" "$S_KAFKA_HEAP" \
    -Xms128m -XX:TieredStopAtLevel=1
  kafka_wait "$S_KAFKA_PID" "$S_KAFKA_PORT" "$S_KAFKA_LOG" "the secure Kafka broker"
  say "kafka up on SASL_SSL://$HOST:$S_KAFKA_PORT (SCRAM-SHA-512; admin password in $(secret kafka-admin))"
}

s_kafka_down() {
  local pid
  if ! pid_alive "$S_KAFKA_PID" kafka.Kafka; then rm -f "$S_KAFKA_PID"; return 0; fi
  pid="$(cat "$S_KAFKA_PID")"
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$pid" kafka
  rm -f "$S_KAFKA_PID"
  say "kafka (SASL_SSL) stopped"
}

# ---------------------------------------------------------------- commands

s_status() {
  local rc=0
  if pid_alive "$S_REDIS_PID" redis-server; then say "redis: running (pid $(cat "$S_REDIS_PID")) on rediss://$HOST:$S_REDIS_PORT"
  else say "redis: stopped"; rc=1; fi
  if pid_alive "$S_KAFKA_PID" kafka.Kafka; then say "kafka: running (pid $(cat "$S_KAFKA_PID")) on SASL_SSL://$HOST:$S_KAFKA_PORT"
  else say "kafka: stopped"; rc=1; fi
  return $rc
}

s_env() {  # addresses and files, never a secret's value
  echo "ROUTER_SECURE_REDIS_URL=rediss://$HOST:$S_REDIS_PORT/0"
  echo "ROUTER_SECURE_KAFKA_BOOTSTRAP=$HOST:$S_KAFKA_PORT"
  echo "ROUTER_SECURE_CA_FILE=$PKI/ca.pem"
  echo "ROUTER_SECURE_CLIENT_CERT=$PKI/client.pem"
  echo "ROUTER_SECURE_CLIENT_KEY=$PKI/client.key"
  echo "ROUTER_SECURE_REDIS_ADMIN_PASSWORD_FILE=$SECRETS/redis-admin.password"
  echo "ROUTER_SECURE_KAFKA_ADMIN_PASSWORD_FILE=$SECRETS/kafka-admin.password"
}

s_lock() {
  mkdir -p "$SECURE_DIR"
  exec 9>"$SECURE_DIR/.lock"
  flock -w 120 9 || die "another ops/secure.sh holds $SECURE_DIR/.lock for over 120s."
}

s_main() {
  local cmd="${1:-}"; shift || true
  mkdir -p "$S_LOG_DIR" "$S_RUN_DIR"
  case "$cmd" in
    up) s_lock; s_redis_up; s_kafka_up ;;
    down) s_lock; kill_all_in "$S_RUN_DIR"; s_kafka_down; s_redis_down ;;
    redis-up) s_lock; s_redis_up ;;
    redis-down) s_lock; s_redis_down ;;
    kafka-up) s_lock; s_kafka_up ;;
    kafka-down) s_lock; s_kafka_down ;;
    status) s_status ;;
    env) s_env ;;
    *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
  esac
}

s_main "$@"
