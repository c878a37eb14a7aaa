#!/usr/bin/env bash
# Build a local base image (Python and Node.js) from Debian packages, for machines without an image registry.
#
#   targets/images/base-image.sh [NAME]        (default NAME: mcp-chaos-base:bookworm)
#
# An image from a registry (python:3.12-slim) is not reachable here; this needs only Debian's package mirror
# (debootstrap's default, the same one apt uses) and a running Docker engine. Python in the
# image is Debian bookworm's python3 (3.11), Node.js its nodejs (18), for the TypeScript target.
# Skips the work when the image already exists with both.
set -euo pipefail
NAME="${1:-mcp-chaos-base:bookworm}"

if docker image inspect "$NAME" >/dev/null 2>&1 \
    && docker run --rm --network none "$NAME" node --version >/dev/null 2>&1; then
    echo "base image $NAME already exists"
    exit 0
fi
if ! command -v debootstrap >/dev/null; then
    echo "installing debootstrap (Debian package)"
    apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
ROOTFS="$(mktemp -d)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "debootstrap bookworm into a temporary directory (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,nodejs,ca-certificates bookworm "$ROOTFS" >/dev/null
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar -C "$ROOTFS" -c . | docker import --change 'ENV LANG=C.UTF-8' - "$NAME" >/dev/null
echo "built base image $NAME"
