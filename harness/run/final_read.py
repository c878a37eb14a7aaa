"""Reading an effect source while its services are up: the final read, checkpoint reads, a check's read.

Jepsen ends a test with final reads that become part of its record; this is the
same. After the driver and the faults have stopped, the runner asks a live effect
source (PostgreSQL, a read tool, a command: :mod:`harness.effects`) for the effects
per marker and writes them to ``effects.json`` in the run directory. The auditor
reads that file, never the service, so a run can be re-audited long after its
services are gone. Checkpoint reads and contract checks read any source *now*
(:func:`read_now`): a source of files in a thread, a live one through its live read.

The sources know what to ask and how to read the answer; :class:`Reach` is the I/O
they are handed (:class:`harness.effects.base.LiveIO`): a tool call, a query on a
connection of its own, a command. It is the one read of effects that talks to the
network or starts a process, which is why it is not part of :mod:`harness.audit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from harness.client.http import McpHttpClient
from harness.client.messages import ToolCall, text_of
from harness.client.oauth import OAuthTokens
from harness.effects.base import EffectSource, Sample, write_collected
from harness.errors import AuditError, StoreNotMade
from harness.history import Outcome


@dataclass(frozen=True, slots=True)
class Reach:
    """Where a live effect source is read: the pod a read tool is called on (its URL, protocol and
    headers), the harness's PostgreSQL, and the run's namespace (the read tool's ``{namespace}``)."""

    pod_url: str
    protocol: str
    headers: Mapping[str, str]
    postgres_url: str | None
    namespace: str
    auth: OAuthTokens | None = None
    """``target.auth``'s tokens, for the read tool's call."""

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        async with McpHttpClient(
            self.pod_url, protocol=self.protocol, headers=self.headers, auth=self.auth
        ) as client:
            res = await client.call_tool(ToolCall(name, arguments, 1), timeout=60)
            await client.end_session()
        if res.outcome is not Outcome.OK or res.result is None:
            said = f": {res.message}" if res.message else ""
            raise AuditError(f"read tool {name!r} failed: {res.outcome.value} {res.detail}{said}")
        return structured(res.result)

    async def query(self, url: str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The query, on a connection of its own in a thread: a read abandoned (a checkpoint read when
        the run ends, one past its timeout) is cancelled for the run, while its thread still closes the
        connection it opened. Cancelled inside an async connect, psycopg left the connection open."""
        return await asyncio.to_thread(_query_postgres, url, sql)

    async def run(self, argv: list[str], timeout_s: float) -> tuple[int, bytes, bytes]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise AuditError(f"cannot run the effects command {argv[0]!r}: {exc.strerror or exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        except asyncio.CancelledError:  # a checkpoint read abandoned: the command must not outlive it
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return proc.returncode, out, err


def _query_postgres(url: str, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.read_only = True  # the audit must never change the evidence it reads
            cur = conn.execute(query)
            columns = [d.name for d in cur.description or ()]
            return columns, cur.fetchall()
    except psycopg.errors.UndefinedTable as exc:  # the target has not made its table yet
        raise StoreNotMade(f"audit query failed on {url}: {exc}".splitlines()[0]) from None
    except psycopg.Error as exc:
        raise AuditError(f"audit query failed on {url}: {exc}".splitlines()[0]) from None


async def read_now(source: EffectSource, run_dir: Path, reach: Reach) -> Sample:
    """What ``source`` holds now: files counted in a thread (a large store must not hold the event loop),
    a live source through its live read. AuditError when it cannot be read."""
    if source.live:
        return Sample(await source.read_live(run_dir, reach))
    torn: list[int] = []
    counts = await asyncio.to_thread(partial(source.count, run_dir, torn=torn))
    return Sample(counts, bool(torn))


async def final_read(source: EffectSource, run_dir: Path, reach: Reach) -> int:
    """Take the final read of a live source into effects.json; returns the number of markers found."""
    counts: Counter[str] = await source.read_live(run_dir, reach)
    write_collected(run_dir, counts, source.describe(), dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    return len(counts)


def structured(result: dict[str, Any]) -> Any:
    """A tool result's structured content; without any, its text read as JSON, as a tool that returns a
    dict without an output schema sends it (the SDK puts it in a text block only), else None."""
    if "structuredContent" in result:
        return result["structuredContent"]
    try:
        return orjson.loads(text_of(result))
    except orjson.JSONDecodeError:
        return None
