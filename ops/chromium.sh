#!/usr/bin/env bash
# Debian's headless Chromium and its WebDriver, for the status page's browser test
# (tests/integration/console/test_console.py).
#
#   ops/chromium.sh ensure   print the path of the chromium binary: the installed one, else
#                            Debian's `chromium` and `chromium-driver` packages installed with
#                            apt-get (apt-get update first; needs root). Also checks that
#                            chromedriver is there.
#
# Exits non-zero, saying why, if neither works (no apt, not root, or Debian's mirrors
# unreachable).
set -euo pipefail

say() { printf '[chromium] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

ensure() {
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    command -v apt-get >/dev/null || die "chromium is not installed and there is no apt-get"
    [ "$(id -u)" = 0 ] || die "chromium is not installed; run as root: apt-get install chromium chromium-driver"
    exec 9>/tmp/router-chromium.lock
    flock 9
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
      say "installing Debian's chromium and chromium-driver (apt-get)"
      apt-get update -qq >&2 || die "apt-get update failed"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver >&2 || die "apt-get install chromium chromium-driver failed"
    fi
  fi
  chromium --headless --version >/dev/null 2>&1 || chromium --version >/dev/null 2>&1 ||
    die "$(command -v chromium) does not run"
  command -v chromium
}

case "${1:-}" in
  ensure) ensure ;;
  *) sed -n '2,11p' "$0" >&2; exit 2 ;;
esac
