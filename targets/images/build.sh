#!/usr/bin/env bash
# Build the reference targets' images without an image registry.
#
#   targets/images/build.sh [BASE]     (default BASE: mcp-chaos-base:bookworm, made by base-image.sh)
#
# Wheels for the image's own Python version and platform are downloaded on the host (where the
# package index is reachable) into each build context; the Dockerfile installs them with
# `pip install --no-index`, so `docker build` runs with no network at all. The package versions
# are the ones installed in the harness's environment, so images and tests agree.
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE="${1:-mcp-chaos-base:bookworm}"
PY="${PYTHON:-.venv/bin/python}"
TAG="${TAG:-dev}"

if [ "$BASE" = "mcp-chaos-base:bookworm" ]; then
    targets/images/base-image.sh "$BASE"
fi
PYVER="$(docker run --rm --network none "$BASE" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
ARCH="$(uname -m)"
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
REQUIREMENTS="mcp==$(version mcp)
uvicorn==$(version uvicorn)
psycopg[binary]==$(version psycopg)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/wheels"
printf '%s\n' "$REQUIREMENTS" > "$WORK/wheels/requirements.txt"
echo "downloading wheels for Python $PYVER ($ARCH)"
"$PY" -m pip download --quiet --only-binary=:all: --python-version "$PYVER" \
    --platform "manylinux_2_17_$ARCH" --platform "manylinux2014_$ARCH" --platform "manylinux_2_28_$ARCH" \
    -d "$WORK/wheels" -r "$WORK/wheels/requirements.txt"

for target in invoices noop; do
    ctx="$WORK/$target"
    mkdir -p "$ctx"
    cp -r "$WORK/wheels" "$ctx/wheels"
    cp targets/"$target"/*.py "targets/$target/Dockerfile" "$ctx/"
    # What the image was built from, so tests can tell a stale image (tests/conftest.py: source_hash).
    source="$(cat targets/"$target"/*.py targets/"$target"/Dockerfile | sha256sum | cut -c1-16)"
    echo "building mcp-chaos/$target:$TAG on $BASE"
    docker build --quiet --network none --build-arg BASE="$BASE" --label mcp-chaos.image=1 \
        --label mcp-chaos.source="$source" -t "mcp-chaos/$target:$TAG" "$ctx" >/dev/null
done
echo "built mcp-chaos/invoices:$TAG and mcp-chaos/noop:$TAG"

# The TypeScript target: its node_modules come from the lockfile, installed on the host (pure
# JavaScript, so they run in the image as they are), and Node from the base image.
if command -v npm >/dev/null; then
    ctx="$WORK/invoices-ts"
    mkdir -p "$ctx"
    (cd targets/invoices-ts && npm ci --no-audit --no-fund --ignore-scripts --silent)
    cp -r targets/invoices-ts/node_modules targets/invoices-ts/package.json \
        targets/invoices-ts/package-lock.json targets/invoices-ts/server.mjs targets/invoices-ts/Dockerfile "$ctx/"
    # The local base has Node.js; a registry's Python base does not: then the SDK's usual Node base.
    TS_BASE="$BASE"
    if [ "$BASE" != "mcp-chaos-base:bookworm" ]; then TS_BASE="node:20-bookworm-slim"; fi
    echo "building mcp-chaos/invoices-ts:$TAG on $TS_BASE"
    source="$(cat targets/invoices-ts/server.mjs targets/invoices-ts/package-lock.json \
        targets/invoices-ts/Dockerfile | sha256sum | cut -c1-16)"
    docker build --quiet --network none --build-arg BASE="$TS_BASE" --label mcp-chaos.image=1 \
        --label mcp-chaos.source="$source" -t "mcp-chaos/invoices-ts:$TAG" "$ctx" >/dev/null
    echo "built mcp-chaos/invoices-ts:$TAG"
else
    echo "no npm here: mcp-chaos/invoices-ts:$TAG not built (it needs Node.js and npm on the host)" >&2
fi
