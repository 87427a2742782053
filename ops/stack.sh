#!/usr/bin/env bash
# Local stack without Docker: the real Apache Kafka broker (single node, KRaft) from its
# Maven Central jars, and Redis from Debian's redis-server package, both on 127.0.0.1.
#
#   ops/stack.sh up            fetch jars if needed, start Redis and Kafka, wait until both answer
#   ops/stack.sh down          stop router processes recorded in .stack/run/units (SIGTERM: each
#                              commits and leaves its group), then both servers; nothing of ours left
#   ops/stack.sh status        what is running, where
#   ops/stack.sh env           the addresses, as ROUTER_* environment variables
#   ops/stack.sh fetch-jars    only resolve the jars (Kafka broker and tools; Spark connector for .venv's pyspark)
#   ops/stack.sh kafka-tool <class> [args...]   one of Kafka's own tools, on the cached jars
#   ops/stack.sh console-producer [args...]     = kafka-tool org.apache.kafka.tools.ConsoleProducer
#   ops/stack.sh kafka-start|kafka-stop [--kill]|redis-start|redis-stop [--kill]
#                              one server at a time (the chaos driver restarts them mid-run)
#   ops/stack.sh secure-up|secure-down|secure-status|secure-env
#                              the secured variant beside it (ops/secure.sh): Redis with ACL users
#                              and TLS on :6380, Kafka with SASL_SSL (SCRAM-SHA-512) and ACLs on :9192
#   ops/stack.sh ha-up|ha-down|ha-status|ha-env|ha-broker-start <n>|ha-broker-stop <n> [--kill]
#                              the replicated cluster beside it (ops/ha.sh): KRaft, one controller
#                              on :9290 and three brokers on :9291-9293, replication 3, min ISR 2
#   ops/stack.sh sentinel-up|sentinel-down|sentinel-status|sentinel-env|sentinel-kill-primary
#                              Redis with Sentinel beside it (ops/sentinel.sh): a primary (:6391),
#                              its replica (:6392) and three Sentinels (:26391-26393)
#   ops/stack.sh cluster-up|cluster-down|cluster-status|cluster-env|cluster-node-stop <n> [--kill]|...
#                              a Redis Cluster beside it (ops/cluster.sh): three primaries and
#                              their replicas on :6401-6406
#
# Settings (environment): ROUTER_STACK_DIR (default .stack), ROUTER_CACHE_DIR (.cache),
# ROUTER_KAFKA_VERSION (4.1.2), ROUTER_KAFKA_PORT (9092), ROUTER_KAFKA_CONTROLLER_PORT (9093),
# ROUTER_REDIS_PORT (6379), ROUTER_KAFKA_HEAP (512m), ROUTER_MAVEN_SETTINGS (ops/maven/settings.xml),
# ROUTER_KAFKA_UNIT_LISTENERS (none: extra listeners for per-unit fault proxies, write_kafka_config),
# ROUTER_PYTHON (.venv/bin/python, used to find the installed pyspark version),
# ROUTER_STACK_KILL (1: `down` SIGKILLs the servers instead of stopping them gracefully, for
# servers whose data is thrown away, as the test session's own at its end; every script
# that sources this one does the same).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK_DIR="${ROUTER_STACK_DIR:-$ROOT/.stack}"
CACHE_DIR="${ROUTER_CACHE_DIR:-$ROOT/.cache}"
KAFKA_VERSION="${ROUTER_KAFKA_VERSION:-4.1.2}"
HOST=127.0.0.1
KAFKA_PORT="${ROUTER_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${ROUTER_KAFKA_CONTROLLER_PORT:-9093}"
REDIS_PORT="${ROUTER_REDIS_PORT:-6379}"
KAFKA_HEAP="${ROUTER_KAFKA_HEAP:-512m}"
MAVEN_SETTINGS="${ROUTER_MAVEN_SETTINGS:-$ROOT/ops/maven/settings.xml}"
PYTHON="${ROUTER_PYTHON:-$ROOT/.venv/bin/python}"
START_TIMEOUT="${ROUTER_STACK_START_TIMEOUT:-60}"
STOP_TIMEOUT="${ROUTER_STACK_STOP_TIMEOUT:-30}"

