"""The reference target as a real child process, and whether a process still runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from harness.client.readiness import wait_ready as probe_until_ready
from harness.loopback import free_port
from tests.helpers.paths import INVOICES


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Wait for a reference target started by a test, with the harness's own readiness probe."""
    readiness = asyncio.run(probe_until_ready(url, timeout_s=timeout, alive=lambda: proc.poll() is None))
    if readiness.exited:
        raise RuntimeError(f"reference target exited with {proc.returncode}")
    if not readiness.ready:
        raise RuntimeError(f"reference target not ready: {readiness.last}")


class Target:
    """The reference invoices server as a real child process."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.db = tmp_path / f"invoices-{self.port}.db"
        full_env = {**os.environ, "PORT": str(self.port), "INVOICES_DB": str(self.db), **env}
        self.log = open(tmp_path / f"target-{self.port}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(INVOICES)], env=full_env, stdout=self.log, stderr=self.log
        )
        wait_ready(self.url, self.proc)

    def invoices(self) -> int:
        import sqlite3

        with sqlite3.connect(self.db) as db:
            return int(db.execute("SELECT COUNT(*) FROM invoices").fetchone()[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
