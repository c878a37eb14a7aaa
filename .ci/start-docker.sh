#!/usr/bin/env bash
# Install (if missing) and start a Docker engine suited to these machines; prints the PID of the
# dockerd it started, or nothing when an engine was already answering.
#
# Loopback only: no bridge network, no iptables, no masquerading. Containers the harness runs
# use host networking and listen on 127.0.0.1. The engine's log goes to $DOCKERD_LOG.
set -euo pipefail
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/mcp-chaos-dockerd.log}"

if docker info >/dev/null 2>&1; then
    exit 0
fi
if ! command -v dockerd >/dev/null; then
    echo "installing Docker Engine (Debian package docker.io)" >&2
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends docker.io >/dev/null; }
fi
dockerd --bridge=none --iptables=false --ip-masq=false >"$DOCKERD_LOG" 2>&1 &
pid=$!
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "$pid"
        exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        break
    fi
    sleep 1
done
echo "dockerd did not come up; its log ($DOCKERD_LOG) ends with:" >&2
tail -n 20 "$DOCKERD_LOG" >&2 || true
kill "$pid" 2>/dev/null || true
exit 1
