"""The reference target as a real child process, and whether a process still runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.client.oauth import OAuthSettings, OAuthTokens
from harness.client.readiness import Readiness
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


REMOTE_SERVER = Path(__file__).resolve().parent / "remote_server.py"


class RemoteTarget:
    """The reference target started outside the harness (``remote_server.py``), as a deployment runs it:
    in a session of its own, on a port of its own, its store in ``state``; a ``target.url`` scenario
    kills and restarts it with :meth:`command`."""

    def __init__(self, tmp_path: Path, auth: OAuthSettings | None = None, /, **env: str) -> None:
        """``auth``: how to get a token, for a server that is a protected resource (its readiness
        probe's 401 answered as a run answers it)."""
        self.state = tmp_path / "remote"
        self.state.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.db = self.state / "invoices.db"
        self.mode = env.get("INVOICES_MODE", "atomic")
        config = {"port": self.port, "env": {"INVOICES_DB": str(self.db), **env}}
        (self.state / "server.json").write_text(json.dumps(config))
        subprocess.run(self.command("start"), check=True, capture_output=True)
        readiness = asyncio.run(self._ready(auth))
        if not readiness.ready:
            raise RuntimeError(f"reference target not ready: {readiness.last}")

    async def _ready(self, settings: OAuthSettings | None) -> Readiness:
        tokens = None if settings is None else OAuthTokens(self.url, settings)
        try:
            return await probe_until_ready(
                self.url, timeout_s=30.0, alive=lambda: self.pid is not None, auth=tokens
            )
        finally:
            if tokens is not None:
                await tokens.aclose()

    @property
    def pid(self) -> int | None:
        """The running instance's pid (None once killed)."""
        pid_file = self.state / "server.pid"
        return int(pid_file.read_text()) if pid_file.exists() else None

    def command(self, action: str) -> list[str]:
        """What starts (``start``) or kills (``kill``) it, as a scenario's command."""
        return [sys.executable, str(REMOTE_SERVER), action, str(self.state)]

    def stop(self) -> None:
        if self.pid is not None:
            subprocess.run(self.command("kill"), check=True, capture_output=True)
