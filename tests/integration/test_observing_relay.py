"""The observing PostgreSQL relay (a process of its own, decision 0081) against a real cluster: what it
tells the router, and how it writes once the harness has stopped listening."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from pathlib import Path

import orjson
import psycopg
import pytest

from harness.crashpoints.pgproxy import ObservingRelay
from harness.crashpoints.pgrelay import Reports
from harness.crashpoints.plans import ObservePlan
from harness.crashpoints.router import Router
from harness.history import HistoryWriter
from harness.loopback import free_port
from harness.services import Postgres

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("postgres_server")]

KEY = "ab12-3-00ff00ff00ff00ff"
"""An intent's idempotency key, as the workload makes them (intent 3)."""


def test_a_key_lookup_is_told_with_its_key_and_placed_in_its_intents_attempt(tmp_path: Path) -> None:
    """A server's key check carries the key and no marker: the relay tells it with the key, so the
    router places it in intent 3's attempt while another call is open (the table's creation, which
    carries neither, is either's)."""

    async def scenario() -> list[list[str]]:
        cluster = Postgres(tmp_path, "relay", free_port())
        await cluster.start()
        router = Router(ObservePlan())
        relay = ObservingRelay(cluster.port, router)
        try:
            await relay.start()
            router.started(3, 1)
            router.started(9, 1)
            url = relay.url("relay")
            async with await psycopg.AsyncConnection.connect(url) as conn:
                await conn.execute("CREATE TABLE keys (key text)")
                await conn.commit()
                await conn.execute("SELECT count(*) FROM keys WHERE key = %s", (KEY,))
                await conn.commit()
                await asyncio.sleep(0.1)  # the relay's reports reach the pipe
                points: list[list[str]] = router.ended(3, 1)["points"]
        finally:
            await relay.close()
            await cluster.stop()
        return points

    points = asyncio.run(scenario())
    assert points == [["db_commit", "CREATE keys", "ambiguous"], ["db_commit#1", "SELECT keys"]], points


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def test_a_commit_whose_client_left_before_its_reply_is_told_late_in_the_attempt_that_sent_it(
    tmp_path: Path,
) -> None:
    """A pod killed after it sent its INSERT and before the reply came: the cluster commits it anyway. The
    relay reads the reply to the end (it half-closes the cluster's side, not closes it) and tells the
    commit, stamped with when the client sent it; the attempt has ended by then, so the router records
    it as a ``point_late`` of that attempt, not of the other one open. Before, the relay closed the
    cluster's side with the client's and the commit was told nowhere (a kill's duplicate whose story
    could not say the killed attempt had committed)."""

    async def scenario() -> tuple[dict[str, object], list[dict[str, object]], int]:
        cluster = Postgres(tmp_path, "relay", free_port())
        await cluster.start()
        router = Router(ObservePlan())
        relay = ObservingRelay(cluster.port, router)
        try:
            with HistoryWriter(tmp_path / "history.jsonl") as history:
                router.attach(history, None, lambda: True)
                await relay.start()
                url = relay.url("relay")
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    await conn.execute("CREATE TABLE t (key text)")
                router.started(3, 1)
                router.started(9, 1)
                pod = socket.create_connection(("127.0.0.1", relay.port))
                startup = b"user\0postgres\0database\0relay\0\0"
                pod.sendall(struct.pack("!ii", 8 + len(startup), 196608) + startup)
                greeting = b""
                while not greeting.endswith(b"Z\0\0\0\x05I"):  # ready for the query (trust: no password)
                    read = pod.recv(4096)
                    assert read, f"the relay closed the start-up: {greeting!r}"
                    greeting += read
                insert = f"INSERT INTO t SELECT '{KEY}' FROM pg_sleep(0.5)".encode()
                pod.sendall(_message(b"Q", insert + b"\0"))
                await asyncio.sleep(0.1)  # the INSERT reached the cluster
                pod.close()  # the pod is killed
                ended = router.ended(3, 1)  # its attempt broke as the pod died: no commit told yet
                router.ended(9, 1)
                await asyncio.sleep(1.5)  # the cluster commits, the relay reads its reply
                relay.drain()
            async with await psycopg.AsyncConnection.connect(cluster.url) as conn:
                rows = await (await conn.execute("SELECT count(*) FROM t")).fetchone()
        finally:
            await relay.close()
            await cluster.stop()
        lines = [orjson.loads(line) for line in (tmp_path / "history.jsonl").read_bytes().splitlines()]
        assert rows is not None
        return ended, [e for e in lines if e.get("type") == "point_late"], int(rows[0])

    ended, late, rows = asyncio.run(scenario())
    assert rows == 1, "the cluster did not commit the INSERT of a client that left"
    assert ended == {}, ended
    assert [{k: e[k] for k in ("intent", "attempt", "point", "label")} for e in late] == [
        {"intent": 3, "attempt": 1, "point": "db_commit#1", "label": "INSERT t"}
    ], late


def test_reports_written_after_the_harness_stopped_reading_go_nowhere_quietly() -> None:
    """The harness stops reading the relay's pipe as it closes it, and the target's connections may end
    after that: the relay's last reports ("gone") meet a closed pipe. They are dropped, not raised: a
    BrokenPipeError there printed a traceback on the terminal a run prints its verdict to."""
    out, into = os.pipe()
    reports = Reports(into)
    reports.send([{"idle": 1}])
    assert os.read(out, 100) == b'{"idle":1}\n'
    os.close(out)
    try:
        reports.send([{"gone": 1}])
        reports.send([{"gone": 2}])  # and every one after
    finally:
        os.close(into)
