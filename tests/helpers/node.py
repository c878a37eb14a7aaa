"""Node.js and npm for the TypeScript reference target and the published servers: ``npm ci`` one
at a time on this machine, skipped (with what to install) where Node is missing."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT


@contextlib.contextmanager
def npm_lock() -> Iterator[None]:
    """One ``npm ci`` of the TypeScript target at a time on this machine: the test workers, and
    other test sessions, may share the checkout (the node fixture and an image rebuild both run it)."""
    with open(Path(tempfile.gettempdir()) / "mcp-chaos-invoices-ts-npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def require_node(why: str) -> tuple[str, str | None]:
    """Node.js 18+ and npm (npm may be missing where node_modules are installed); skipped otherwise."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        pytest.skip(f"{why} needs Node.js 18+ and npm (e.g. apt-get install -y nodejs npm)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 18:
        pytest.skip(f"{why} needs Node.js 18+, found {version}")
    return node, npm


def npm_ci(directory: Path, npm: str | None, why: str) -> None:
    """``npm ci`` in ``directory`` unless its node_modules match its lockfile (one at a time)."""
    installed = directory / "node_modules" / ".package-lock.json"
    lockfile = directory / "package-lock.json"
    with npm_lock():
        if installed.exists() and installed.stat().st_mtime >= lockfile.stat().st_mtime:
            return
        if npm is None:
            pytest.skip(f"{why}: node_modules are missing and there is no npm to install them")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {directory.relative_to(ROOT)} failed:\n{done.stdout}{done.stderr}")
