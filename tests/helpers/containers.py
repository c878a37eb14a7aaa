"""The reference images on a live Docker engine, and the containers the harness labels."""

from __future__ import annotations

import contextlib
import subprocess

import pytest

from tests.helpers.node import npm_lock
from tests.helpers.paths import ROOT, TS_DIR

IMAGE = "mcp-chaos/invoices:dev"
TS_IMAGE = "mcp-chaos/invoices-ts:dev"

RUNS_CLEANUP = pytest.mark.xdist_group("docker")
"""For a test that runs ``mcp-chaos cleanup`` without ``--run``: it removes the containers of every
harness that is gone, so only beside the container tests' own, which expect theirs to be there."""


def source_hash(image: str) -> str:
    """What targets/images/build.sh labels an image with: a hash of the sources it was built from."""
    import hashlib

    if image == TS_IMAGE:
        files = [TS_DIR / "server.mjs", TS_DIR / "package-lock.json", TS_DIR / "Dockerfile"]
    else:
        target = ROOT / "targets" / image.split("/", 1)[1].split(":", 1)[0]
        files = [*sorted(target.glob("*.py")), target / "Dockerfile"]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def reference_image(name: str) -> str:
    """A reference image on a live Docker engine: built if missing, skipped where no engine runs."""
    import docker

    from harness.errors import TargetStartError
    from harness.pods.container import docker_client

    try:
        client = docker_client()  # closes what it opened when no engine answers
    except TargetStartError as exc:
        pytest.skip(exc.message)
    try:
        if client.images.get(name).labels.get("mcp-chaos.source") != source_hash(name):
            raise docker.errors.ImageNotFound("built from other sources")  # stale: build it again
    except docker.errors.ImageNotFound:
        with npm_lock():  # build.sh reinstalls the TypeScript target's node_modules (npm ci)
            subprocess.run([str(ROOT / "targets" / "images" / "build.sh")], check=True, cwd=ROOT)
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            pytest.skip(f"{name} could not be built here (targets/images/build.sh says why)")
    finally:
        client.close()
    return name


def labelled_containers() -> list[str]:
    import docker

    with contextlib.closing(docker.from_env()) as client:
        return [c.name for c in client.containers.list(all=True, filters={"label": "mcp-chaos"})]
