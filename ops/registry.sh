#!/usr/bin/env bash
# A Confluent-compatible Schema Registry without Docker: Apicurio Registry (its ccompat API,
# /apis/ccompat/v7), built once from its Maven Central jars by ops/maven/registry/pom.xml
# and cached in .cache/registry/, like the broker jars. Storage: H2 in a file under the state
# folder, so a restarted registry keeps its schemas (`reset` empties it).
#
#   ops/registry.sh fetch      build the runnable registry if it is not cached (Maven, once)
#   ops/registry.sh start      start it on 127.0.0.1:$ROUTER_REGISTRY_PORT, wait until /subjects answers
#   ops/registry.sh stop [--kill]   stop it (SIGTERM, or SIGKILL with --kill); nothing of ours left
#   ops/registry.sh status     running or not, where
#   ops/registry.sh env        its address, as ROUTER_REGISTRY__URL
#   ops/registry.sh reset      stop it and delete its stored schemas
#
# Settings (environment): ROUTER_REGISTRY_PORT (8081), ROUTER_REGISTRY_DIR (.stack/registry:
# pid, log, database), ROUTER_CACHE_DIR (.cache), ROUTER_REGISTRY_HEAP (256m),
# ROUTER_MAVEN_SETTINGS (ops/maven/settings.xml), ROUTER_REGISTRY_START_TIMEOUT (90 s).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ROUTER_CACHE_DIR:-$ROOT/.cache}"
STATE="${ROUTER_REGISTRY_DIR:-$ROOT/.stack/registry}"
PORT="${ROUTER_REGISTRY_PORT:-8081}"
HEAP="${ROUTER_REGISTRY_HEAP:-256m}"
MAVEN_SETTINGS="${ROUTER_MAVEN_SETTINGS:-$ROOT/ops/maven/settings.xml}"
START_TIMEOUT="${ROUTER_REGISTRY_START_TIMEOUT:-90}"
HOST=127.0.0.1
POM_DIR="$ROOT/ops/maven/registry"
VERSION="$(sed -n 's#.*<apicurio.version>\(.*\)</apicurio.version>.*#\1#p' "$POM_DIR/pom.xml")"
DIST="$CACHE_DIR/registry/apicurio-$VERSION"
PIDFILE="$STATE/registry.pid"
LOG="$STATE/registry.log"
URL="http://$HOST:$PORT/apis/ccompat/v7"

say() { printf '[registry] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

running() {  # the recorded process is alive and is our registry
  local pid
  [ -f "$PIDFILE" ] || return 1
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "-runner.jar"
}

answers() { curl -sf -m 2 "$URL/subjects" >/dev/null 2>&1; }

fetch() {
  [ -f "$DIST/.complete" ] && return 0
  command -v java >/dev/null 2>&1 || die "Java 17+ is needed to build and run the registry ('java' is not on PATH)."
  command -v mvn >/dev/null 2>&1 || die "Maven ('mvn') is needed once, to build the registry from Maven Central."
  mkdir -p "$CACHE_DIR/registry"
  exec 8>"$CACHE_DIR/registry/.lock"
  flock -w 900 8 || die "another build holds $CACHE_DIR/registry/.lock"
  [ -f "$DIST/.complete" ] && return 0
  local work="$CACHE_DIR/registry/build" log="$CACHE_DIR/registry/build.log"
  say "building Apicurio Registry $VERSION from Maven Central (once; cached in $DIST; log $log)"
  rm -rf "$work" "$DIST"
  mkdir -p "$work"
  cp -r "$POM_DIR/pom.xml" "$POM_DIR/src" "$work/"
  if ! mvn -B -s "$MAVEN_SETTINGS" -f "$work/pom.xml" package -DskipTests >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "Maven could not build the registry (log: $log)."
  fi
  mkdir -p "$DIST"
  mv "$work"/target/*-runner.jar "$DIST/registry-runner.jar"
  mv "$work/target/lib" "$DIST/lib"
  rm -rf "$work"
  touch "$DIST/.complete"
}

start() {
  mkdir -p "$STATE"
  if running; then say "already running (pid $(cat "$PIDFILE")) at $URL"; return 0; fi
  answers && die "something else answers at $URL: set ROUTER_REGISTRY_PORT to a free port"
  fetch
  say "starting on $HOST:$PORT (log $LOG)"
  # The registry's own settings (Apicurio reads them from the environment): storage in a file.
  REGISTRY_DATASOURCE_URL="jdbc:h2:file:$STATE/db/registry;DB_CLOSE_ON_EXIT=FALSE" \
    setsid java "-Xmx$HEAP" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Dquarkus.http.host="$HOST" -Dquarkus.http.port="$PORT" \
    -jar "$DIST/registry-runner.jar" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local deadline=$((SECONDS + START_TIMEOUT))
  until answers; do
    running || { tail -n 30 "$LOG" >&2; die "the registry exited while starting (log $LOG)"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$LOG" >&2; stop --kill; die "no answer at $URL within ${START_TIMEOUT}s"; }
    sleep 0.2
  done
  say "running (pid $(cat "$PIDFILE")) at $URL"
}

stop() {  # [--kill]
  running || { rm -f "$PIDFILE"; return 0; }
  local pid deadline sig=TERM
  [ "${1:-}" = --kill ] && sig=KILL
  pid="$(cat "$PIDFILE")"
  kill "-$sig" "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then kill -KILL "$pid" 2>/dev/null || true; fi
    sleep 0.1
  done
  rm -f "$PIDFILE"
  say "stopped"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop "${2:-}" ;;
  status) if running; then say "running (pid $(cat "$PIDFILE")) at $URL"; else say "not running"; exit 3; fi ;;
  env) echo "ROUTER_REGISTRY__URL=http://$HOST:$PORT/apis/ccompat/v7" ;;
  reset) stop; rm -rf "$STATE/db"; say "stored schemas deleted" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
