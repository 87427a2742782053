#!/usr/bin/env bash
# Debian's Prometheus server, for the metrics test (tests/integration/metrics/test_prometheus.py)
# and for looking at a local pipeline.
#
#   ops/prometheus.sh ensure   print the path of a prometheus binary: the one on PATH if
#                              installed, else Debian's `prometheus` package unpacked into
#                              $ROUTER_CACHE_DIR/prometheus (apt-get download + dpkg-deb -x,
#                              after apt-get update if the package lists do not have it yet).
#                              Nothing is installed system-wide: installing the package
#                              would also start its service on :9090.
#
# Exits non-zero, saying why, if neither works (no apt, or Debian's mirrors unreachable).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${ROUTER_CACHE_DIR:-$ROOT/.cache}"
DEST="$CACHE_DIR/prometheus"
BIN="$DEST/usr/bin/prometheus"

say() { printf '[prometheus] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

download() {  # Debian's package into $DEST/deb
  mkdir -p "$DEST/deb"
  ( cd "$DEST/deb" && apt-get download prometheus ) >&2 2>/dev/null && return 0
  [ "$(id -u)" = 0 ] || return 1
  say "package lists do not have prometheus: apt-get update"
  apt-get update -qq >&2 || return 1
  ( cd "$DEST/deb" && apt-get download prometheus ) >&2 2>/dev/null
}

ensure() {
  if command -v prometheus >/dev/null 2>&1; then
    command -v prometheus
    return 0
  fi
  if [ ! -x "$BIN" ]; then
    command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
      die "prometheus is not installed and there is no apt-get/dpkg-deb to fetch Debian's package"
    mkdir -p "$DEST"
    exec 9>"$DEST/.lock"
    flock 9
    if [ ! -x "$BIN" ]; then
      rm -rf "$DEST/deb"
      download || die "could not download Debian's prometheus package (apt-get download prometheus)"
      dpkg-deb -x "$DEST"/deb/prometheus_*.deb "$DEST" || die "could not unpack the package"
      say "unpacked $(basename "$DEST"/deb/prometheus_*.deb) into $DEST"
      rm -rf "$DEST/deb"
    fi
  fi
  "$BIN" --version >/dev/null 2>&1 || die "$BIN does not run"
  echo "$BIN"
}

case "${1:-}" in
  ensure) ensure ;;
  *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