KAFKA_JARS="$CACHE_DIR/jars/kafka-$KAFKA_VERSION"
KAFKA_TOOLS_JARS="$CACHE_DIR/jars/kafka-tools-$KAFKA_VERSION"
LOG_DIR="$STACK_DIR/logs"
RUN_DIR="$STACK_DIR/run"
KAFKA_DIR="$STACK_DIR/kafka"
REDIS_DIR="$STACK_DIR/redis"
KAFKA_PID="$RUN_DIR/kafka.pid"
REDIS_PID="$RUN_DIR/redis.pid"
KAFKA_LOG="$LOG_DIR/kafka.log"
REDIS_LOG="$LOG_DIR/redis.log"

DOCKER_HINT="Alternatively, with Docker and no Java or Maven: ROUTER_STACK=docker make stack-up (or make test, make demo): Kafka and Redis from docker-compose.yml."

say() { printf '[stack] %s\n' "$*"; }
die() {
  printf '[stack] ERROR: %s\n' "$1" >&2
  [ $# -ge 2 ] && printf '[stack] %s\n' "$2" >&2
  exit 1
}

log_tail() {  # <file>: show what went wrong
  local f="$1"
  if [ -f "$f" ]; then
    printf '[stack] ---- last lines of %s ----\n' "$f" >&2
    tail -n 40 "$f" >&2
    printf '[stack] ----\n' >&2
  fi
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

proc_running() {  # <pid>: the process exists and has not exited (a zombie has)
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

pid_alive() {  # <pidfile> <cmdline-pattern>: the recorded process is alive and is ours
  local pidfile="$1" pattern="$2" pid
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$pattern"
}

# ---------------------------------------------------------------- prerequisites

need_java() {
  command -v java >/dev/null 2>&1 \
    || die "Java 17 or newer is required to run the Kafka broker, and 'java' is not on PATH." \
           "Install it (Debian: apt-get install openjdk-17-jre-headless). $DOCKER_HINT"
  local v major
  v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  major="${v%%.*}"
  [ "$major" = "1" ] && major="$(echo "$v" | cut -d. -f2)"
  [ -n "$major" ] && [ "$major" -ge 17 ] 2>/dev/null \
    || die "Java 17 or newer is required to run Kafka $KAFKA_VERSION; found Java '$v'." \
           "Install Java 17+ and put it first on PATH. $DOCKER_HINT"
}

need_maven() {
  command -v mvn >/dev/null 2>&1 \
    || die "Maven ('mvn') is required once, to fetch the Kafka jars from Maven Central, and is not on PATH." \
           "Install it (Debian: apt-get install maven). $DOCKER_HINT"
}

want_kcat() {  # kcat: for the README's examples and one bad-input test; optional
  command -v kcat >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's kcat package"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } \
      >"$LOG_DIR/apt-kcat.log" 2>&1 || say "could not install kcat (optional): see $LOG_DIR/apt-kcat.log"
  fi
}

stop_units() {  # router processes that recorded themselves (ROUTER_PID_DIR) get SIGTERM
  local dir="$RUN_DIR/units" f pid pids=()
  [ -d "$dir" ] || return 0
  for f in "$dir"/*.pid; do
    [ -e "$f" ] || continue
    pid="$(cat "$f" 2>/dev/null || true)"
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q router; then
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    else
      rm -f "$f"
    fi
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  say "stopping ${#pids[@]} router processes (SIGTERM: finish the batch, commit, leave the group)"
  for pid in "${pids[@]}"; do wait_gone "$pid" "router process $pid"; done
  rm -f "$dir"/*.pid
}

need_redis() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's redis-server package"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
      >"$LOG_DIR/apt-redis.log" 2>&1 \
      || { log_tail "$LOG_DIR/apt-redis.log"; die "could not install redis-server with apt-get." "$DOCKER_HINT"; }
  else
    die "redis-server is not installed (Debian: sudo apt-get install redis-server)." "$DOCKER_HINT"
  fi
}

# ---------------------------------------------------------------- jars

mvn_copy() {  # <pom dir> <output dir> [extra -D args...]
  local pom="$1" out="$2"; shift 2
  local log="$LOG_DIR/maven-$(basename "$out").log"
  need_maven
  say "fetching $(basename "$out") jars from Maven Central (once; cached in $out)"
  rm -rf "$out.tmp"
  if ! mvn -B -s "$MAVEN_SETTINGS" -f "$pom/pom.xml" "$@" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$out.tmp" \
        >"$log" 2>&1; then
    rm -rf "$out.tmp"
    if grep -q -E 'Unknown host|Connection refused|timed out|Could not transfer|Network is unreachable' "$log"; then
      log_tail "$log"
      die "the Maven repository is unreachable, so the jars in $out cannot be fetched." \
          "Check network access to Maven Central (or set ROUTER_MAVEN_SETTINGS to a settings.xml with your mirror). $DOCKER_HINT"
    fi
    log_tail "$log"
    die "Maven could not resolve the jars for $out (log: $log)." "$DOCKER_HINT"
  fi
  mv "$out.tmp" "$out"
}

fetch_kafka_jars() {
  [ -f "$KAFKA_JARS/.complete" ] && return 0
  rm -rf "$KAFKA_JARS"
  mvn_copy "$ROOT/ops/maven/kafka" "$KAFKA_JARS" -Dkafka.version="$KAFKA_VERSION"
  touch "$KAFKA_JARS/.complete"
}

fetch_kafka_tools() {  # the kafka-tools jar alone: its tools run on the broker's jars
  [ -f "$KAFKA_TOOLS_JARS/.complete" ] && return 0
  rm -rf "$KAFKA_TOOLS_JARS"
  mvn_copy "$ROOT/ops/maven/kafka-tools" "$KAFKA_TOOLS_JARS" -Dkafka.version="$KAFKA_VERSION"
  touch "$KAFKA_TOOLS_JARS/.complete"
}

kafka_tool() {  # <class> [args...]: one of Kafka's command-line tools, in the foreground
  [ $# -ge 1 ] || die "usage: ops/stack.sh kafka-tool <class> [args...]"
  with_lock
  need_java
  fetch_kafka_jars
  fetch_kafka_tools
  exec 9>&-  # the fetch is done: let other callers of this script go on
  exec java -Xms32m -Xmx256m -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/ops/kafka/tools-log4j2.properties" \
    -cp "$KAFKA_JARS/*:$KAFKA_TOOLS_JARS/*" "$@"
}

fetch_spark_jars() {
  # The Spark jobs' Kafka connector and Avro support, for exactly the pyspark installed.
  local spark_version spark_home out
  [ -x "$PYTHON" ] || { say "no $PYTHON yet: skipping the Spark connector jars"; return 0; }
  spark_version="$("$PYTHON" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null || true)"
  [ -n "$spark_version" ] || { say "pyspark is not installed: skipping the Spark connector jars"; return 0; }
  out="$CACHE_DIR/jars/spark-$spark_version"
  [ -f "$out/.complete" ] && return 0
  rm -rf "$out"
  mvn_copy "$ROOT/ops/maven/spark" "$out" -Dspark.version="$spark_version"
  # Drop what pyspark already ships (hadoop client, scala library, ...): two copies of one
  # library on Spark's classpath is a classic source of NoSuchMethodError.
  spark_home="$("$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  local jar base
  for jar in "$out"/*.jar; do
    base="$(basename "$jar" | sed -E 's/-[0-9][^-]*\.jar$//')"
    if compgen -G "$spark_home/jars/$base-[0-9]*.jar" >/dev/null; then rm -f "$jar"; fi
  done
  touch "$out/.complete"
  say "Spark connector jars for pyspark $spark_version: $(ls "$out"/*.jar | wc -l) files in $out"
}

# ---------------------------------------------------------------- redis

redis_answers() { redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }

redis_start() {
  need_redis
  mkdir -p "$REDIS_DIR" "$LOG_DIR" "$RUN_DIR"
  if pid_alive "$REDIS_PID" redis-server && redis_answers; then
    say "redis already running on $HOST:$REDIS_PORT"
    return 0
  fi
  if port_open "$REDIS_PORT"; then
    if redis_answers; then  # e.g. another checkout's stack: use it, leave it alone
      say "redis already answering on $HOST:$REDIS_PORT (not started by this checkout): using it"
      return 0
    fi
    die "port $REDIS_PORT is in use by a process that is not Redis." \
        "Stop it, or choose another port with ROUTER_REDIS_PORT."
  fi
  # Append-only persistence in the stack's data folder; no RDB snapshots besides the AOF base.
  redis-server --bind "$HOST" --port "$REDIS_PORT" --protected-mode yes \
    --dir "$REDIS_DIR" --appendonly yes --appendfsync everysec --save "" \
    --daemonize yes --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" 9>&- \
    || { log_tail "$REDIS_LOG"; die "redis-server did not start."; }
  local deadline=$((SECONDS + START_TIMEOUT))
  until redis_answers; do
    if [ $SECONDS -ge $deadline ]; then
      log_tail "$REDIS_LOG"; die "redis did not answer PING on $HOST:$REDIS_PORT within ${START_TIMEOUT}s."
    fi
    sleep 0.1
  done
  say "redis up on $HOST:$REDIS_PORT (append-only data in $REDIS_DIR)"
}

redis_stop() {  # [--kill]
  local pid
  if ! pid_alive "$REDIS_PID" redis-server; then rm -f "$REDIS_PID"; return 0; fi
  pid="$(cat "$REDIS_PID")"
  if [ "${1:-}" = "--kill" ]; then
    kill -KILL "$pid" 2>/dev/null || true
  else
    # SHUTDOWN flushes the append-only file before exiting.
    redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  fi
  wait_gone "$pid" redis
  rm -f "$REDIS_PID"
  say "redis stopped"
}

# ---------------------------------------------------------------- kafka

kafka_common_properties() {  # <replicas> <min ISR> <internal topic partitions>: every node's shared part
  cat <<EOF
# Topics are created explicitly ('router topics create', the tests' fixtures).
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$1
min.insync.replicas=$2
offsets.topic.replication.factor=$1
offsets.topic.num.partitions=$3
transaction.state.log.replication.factor=$1
transaction.state.log.min.isr=$2
transaction.state.log.num.partitions=$3
share.coordinator.state.topic.replication.factor=$1
share.coordinator.state.topic.min.isr=$2
# Both group protocols: classic and the KIP-848 consumer protocol.
group.coordinator.rebalance.protocols=classic,consumer
group.initial.rebalance.delay.ms=0
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
# A killed unit's open transaction is aborted soon after its transaction.timeout.ms.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
log.retention.hours=24
EOF
}

kafka_format() {  # <server.properties> <cluster id> <log>: once per data folder
  [ -f "$(sed -n 's/^log.dirs=//p' "$1")/meta.properties" ] && return 0
  java -cp "$KAFKA_JARS/*" -Dlog4j2.configurationFile="$ROOT/ops/kafka/log4j2.properties" \
    kafka.tools.StorageTool format -t "$2" -c "$1" >>"$3" 2>&1 \
    || { log_tail "$3"; die "formatting $(dirname "$1")/data failed."; }
}

kafka_launch() {  # <server.properties> <log> <pid file> <heap> [JVM options...]: start, don't wait
  local props="$1" logfile="$2" pidfile="$3" heap="$4"
  shift 4
  [ -f "$logfile" ] && mv -f "$logfile" "$logfile.1"
  # setsid: the node outlives the shell that started it and never gets its terminal's signals.
  setsid nohup java -Xmx"$heap" "$@" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$ROOT/ops/kafka/log4j2.properties" \
    -cp "$KAFKA_JARS/*" kafka.Kafka "$props" >"$logfile" 2>&1 </dev/null 9>&- &
  echo $! >"$pidfile"
}

kafka_wait() {  # <pid file> <port> <log> <name>: until the node answers; dies if it exited or took too long
  local pid deadline
  pid="$(cat "$1" 2>/dev/null || true)"
  deadline=$((SECONDS + START_TIMEOUT))
  until port_open "$2" && grep -q 'Kafka Server started' "$3" 2>/dev/null; do
    # By pid, not by command line: until the forked shell has exec'd java, its command line is
    # this script's, and a loaded machine can take a while to get there.
    { [ -n "$pid" ] && proc_running "$pid"; } \
      || { log_tail "$3"; die "$4 exited during start-up (log: $3)."; }
    [ $SECONDS -ge $deadline ] \
      && { log_tail "$3"; die "$4 did not answer on $HOST:$2 within ${START_TIMEOUT}s (log: $3)."; }
    sleep 0.2
  done
}

write_kafka_config() {
  mkdir -p "$KAFKA_DIR/data"
  # ROUTER_KAFKA_UNIT_LISTENERS="PORT:ADVERTISED ...": one more plaintext listener per pair,
  # UNIT0, UNIT1, ..., on 127.0.0.1:PORT, advertised as 127.0.0.1:ADVERTISED (a fault proxy
  # that forwards to PORT): a client bootstrapped there is told that address for every
  # connection, so all its broker traffic runs through its own proxy (the network faults).
  local listeners="PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$CONTROLLER_PORT"
  local advertised="PLAINTEXT://$HOST:$KAFKA_PORT"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  local i=0 pair
  for pair in ${ROUTER_KAFKA_UNIT_LISTENERS:-}; do
    listeners+=",UNIT$i://$HOST:${pair%%:*}"
    advertised+=",UNIT$i://$HOST:${pair##*:}"
    protocols+=",UNIT$i:PLAINTEXT"
    i=$((i + 1))
  done
  {
    cat <<EOF
# Generated by ops/stack.sh: a single combined broker+controller node in KRaft mode.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.network.threads=2
num.io.threads=4
EOF
    kafka_common_properties 1 1 8  # internal topics sized for one node
  } >"$KAFKA_DIR/server.properties"
}

foreign_kafka_answers() {  # a broker this checkout did not start: ask it for metadata
  [ -x "$PYTHON" ] || return 0  # no client yet: an open Kafka port is the best we know
  "$PYTHON" - "$HOST:$KAFKA_PORT" <<'PY' >/dev/null 2>&1
import logging, sys
from confluent_kafka.admin import AdminClient
quiet = logging.getLogger("quiet"); quiet.addHandler(logging.NullHandler()); quiet.propagate = False
AdminClient({"bootstrap.servers": sys.argv[1], "logger": quiet}).list_topics(timeout=5)
PY
}

kafka_start() {
  need_java
  fetch_kafka_jars
  mkdir -p "$LOG_DIR" "$RUN_DIR"
  if pid_alive "$KAFKA_PID" kafka.Kafka && port_open "$KAFKA_PORT"; then
    say "kafka already running on $HOST:$KAFKA_PORT"
    return 0
  fi
  if port_open "$KAFKA_PORT"; then
    if foreign_kafka_answers; then  # e.g. another checkout's stack: use it, leave it alone
      say "kafka already answering on $HOST:$KAFKA_PORT (not started by this checkout): using it"
      return 0
    fi
    die "port $KAFKA_PORT is in use by a process that does not answer as Kafka." \
        "Stop it, or choose other ports with ROUTER_KAFKA_PORT / ROUTER_KAFKA_CONTROLLER_PORT."
  fi
  if port_open "$CONTROLLER_PORT"; then
    die "port $CONTROLLER_PORT is in use by a process this stack did not start." \
        "Stop it, or choose another port with ROUTER_KAFKA_CONTROLLER_PORT."
  fi
  write_kafka_config
  if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
    local cluster_id
    cluster_id="$(java -cp "$KAFKA_JARS/*" kafka.tools.StorageTool random-uuid 2>>"$LOG_DIR/kafka-format.log")"
    kafka_format "$KAFKA_DIR/server.properties" "$cluster_id" "$LOG_DIR/kafka-format.log"
    say "formatted $KAFKA_DIR/data (cluster id $cluster_id)"
  fi
  kafka_launch "$KAFKA_DIR/server.properties" "$KAFKA_LOG" "$KAFKA_PID" "$KAFKA_HEAP" -Xms256m
  kafka_wait "$KAFKA_PID" "$KAFKA_PORT" "$KAFKA_LOG" "the Kafka broker"
  say "kafka $KAFKA_VERSION up on $HOST:$KAFKA_PORT (KRaft, data in $KAFKA_DIR/data)"
}

kafka_stop() {  # [--kill]
  local pid
  if ! pid_alive "$KAFKA_PID" kafka.Kafka; then rm -f "$KAFKA_PID"; return 0; fi
  pid="$(cat "$KAFKA_PID")"
  if [ "${1:-}" = "--kill" ]; then kill -KILL "$pid" 2>/dev/null || true
  else kill -TERM "$pid" 2>/dev/null || true; fi
  wait_gone "$pid" kafka
  rm -f "$KAFKA_PID"
  say "kafka stopped"
}

kill_all_in() {  # <run dir>: with ROUTER_STACK_KILL=1, SIGKILL every server recorded there
  [ "${ROUTER_STACK_KILL:-}" = 1 ] || return 0
  local f pids=()
  for f in "$1"/*.pid; do
    if pid_alive "$f" 'kafka.Kafka\|redis-s'; then
      kill -CONT "$(cat "$f")" 2>/dev/null || true  # a paused one too
      kill -KILL "$(cat "$f")" 2>/dev/null && pids+=("$(cat "$f")")
    fi
  done
  for f in "${pids[@]}"; do wait_gone "$f" "process $f"; done
  [ ${#pids[@]} -eq 0 ] || say "killed ${#pids[@]} server(s) (ROUTER_STACK_KILL=1)"
}

wait_gone() {  # <pid> <name>: wait for a graceful exit, then SIGKILL
  local pid="$1" name="$2" deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      say "$name did not stop within ${STOP_TIMEOUT}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
}

# ---------------------------------------------------------------- commands

status() {
  local rc=0
  if pid_alive "$KAFKA_PID" kafka.Kafka; then say "kafka: running (pid $(cat "$KAFKA_PID")) on $HOST:$KAFKA_PORT"
  else say "kafka: stopped"; rc=1; fi
  if pid_alive "$REDIS_PID" redis-server; then say "redis: running (pid $(cat "$REDIS_PID")) on $HOST:$REDIS_PORT"
  else say "redis: stopped"; rc=1; fi
  return $rc
}

print_env() {
  echo "ROUTER_KAFKA__BOOTSTRAP_SERVERS=$HOST:$KAFKA_PORT"
  echo "ROUTER_REDIS__URL=redis://$HOST:$REDIS_PORT/0"
}

with_lock() {  # serialise concurrent callers (make, the test session, the chaos driver)
  mkdir -p "$STACK_DIR"
  exec 9>"$STACK_DIR/.lock"
  flock -w 120 9 || die "another ops/stack.sh holds $STACK_DIR/.lock for over 120s."
}

main() {
  local cmd="${1:-}"; shift || true
  mkdir -p "$LOG_DIR" "$RUN_DIR"
  case "$cmd" in
    up)
      with_lock
      local t0=$SECONDS
      need_java
      fetch_kafka_jars
      fetch_spark_jars
      want_kcat
      redis_start
      kafka_start
      say "stack up in $((SECONDS - t0))s"
      ;;
    down) with_lock; stop_units; kill_all_in "$RUN_DIR"; kafka_stop; redis_stop ;;
    status) status ;;
    env) print_env ;;
    fetch-jars) with_lock; need_java; fetch_kafka_jars; fetch_kafka_tools; fetch_spark_jars ;;
    kafka-tool) kafka_tool "$@" ;;
    console-producer) kafka_tool org.apache.kafka.tools.ConsoleProducer "$@" ;;
    kafka-start) with_lock; kafka_start ;;
    kafka-stop) with_lock; kafka_stop "${1:-}" ;;
    redis-start) with_lock; redis_start ;;
    redis-stop) with_lock; redis_stop "${1:-}" ;;
    secure-*) exec "$ROOT/ops/secure.sh" "${cmd#secure-}" "$@" ;;
    ha-*) exec "$ROOT/ops/ha.sh" "${cmd#ha-}" "$@" ;;
    sentinel-*) exec "$ROOT/ops/sentinel.sh" "${cmd#sentinel-}" "$@" ;;
    cluster-*) exec "$ROOT/ops/cluster.sh" "${cmd#cluster-}" "$@" ;;
    *) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
  esac
}

# ops/secure.sh, ops/ha.sh, ops/sentinel.sh and ops/cluster.sh source this file for its helpers (say, die, need_java, fetch_kafka_jars, ...).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
