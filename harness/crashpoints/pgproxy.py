"""The PostgreSQL proxy: the target's database connections pass it, and each statement and commit is a point.

``{postgres_url}`` names this proxy, not the harness's cluster. Where the run's plan
only observes (every run without crash points or an order), the relay is a process
of its own (:mod:`harness.crashpoints.pgrelay`) that tells each commit over a pipe
and never waits, so that framing every message costs the driver nothing
(:class:`ObservingRelay`, decision 0081). Where the plan decides (it holds or kills
at points), :class:`PostgresProxy` relays in the harness's process, as below: a held
statement or commit waits on the router's decision where it is.

:class:`PostgresProxy` relays every byte both ways, framing each direction
(``pgwire``) to follow the connection's transactions, and is a hold site of the run's decision router
(:mod:`harness.crashpoints.router`) at two moments:

* ``db_statement``: a message that makes the server run a statement (a Query, an
  Execute) is about to be forwarded. Held, the database has not seen it: another
  attempt's statements can run first, and the statement goes on when released.
  (Reported only to plans that ask for statements: a crash there leaves nothing
  a crash at the commit before it does not.)
* ``db_commit``: a transaction has committed (any transaction that ran a
  statement, labelled with whether it wrote). Held, the reply stops before the
  message that tells the commit (a ``COMMIT`` tag, or the ReadyForQuery that ends
  an implicit transaction): the database has committed, the server waits.

A decision to kill leaves what was held here: nothing after it reaches the other
side, and the connection's generation is cut, so nothing the dying pod sends later
passes either. The harness's own connections (the final read, start-up checks) go
to the cluster directly and are never points.

What each connection asked since its last commit (Query and Bind bodies, bounded)
goes with the commit as its payload: where several attempts are open at once, the
marker a statement carried tells the router whose commit it is.

SSL and GSS encryption requests are answered ``N`` here: the proxy must read
the messages, and on loopback the cluster refuses TLS anyway, so clients with
``sslmode=prefer`` (libpq's default) go on in clear. A stream the framer cannot
read is relayed untouched from there on, without points.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from harness.crashpoints.decisions import Connection, Decision, Reached, Site
from harness.crashpoints.pgwire import (
    ENCRYPTION_REQUESTS,
    REFUSED,
    Commit,
    Framer,
    Message,
    Run,
    Transactions,
    Wrote,
)
from harness.crashpoints.points import PointKind
from harness.crashpoints.router import Router
from harness.errors import TargetStartError
from harness.loopback import LoopbackServer
from harness.proctree import die_with_parent
from harness.workload import INTENT_SHAPE

_READ = 65536
ASKED_LIMIT = 16384
"""Bytes of what a connection asked since its last commit kept to find markers in."""
START_TIMEOUT_S = 30.0
"""How long the relay may take to listen."""
STOP_TIMEOUT_S = 5.0
DRAIN_EVERY_S = 0.02
"""The relay's pipe is read when an attempt ends (what it reached is there by then) and at least this
often besides, so that it never fills while no attempt ends: the relay would wait."""


def postgres_proxy(
    upstream_port: int, router: Router, port: int = 0, spool: Path | None = None
) -> PostgresProxy | ObservingRelay:
    """The proxy a run's plan needs: one that holds where it decides, a relay that only tells where not
    (its reports to ``spool`` where the router places its points after the run)."""
    if router.plan.decides:
        return PostgresProxy(upstream_port, router, port)
    return ObservingRelay(upstream_port, router, port, spool)


class PostgresProxy(LoopbackServer):
    """Relays the target's PostgreSQL connections to the cluster at ``upstream_port``."""

    def __init__(self, upstream_port: int, router: Router, port: int = 0) -> None:
        super().__init__(port)
        self.upstream_port = upstream_port
        self.router = router

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self.router.connection()
        if connection is None:
            return  # the fence: only the pod killed at a point can be connecting now
        framer = Framer(startup=True)
        first: list[Message] = []
        while framer.startup:  # encryption requests are answered here; the rest waits for the server
            data = await reader.read(_READ)
            if not data:
                return
            for message in framer.feed(data):
                if message.type == b"" and message.code in ENCRYPTION_REQUESTS:
                    writer.write(REFUSED)
                else:
                    first.append(message)
            if framer.broken:
                return  # not a PostgreSQL client
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            link = _Link(self.router, connection)
            for message in first:
                link.transactions.client(message)
            up_writer.write(b"".join(m.raw for m in first))  # a partial message stays in the framer
            sides = [
                asyncio.ensure_future(link.from_client(reader, up_writer, framer)),
                asyncio.ensure_future(link.from_server(up_reader, writer)),
            ]
            try:
                await asyncio.wait(sides, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for side in sides:
                    side.cancel()
                await asyncio.gather(*sides, return_exceptions=True)
        finally:
            up_writer.transport.abort()


class _Link:
    """One client connection relayed to the cluster: its transactions and its points."""

    def __init__(self, router: Router, connection: Connection) -> None:
        self.router = router
        self.connection = connection
        self.transactions = Transactions()
        self.asked = bytearray()
        """Query and Bind bodies since the last commit (bounded): the markers the commit carries."""
        self.statements = PointKind.DB_STATEMENT in router.plan.kinds

    async def from_client(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, framer: Framer
    ) -> None:
        router, connection = self.router, self.connection
        while data := await reader.read(_READ):
            if router.cut(connection):
                continue
            if framer.broken:
                up_writer.write(data)
            else:
                out = bytearray()
                for message in framer.feed(data):
                    run = self.transactions.client(message)
                    if message.type in (b"Q", b"B") and len(self.asked) < ASKED_LIMIT:
                        self.asked += message.body[: ASKED_LIMIT - len(self.asked)]
                    if run is not None and self.statements:
                        up_writer.write(out)  # what came before it goes on; the statement waits
                        out.clear()
                        if await self._statement(run) is not Decision.PASS:
                            break  # the pod is dying: nothing more of it reaches the database
                    out += message.raw
                else:
                    out += framer.spill()
                up_writer.write(out)
            with contextlib.suppress(ConnectionError):
                await up_writer.drain()

    async def _statement(self, run: Run) -> Decision:
        detail = {"statements": [run.statement]} if run.statement is not None else {}
        point = Reached(
            Site.POSTGRES,
            PointKind.DB_STATEMENT,
            connection=self.connection,
            label=run.label,
            detail=detail,
            payload=bytes(self.asked),
        )
        return await self.router.reached(point)

    async def from_server(self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        router, connection = self.router, self.connection
        framer = Framer()
        while data := await up_reader.read(_READ):
            if router.cut(connection):
                continue
            if framer.broken:
                writer.write(data)
                continue
            relayed = bytearray()
            for message in framer.feed(data):
                commit = self.transactions.server(message)
                if commit is not None and await self._commit(commit) is not Decision.PASS:
                    break  # killed: this message and everything after it stay here; the pod is dying
                if message.type == b"Z" and message.body[:1] == b"I":
                    router.idle(connection)  # out of any transaction: free to serve another call
                relayed += message.raw
            relayed += framer.spill()
            writer.write(relayed)
            await writer.drain()

    async def _commit(self, commit: Commit) -> Decision:
        asked, self.asked = bytes(self.asked), bytearray()
        return await self.router.reached(commit_point(commit, self.connection, asked))


def commit_point(commit: Commit, connection: Connection | None, asked: bytes = b"") -> Reached:
    """A committed transaction as the point it is: labelled by what it wrote, with its statements."""
    return Reached(
        Site.POSTGRES,
        PointKind.DB_COMMIT,
        connection=connection,
        label=commit.label,
        detail={
            "statements": [str(s) for s in commit.statements],
            "wrote": commit.wrote.value,
            "autocommit": commit.autocommit,
        },
        payload=asked,
        reads=commit.wrote is Wrote.NO,
    )


class RelayReports:
    """The relay's reports (one JSON object a line) told to a router: as the run reads them, or after it
    from their spool (:mod:`harness.crashpoints.placement`)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._connections: dict[int, Connection] = {}
        """The relay's connection ids -> the router's."""

    def tell(self, report: dict[str, Any]) -> None:
        """One report: a commit (a point, and its transaction's end), a connection idle or gone."""
        if "point" in report:
            connection = self._connection(report["conn"])
            self.router.seen(
                Reached(
                    Site.POSTGRES,
                    PointKind.DB_COMMIT,
                    connection=connection,
                    label=report["label"],
                    payload=report.get("markers", "").encode(),
                    reads=report.get("reads", False),
                    at=report["at"],
                )
            )
            if "idle" in report:
                self.router.idle(connection)  # the commit ended its transaction
        elif "idle" in report:
            self.router.idle(self._connection(report["idle"]))
        elif "gone" in report:
            gone = self._connections.pop(report["gone"], None)
            if gone is not None:
                self.router.idle(gone)

    def _connection(self, conn: int) -> Connection:
        """The router's connection for the relay's ``conn``."""
        connection = self._connections.get(conn)
        if connection is None:
            connection = self._connections[conn] = self.router.new_connection()
        return connection


class ObservingRelay:
    """The relay process in front of the cluster at ``upstream_port``, its commits told to ``router``
    (a :class:`harness.crashpoints.router.Feed`): for a plan that only observes. Where the router places
    its points after the run (:meth:`Router.defer`), the reports are copied unread to ``spool`` instead:
    the driver's process then spends nothing a commit (decision 0092)."""

    def __init__(self, upstream_port: int, router: Router, port: int = 0, spool: Path | None = None) -> None:
        self.upstream_port = upstream_port
        self.router = router
        self.port = port
        self.spool = spool
        """Where the reports go, unread, in a run whose points are placed after it."""
        self.spooled = False
        """Whether this relay's reports went to :attr:`spool` (the router deferred its points)."""
        self._spooling: BinaryIO | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._out: int | None = None
        """The read end of the relay's stdout."""
        self._rest = b""
        self._ready: asyncio.Future[int] | None = None
        self._reports = RelayReports(router)
        self._timer: asyncio.TimerHandle | None = None
        router.follow(self)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    async def start(self, port: int | None = None) -> int:
        """Start the relay and wait until it listens (on ``port``, else the one given at construction, 0:
        any); returns the port. TargetStartError when it does not."""
        if port is not None:
            self.port = port
        out, into = os.pipe()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "harness.crashpoints.pgrelay",
                "--port",
                str(self.port),
                "--upstream-port",
                str(self.upstream_port),
                "--markers",
                INTENT_SHAPE.pattern.decode(),
                stdin=asyncio.subprocess.PIPE,
                stdout=into,
                preexec_fn=die_with_parent,
            )
        except BaseException:
            os.close(out)
            raise
        finally:
            os.close(into)
        self._out = out
        os.set_blocking(out, False)
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        loop.add_reader(out, self.drain)
        try:
            self.port = await asyncio.wait_for(asyncio.shield(self._ready), START_TIMEOUT_S)
        except TimeoutError:
            raise TargetStartError(
                f"the PostgreSQL relay did not listen in {START_TIMEOUT_S:g} s "
                "(python -m harness.crashpoints.pgrelay)"
            ) from None
        finally:
            if self._out is not None:
                loop.remove_reader(out)
        if self.router.deferred and self.spool is not None:
            self._spooling = open(self.spool, "ab")  # noqa: SIM115 (closed in close())
            self._spooling.write(self._rest)  # a line begun after "ready" ends in the spool
            self._rest, self.spooled = b"", True
        self._every()  # nothing waits for the harness: read in batches, not at every report
        return self.port

    def _every(self) -> None:
        self.drain()
        if self._out is not None:
            self._timer = asyncio.get_running_loop().call_later(DRAIN_EVERY_S, self._every)

    async def close(self) -> None:
        """Stop the relay (its connections end with it: it exits when its stdin ends) and wait for it; a
        spool gets every report the relay wrote before it exited."""
        if self._spooling is None:
            self._stop_reading()
        proc = self._proc
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._spooling is not None:
            self.drain()  # to the end of the pipe: the relay has exited
            self._stop_reading()
            self._spooling.close()
            self._spooling = None

    def drain(self) -> None:
        """Take in every report the relay has written (at least every :data:`DRAIN_EVERY_S`, and before an
        attempt ends: the commits it served were written before the target heard of them); copy it unread
        where the reports are spooled (placed after the run: no attempt's end waits for them)."""
        out = self._out
        while out is not None:
            try:
                chunk = os.read(out, _READ)
            except BlockingIOError:
                return
            if not chunk:
                self._ended()
                return
            if self._spooling is not None:
                self._spooling.write(chunk)
            else:
                *lines, self._rest = (self._rest + chunk).split(b"\n")
                for line in lines:
                    self._report(orjson.loads(line))
            if len(chunk) < _READ:
                return  # all there was

    def _report(self, report: dict[str, Any]) -> None:
        if "ready" in report:
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(int(report["ready"]))
        else:
            self._reports.tell(report)

    def _ended(self) -> None:
        """The relay closed its stdout: it exited."""
        self._stop_reading()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(
                TargetStartError(
                    "the PostgreSQL relay exited before it listened (python -m harness.crashpoints.pgrelay)"
                )
            )

    def _stop_reading(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        out, self._out = self._out, None
        if out is not None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(out)
            os.close(out)
