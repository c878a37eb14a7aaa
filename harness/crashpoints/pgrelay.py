"""The PostgreSQL relay: a process of its own between the target and the harness's cluster, observing.

In a run whose plan only observes (every run without crash points or an order),
every byte of the target's database traffic passes here, framed both ways
(``pgwire``) to follow each connection's transactions: in the harness's own
process that made the driver's CPU per call 2.5 to 2.8 times what it is without
it (a dozen messages per call, each framed and written; decision 0081). The relay
tells each commit to the harness (:class:`harness.crashpoints.pgproxy.ObservingRelay`,
which hands it to the run's decision router) over its stdout, one JSON line each,
stamped with ``time.monotonic()`` of when the client sent what it commits (the
``COMMIT``, or the statement of an implicit transaction): CLOCK_MONOTONIC is one
clock for every process of the machine, so the router places a commit by the
attempt at work when it was asked for, not when the harness read it, nor when its
reply came (a pod killed meanwhile has had its attempt end already). Nothing here
waits for the harness: a plan that holds or kills has the in-process proxy
(:class:`harness.crashpoints.pgproxy.PostgresProxy`).

A commit is written to the pipe before the message that tells the client of it
(a ``COMMIT`` tag, or the ReadyForQuery that ends an implicit transaction) is
relayed: so an attempt whose answer the harness has seen has its commits in the
pipe already. A client that leaves (a pod killed) may have sent a commit whose
reply has not come: the cluster still makes it, so the relay only half-closes
its side (the cluster reads to the end, answers, and closes) and tells the commit
it then reads, for at most :data:`ORPHAN_S`.
The lines (all from the relay)::

    {"ready": PORT}                              listening on 127.0.0.1:PORT
    {"point": "db_commit", "conn": CONN, "at": T, "label": L, "reads": B, "markers": M, "idle": B}
                                                 a commit ("idle": its connection's transaction ended)
    {"idle": CONN}                               its transaction ended after a commit told apart
    {"gone": CONN}                               it closed (and the cluster's side with it)

``markers`` are the intents' markers and keys (``--markers``: their pattern) in what the
connection asked since its last commit (Query and Bind bodies, bounded): where
several attempts are open at once, they tell the router whose commit it is.

The relay exits when its stdin ends (the harness is gone or closed it); the
harness also starts it with a parent-death signal.

SSL and GSS encryption requests are answered ``N`` here: the relay must read the
messages, and on loopback the cluster refuses TLS anyway, so clients with
``sslmode=prefer`` (libpq's default) go on in clear. A stream the framer cannot
read is relayed untouched from there on, without points.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import sys
import time
from typing import Any, cast

import orjson

from harness import eventloop
from harness.crashpoints.pgwire import (
    ENCRYPTION_REQUESTS,
    REFUSED,
    Commit,
    Framer,
    Message,
    Transactions,
    Wrote,
)

_READ = 65536
ASKED_LIMIT = 16384
"""Bytes of what a connection asked since its last commit kept to find markers in."""
ORPHAN_S = 5.0
"""How long the cluster's side of a connection whose client left is read for the replies still owed."""


class Reports:
    """The relay's stdout: reports written in order, each before the work it tells of goes on."""

    def __init__(self, out: int) -> None:
        self._out: int | None = out

    def send(self, reports: list[dict[str, Any]]) -> None:
        """Write ``reports`` now (blocking while the harness is that far behind: it paces the relay).
        Once the harness has stopped reading (it is closing the relay, and the target's connections
        end meanwhile), nothing is written: there is no one to tell, and no traceback to print."""
        if self._out is None:
            return
        data = memoryview(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in reports))
        try:
            while data:
                data = data[os.write(self._out, data) :]
        except BrokenPipeError:
            self._out = None


class Relay:
    """Listens for the target's PostgreSQL connections and relays each to the cluster at
    ``upstream_port``, telling commits. Protocols, not streams: each read is written on as it came, in the
    callback that got it (a stream's read, write and drain per chunk cost the relay half its CPU)."""

    def __init__(
        self, upstream_port: int, reports: Reports, markers: re.Pattern[bytes], port: int = 0
    ) -> None:
        self.upstream_port = upstream_port
        self.reports = reports
        self.markers = markers
        self.port = port
        self._conns = itertools.count(1)
        self._server: asyncio.Server | None = None
        self.connecting: set[asyncio.Task[None]] = set()
        """Connections to the cluster being opened (held here: the loop keeps only weak references)."""

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Client(self, next(self._conns)), "127.0.0.1", self.port
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


