"""Services the harness starts for a run and that faults never touch: a PostgreSQL cluster.

The cluster listens on 127.0.0.1 at a free port, trusts local connections,
and is stopped and deleted when the run ends: what the audit needs of it is
read into the run directory first (``effects.json``), and its log stays there
(``postgres.log``). Its data directory is a fresh temporary directory rather
than part of the run directory, because the ``postgres`` user must be able to
reach it, and a run directory may sit under a path only root can enter. The
pod dies and restarts around it, as an application pod does around its database.
PostgreSQL refuses to run as root, so a root harness runs it as the ``postgres``
system user that Debian's package creates.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import signal
from pathlib import Path

from harness import leftovers, rundir
from harness.errors import TargetStartError
from harness.pods.process import start_logged, wait_up
from harness.pods.watchdog import guard
from harness.proctree import becoming


def postgres_binaries() -> Path:
    """Where initdb and postgres are; TargetStartError saying how to install them when missing."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    found = shutil.which("initdb") or (candidates[-1] if candidates else None)
    if found is None:
        raise TargetStartError(
            "services.postgres needs the PostgreSQL server (initdb, postgres): "
            "install it, e.g. apt-get install -y postgresql"
        )
    return Path(found).resolve().parent


CLUSTER_PREFIX = "mcp-chaos-postgres-"
"""Temporary clusters are named ``<prefix><harness pid>.<its start time>-<random>.<run tag>``: whose
they are, and of which run (:mod:`harness.leftovers`)."""


def remove_stale_clusters(run_id: str | None = None) -> list[Path]:
    """Delete temporary clusters whose harness is gone (SIGKILLed, and its watchdog with it); only
    ``run_id``'s when given."""
    return leftovers.remove_stale(CLUSTER_PREFIX, run_id)


class Postgres:
    """A throwaway PostgreSQL cluster for one run."""

    def __init__(self, run_dir: Path, database: str, port: int) -> None:
        remove_stale_clusters()
        self.dir = leftovers.make(CLUSTER_PREFIX, run_dir.name)
        self.database = database
        self.port = port
        self.log_path = run_dir / rundir.POSTGRES_LOG
        self._proc: asyncio.subprocess.Process | None = None
        self._user: str | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def _as_user(self) -> tuple[int, int] | None:
        """The (uid, gid) PostgreSQL runs as: ``postgres`` when the harness is root, else its own."""
        if os.geteuid() != 0:
            return None
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            raise TargetStartError(
                "PostgreSQL cannot run as root and there is no 'postgres' user "
                "(install the postgresql package, which creates it)"
            ) from None
        os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._user = "postgres"
        return entry.pw_uid, entry.pw_gid

    async def _run(self, *argv: str, user: tuple[int, int] | None) -> None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=None if user is None else becoming(*user, die_with_parent_too=False),
        )
        try:
            out, _ = await proc.communicate()
        except BaseException:  # cancelled (Ctrl-C during initdb): the child and its pipes go first, so
            # nothing of it is left to a closed event loop ("Event loop is closed" as it was collected)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        if proc.returncode != 0:
            raise TargetStartError(
                f"{Path(argv[0]).name} failed with {proc.returncode}", details=out.decode(errors="replace")
            )

    async def start(self, timeout_s: float = 30.0) -> str:
        bindir = postgres_binaries()
        who = self._as_user()
        await self._run(
            str(bindir / "initdb"),
            "-D",
            str(self.dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            user=who,
        )
        self._proc = await start_logged(
            [
                str(bindir / "postgres"),
                "-D",
                str(self.dir),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.dir}",
            ],
            self.log_path,
            user=who,
        )
        guard.directory(self._proc.pid, self.dir)  # deleted once postgres exits, should the harness die
        await wait_up(
            self._proc,
            "postgres",
            "ready",
            self._create_database,
            timeout_s=timeout_s,
            poll_s=0.1,
            tail=self._tail,
        )
        return self.url

    async def _create_database(self) -> bool:
        """Create the run's database; False while the server does not take connections yet."""
        import psycopg

        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        try:
            conn = await psycopg.AsyncConnection.connect(admin, autocommit=True, connect_timeout=2)
        except psycopg.OperationalError:
            return False
        async with conn:
            await conn.execute(f'CREATE DATABASE "{self.database}"')
        return True

    def _tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"

    async def stop(self) -> None:
        """Stop the server (if it runs) and delete the cluster."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGINT)  # "fast" shutdown: roll back, checkpoint, exit
            try:
                await asyncio.wait_for(self._proc.wait(), 20)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        guard.undirectory(self.dir)
