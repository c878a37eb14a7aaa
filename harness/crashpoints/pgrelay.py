"""The PostgreSQL relay: a process of its own between the target and the harness's cluster, observing.

In a run whose plan only observes (every run without crash points or an order),
every byte of the target's database traffic passes here, framed both ways
(``pgwire``) to follow each connection's transactions: in the harness's own
process that cost 1.5 times the driver's own CPU per call (a frame and a write
per message, a dozen of each per call; decision 0078). The relay tells each
commit to the harness (:class:`harness.crashpoints.pgproxy.ObservingRelay`, which
hands it to the run's decision router) over its stdout, one JSON line each,
stamped with ``time.monotonic()``: CLOCK_MONOTONIC is one clock for every process
of the machine, so the router places a commit by when it happened, not when it
read it. Nothing here waits for the harness: a plan that holds or kills has the
in-process proxy (:class:`harness.crashpoints.pgproxy.PostgresProxy`).

A commit is written to the pipe before the message that tells the client of it
(a ``COMMIT`` tag, or the ReadyForQuery that ends an implicit transaction) is
relayed: so an attempt whose answer the harness has seen has its commits in the
pipe already. The lines (all from the relay)::

    {"ready": PORT}                              listening on 127.0.0.1:PORT
    {"point": "db_commit", "conn": CONN, "at": T, "label": L, "reads": B, "markers": M, "idle": B}
                                                 a commit ("idle": its connection's transaction ended)
    {"idle": CONN}                               its transaction ended after a commit told apart
    {"gone": CONN}                               it closed

``markers`` are the intents' markers (``--markers``: their pattern) in what the
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
from typing import Any

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
from harness.loopback import LoopbackServer

_READ = 65536
ASKED_LIMIT = 16384
"""Bytes of what a connection asked since its last commit kept to find markers in."""


class Reports:
    """The relay's stdout: reports written in order, each before the work it tells of goes on."""

    def __init__(self, out: int) -> None:
        self._out = out

    def send(self, reports: list[dict[str, Any]]) -> None:
        """Write ``reports`` now (blocking while the harness is that far behind: it paces the relay)."""
        data = memoryview(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in reports))
        while data:
            data = data[os.write(self._out, data) :]


class Relay(LoopbackServer):
    """Relays the target's PostgreSQL connections to the cluster at ``upstream_port``, telling commits."""

    def __init__(
        self, upstream_port: int, reports: Reports, markers: re.Pattern[bytes], port: int = 0
    ) -> None:
        super().__init__(port)
        self.upstream_port = upstream_port
        self.reports = reports
        self.markers = markers
        self._conns = itertools.count(1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(self._conns)
        try:
            await self._relay(reader, writer, _Link(self, conn))
        finally:
            self.reports.send([{"gone": conn}])

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
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
    """One client connection relayed to the cluster: its transactions and its commits."""

    def __init__(self, relay: Relay, conn: int) -> None:
        self.relay = relay
        self.conn = conn
        self.serving = False
        """A commit of it was told and its transaction has not ended since: the router ties it to an
        attempt until it is told the connection is idle."""
        self.transactions = Transactions()
        self.asked = bytearray()
        """Query and Bind bodies since the last commit (bounded): the markers the commit carries."""

    async def from_client(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, framer: Framer
    ) -> None:
        while data := await reader.read(_READ):
            if framer.broken:
                up_writer.write(data)
            else:
                for message in framer.feed(data):
                    self.transactions.client(message)
                    if message.type in (b"Q", b"B") and len(self.asked) < ASKED_LIMIT:
                        self.asked += message.body[: ASKED_LIMIT - len(self.asked)]
                up_writer.write(data)  # the bytes as they came: framing only follows them
            await up_writer.drain()

    async def from_server(self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        framer = Framer()
        while data := await up_reader.read(_READ):
            if not framer.broken:
                reports: list[dict[str, Any]] = []
                for message in framer.feed(data):
                    commit = self.transactions.server(message)
                    if commit is not None:
                        reports.append(self._commit(commit))
                    if message.type == b"Z" and message.body[:1] == b"I" and self.serving:
                        self._idle(reports)
                if reports:
                    self.relay.reports.send(reports)  # the commits are told before the client hears of them
            writer.write(data)
            await writer.drain()

    def _commit(self, commit: Commit) -> dict[str, Any]:
        asked, self.asked = bytes(self.asked), bytearray()
        self.serving = True
        report: dict[str, Any] = {
            "point": "db_commit",
            "conn": self.conn,
            "at": time.monotonic(),
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
        await relay.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.crashpoints.pgrelay")
    parser.add_argument("--port", type=int, default=0, help="where to listen on 127.0.0.1 (0: any)")
    parser.add_argument("--upstream-port", type=int, required=True, help="the cluster's port on 127.0.0.1")
    parser.add_argument("--markers", required=True, help="the pattern of an intent's marker")
    eventloop.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