class _Side(asyncio.Protocol):
    """One end of a relayed connection; the other end's reading pauses while this one's writes back up."""

    transport: asyncio.Transport | None = None
    peer: _Side | None = None

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Side):
    """The target's connection: its start-up answered or held until the cluster's connection is open,
    then each read followed (transactions, markers) and written to the cluster as it came."""

    def __init__(self, relay: Relay, conn: int) -> None:
        self.relay = relay
        self.conn = conn
        self.framer = Framer(startup=True)
        self.first: list[Message] = []
        self.serving = False
        """A commit of it was told and its transaction has not ended since: the router ties it to an
        attempt until it is told the connection is idle."""
        self.transactions = Transactions()
        self.asked = bytearray()
        """Query and Bind bodies since the last commit (bounded): the markers the commit carries."""
        self.waiting = bytearray()
        """What came while the cluster's connection was opening."""
        self.sent_at = 0.0
        """When the client last sent (``time.monotonic()``): when it asked for the commit its reply tells."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass

    def data_received(self, data: bytes) -> None:
        self.sent_at = time.monotonic()
        server = self.peer
        if server is None:
            if self.framer.startup:
                self._startup(data)
            else:
                self.waiting += data
            return
        self._follow(data)
        if server.transport is not None:
            server.transport.write(data)

    def _startup(self, data: bytes) -> None:
        """Encryption requests are answered here; the rest waits for the cluster's connection."""
        assert self.transport is not None
        for message in self.framer.feed(data):
            if message.type == b"" and message.code in ENCRYPTION_REQUESTS:
                self.transport.write(REFUSED)
            else:
                self.first.append(message)
        if self.framer.broken:
            self.transport.close()  # not a PostgreSQL client
        elif not self.framer.startup:
            self.waiting += self.framer.rest()  # a partial message after the start-up: followed later
            self.transport.pause_reading()
            task = asyncio.get_running_loop().create_task(self._connect())
            self.relay.connecting.add(task)
            task.add_done_callback(self.relay.connecting.discard)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, server = await loop.create_connection(
                lambda: _Server(self), "127.0.0.1", self.relay.upstream_port
            )
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is None:  # the client left meanwhile
            if server.transport is not None:
                server.transport.close()
            return
        self.peer, server.peer = server, self
        for message in self.first:
            self.transactions.client(message)
        assert server.transport is not None
        server.transport.write(b"".join(m.raw for m in self.first))
        waiting, self.waiting = bytes(self.waiting), bytearray()
        if waiting:
            self.data_received(waiting)
        self.transport.resume_reading()

    def _follow(self, data: bytes) -> None:
        """The client's messages, for its transactions and the markers its next commit carries."""
        if self.framer.broken:
            return
        for message in self.framer.feed(data):
            self.transactions.client(message)
            if message.type in (b"Q", b"B") and len(self.asked) < ASKED_LIMIT:
                self.asked += message.body[: ASKED_LIMIT - len(self.asked)]

    def connection_lost(self, exc: Exception | None) -> None:
        """The client left: what it sent last may be a commit the cluster makes anyway. The cluster's side
        is half-closed, not closed, so its replies are still read and told (:class:`_Server`)."""
        self.transport = None
        server = self.peer.transport if self.peer is not None else None
        if server is None or self.framer.broken or not server.can_write_eof():
            if server is not None:
                server.close()
            self.relay.reports.send([{"gone": self.conn}])
            return
        server.write_eof()
        asyncio.get_running_loop().call_later(ORPHAN_S, server.close)

    def told(self, data: bytes, framer: Framer) -> None:
        """The cluster's messages: each commit told before the client hears of it."""
        reports: list[dict[str, Any]] = []
        for message in framer.feed(data):
            commit = self.transactions.server(message)
            if commit is not None:
                reports.append(self._commit(commit))
            if message.type == b"Z" and message.body[:1] == b"I" and self.serving:
                self._idle(reports)
        if reports:
            self.relay.reports.send(reports)

    def _commit(self, commit: Commit) -> dict[str, Any]:
        asked, self.asked = bytes(self.asked), bytearray()
        self.serving = True
        report: dict[str, Any] = {
            "point": "db_commit",
            "conn": self.conn,
            "at": self.sent_at,
            "label": commit.label,
        }
        if commit.wrote is Wrote.NO:
            report["reads"] = True
        markers = self.relay.markers.findall(asked)
        if markers:
            report["markers"] = b" ".join(markers).decode("ascii", "replace")
        return report

    def _idle(self, reports: list[dict[str, Any]]) -> None:
        """Out of any transaction after a commit: free to serve another call (told with the commit that
        ended it where it is in the same read, as most are)."""
        self.serving = False
        if reports and reports[-1].get("conn") == self.conn:
            reports[-1]["idle"] = True
        else:
            reports.append({"idle": self.conn})


class _Server(_Side):
    """The cluster's connection for one client: each read told, then written to the client as it came."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.framer = Framer()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass

    def data_received(self, data: bytes) -> None:
        client = self.client
        if not self.framer.broken:
            client.told(data, self.framer)
        if client.transport is not None:
            client.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        paired = self.peer is not None  # not, where the client left while this side was opening
        super().connection_lost(exc)
        if paired and self.client.transport is None:  # the client left first: its replies were read
            self.client.relay.reports.send([{"gone": self.client.conn}])


async def serve(args: argparse.Namespace) -> None:
    """Listen, relay and report until stdin ends (the harness closed it, or is gone)."""
    reports = Reports(sys.stdout.fileno())
    relay = Relay(args.upstream_port, reports, re.compile(args.markers.encode()), port=args.port)
    port = await relay.start()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    commands = sys.stdin.fileno()
    os.set_blocking(commands, False)

    def readable() -> None:
        try:
            if not os.read(commands, _READ):
                done.set()
        except BlockingIOError:
            pass

    loop.add_reader(commands, readable)
    reports.send([{"ready": port}])
    try:
        await done.wait()
    finally:
        loop.remove_reader(commands)
        relay.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.crashpoints.pgrelay")
    parser.add_argument("--port", type=int, default=0, help="where to listen on 127.0.0.1 (0: any)")
    parser.add_argument("--upstream-port", type=int, required=True, help="the cluster's port on 127.0.0.1")
    parser.add_argument("--markers", required=True, help="the pattern of an intent's marker or key")
    eventloop.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
