#!/usr/bin/env bash
# Toxiproxy, the TCP fault proxy of the network faults (ops/harness/stack/toxiproxy.py): the
# chaos run's --net-faults and tests/integration/netfaults put each unit's Redis and broker
# connections through proxies of their own, to cut one unit off, slow it or reset its links.
#
#   ops/toxiproxy.sh ensure      print the path of a toxiproxy-server binary: the one named by
#                                TOXIPROXY_BIN, or the one built once with Go from the Go module
#                                proxy (github.com/Shopify/toxiproxy/v2 $TOXIPROXY_VERSION,
#                                ./cmd/server) into $ROUTER_CACHE_DIR/toxiproxy/$TOXIPROXY_VERSION/
#                                toxiproxy-server (1-2 minutes the first time; its log is
#                                build.log beside it). A failed build is not tried again for an
#                                hour (remove failed beside it to retry now).
#   ops/toxiproxy.sh background  start `ensure` in the background at low priority unless built
#                                (or TOXIPROXY_BIN is set), and return at once (make test does);
#                                a later `ensure` waits for it (the build's lock).
#
# Each run starts its own server on a free port of 127.0.0.1 and stops it (the harness).
# Exits non-zero, saying why, if there is no Go toolchain or the build fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ROUTER_CACHE_DIR:-$ROOT/.cache}"
TOXIPROXY_VERSION="${TOXIPROXY_VERSION:-v2.5.0}"
MODULE="github.com/Shopify/toxiproxy/v2"
DEST="$CACHE_DIR/toxiproxy/$TOXIPROXY_VERSION"
BIN="$DEST/toxiproxy-server"

say() { printf '[toxiproxy] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

build() {
  command -v go >/dev/null 2>&1 || { echo "no Go toolchain (go) to build toxiproxy with"; return 1; }
  say "building $MODULE/cmd/server@$TOXIPROXY_VERSION (once; cached in $DEST)"
  local tmp
  tmp="$(mktemp -d "$DEST/gobin.XXXXXX")"
  GOBIN="$tmp" GOFLAGS=-mod=mod go install "$MODULE/cmd/server@$TOXIPROXY_VERSION" \
    && mv "$tmp/server" "$BIN" && rm -rf "$tmp"
}

ensure() {
  if [ -n "${TOXIPROXY_BIN:-}" ]; then
    [ -x "$TOXIPROXY_BIN" ] || die "TOXIPROXY_BIN=$TOXIPROXY_BIN is not an executable"
    echo "$TOXIPROXY_BIN"
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
      die "could not build toxiproxy $TOXIPROXY_VERSION with Go: $(tail -3 "$DEST/build.log" | tr '\n' ' ')"
    fi
    rm -f "$DEST/failed"
    say "built $BIN"
  fi
  "$BIN" -version >/dev/null 2>&1 || die "$BIN does not run"
  echo "$BIN"
}

background() {
  [ -n "${TOXIPROXY_BIN:-}" ] || [ -x "$BIN" ] && return 0
  mkdir -p "$DEST"
  say "building in the background (log $DEST/build.log); the network-fault tests wait for it"
  nohup nice -n 15 "$0" ensure >"$DEST/background.log" 2>&1 </dev/null &
}

case "${1:-}" in
  ensure) ensure ;;
  background) background ;;
  *) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
