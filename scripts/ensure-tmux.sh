#!/usr/bin/env bash
# Installs Debian's tmux for the terminal test of `cairn chat`
# (test/cli/chat-terminal.process.test.ts) when it is missing. The test
# suite's global setup runs it; needs root; does nothing when tmux is on PATH.
set -euo pipefail
if command -v tmux >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure-tmux: tmux is missing; run as root, or: sudo apt-get install -y tmux" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq tmux >/dev/null
command -v tmux >/dev/null
