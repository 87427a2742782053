#!/usr/bin/env bash
# Jaeger (all-in-one, v2), the tracing backend of the tracing test
# (tests/integration/tracing/test_traces_in_jaeger.py) and of `make bench`'s tracing rows.
#
#   ops/jaeger.sh ensure   print the path of a jaeger binary: the one named by JAEGER_BIN, or
#                          the one built once with Go from the Go module proxy
#                          (github.com/jaegertracing/jaeger $JAEGER_VERSION, ./cmd/jaeger) into
#                          $ROUTER_CACHE_DIR/jaeger/$JAEGER_VERSION/jaeger. The first build
#                          takes minutes (Go's module and build caches make later ones quick);
#                          its log is build.log beside the binary. A failed build is not
#                          tried again for an hour (remove failed beside it to retry now).
#   ops/jaeger.sh background
#                          start `ensure` in the background at low priority (nice) unless the
#                          binary is built or JAEGER_BIN is set, and return at once: `make test`
#                          does this first, so that the build runs beside the set-up and the
#                          suite; the tracing test's `ensure` waits for it (the build's lock).
#   ops/jaeger.sh config OTLP_HTTP_PORT QUERY_HTTP_PORT QUERY_GRPC_PORT
#                          print a configuration: OTLP/HTTP in, in-memory storage, the query
#                          API (/api/traces/<id>), all on 127.0.0.1 at the given ports, nothing
#                          else listening (ops/harness/stack/jaeger.py starts it).
#
# Exits non-zero, saying why, if there is no Go toolchain or the build fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ROUTER_CACHE_DIR:-$ROOT/.cache}"
JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
MODULE="github.com/jaegertracing/jaeger"
DEST="$CACHE_DIR/jaeger/$JAEGER_VERSION"
BIN="$DEST/jaeger"

say() { printf '[jaeger] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

build() {
  command -v go >/dev/null 2>&1 || { echo "no Go toolchain (go) to build jaeger with"; return 1; }
  # The module as the main module, so that its go.mod's replace directives apply (a
  # `go install module/cmd@version` refuses a module that has them).
  local dir
  dir="$(GOFLAGS=-mod=mod go mod download -json "$MODULE@$JAEGER_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" || return 1
  [ -n "$dir" ] && [ -d "$dir/cmd/jaeger" ] || { echo "$MODULE@$JAEGER_VERSION: no cmd/jaeger"; return 1; }
  say "building $MODULE/cmd/jaeger@$JAEGER_VERSION (once; cached in $DEST; minutes)"
  (cd "$dir" && go build -o "$BIN.tmp" ./cmd/jaeger) && mv "$BIN.tmp" "$BIN"
}

ensure() {
  if [ -n "${JAEGER_BIN:-}" ]; then
    [ -x "$JAEGER_BIN" ] || die "JAEGER_BIN=$JAEGER_BIN is not an executable"
    echo "$JAEGER_BIN"
    return 0
  fi
  mkdir -p "$DEST"
  exec 9>"$DEST/.lock"
  flock 9
  if [ ! -x "$BIN" ]; then
    if [ -n "$(find "$DEST/failed" -mmin -60 2>/dev/null)" ]; then
      die "the last build failed less than an hour ago ($(head -c 300 "$DEST/failed")); see $DEST/build.log, or remove $DEST/failed to retry"
    fi
    if ! build >"$DEST/build.log" 2>&1; then
      tail -5 "$DEST/build.log" >"$DEST/failed"
      die "could not build jaeger $JAEGER_VERSION with Go: $(tail -3 "$DEST/build.log" | tr '\n' ' ')"
    fi
    rm -f "$DEST/failed"
    say "built $BIN"
  fi
  "$BIN" --help >/dev/null 2>&1 || die "$BIN does not run"
  echo "$BIN"
}

config() {
  local otlp="$1" query="$2" grpc="$3"
  cat <<EOF
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    traces:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:$query
    grpc:
      endpoint: 127.0.0.1:$grpc
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
}

background() {
  [ -n "${JAEGER_BIN:-}" ] || [ -x "$BIN" ] && return 0
  mkdir -p "$DEST"
  say "building in the background (log $DEST/build.log); the tracing test waits for it"
  nohup nice -n 15 "$0" ensure >"$DEST/background.log" 2>&1 </dev/null &
}

case "${1:-}" in
  ensure) ensure ;;
  background) background ;;
  config) [ $# -eq 4 ] || die "usage: ops/jaeger.sh config OTLP_HTTP_PORT QUERY_HTTP_PORT QUERY_GRPC_PORT"
          config "$2" "$3" "$4" ;;
  *) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
