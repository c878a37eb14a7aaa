"""The observing PostgreSQL relay (a process of its own, decision 0081) against a real cluster: what it
tells the router, and how it writes once the harness has stopped listening."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psycopg
import pytest

from harness.crashpoints.pgproxy import ObservingRelay
from harness.crashpoints.pgrelay import Reports
from harness.crashpoints.plans import ObservePlan
from harness.crashpoints.router import Router
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
