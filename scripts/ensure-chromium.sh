#!/usr/bin/env bash
# Installs Debian's Chromium for the console's browser tests when it is missing.
# .ci/run runs it before the tests; on your own machine run it by hand (the
# tests only check for the browser and, when it is missing, fail with one line
# saying what to install).
# The tests drive it with playwright-core, which downloads no browser of its own.
# Needs root (CI runs as root); does nothing when /usr/bin/chromium exists.
set -euo pipefail
CHROMIUM="${CAIRN_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-chromium: $CHROMIUM is missing; run as root, or: sudo apt-get install -y chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
test -x "$CHROMIUM"
