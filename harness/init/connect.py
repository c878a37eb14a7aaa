"""What ``mcp-chaos init`` learns from a live server: its protocol, its tools, the stores it writes.

The target is started the way a run starts it (a process or an image, with the
harness's PostgreSQL when its environment asks for ``{postgres_url}``), in a
throwaway run directory, or reached at a URL that is already serving. Its tools
are listed over whatever protocol it speaks. Stores named in its environment (a
SQLite file, the PostgreSQL database) are opened read-only after the server has
started, so the tables it created can be offered to the effect query. Nothing
is called: ``init`` makes no effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import rundir
from harness.client.http import McpHttpClient
from harness.client.messages import CallResult
from harness.client.readiness import Readiness, wait_ready
from harness.client.stdio import StdioChannel
from harness.errors import TargetNotReady
from harness.history import HistoryWriter, Outcome
from harness.loopback import free_port
from harness.pods.factory import make_pod, target_headers
from harness.pods.pod import Pod
from harness.pods.ready import StdioReady
from harness.scenario import TargetSpec
from harness.services import Postgres

MAX_PAGES = 20
"""``tools/list`` pages read at most (a catalog larger than that is a finding of its own)."""
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


@dataclass(frozen=True, slots=True)
class Store:
    """A database the target writes, as the scenario names it, with the columns of its tables."""

    url: str
    """As the scenario writes it: ``sqlite:///{data_dir}/x.db`` or ``{postgres_url}``."""
    tables: dict[str, list[str]]


@dataclass(slots=True)
class Facts:
    """What init found out about a server."""

    protocol: str
    tools: list[dict[str, Any]]
    stores: list[Store] = field(default_factory=list)
    jsonl_paths: list[str] = field(default_factory=list)
    """Environment values naming a JSON-lines file (``{data_dir}/ledger.jsonl``): a possible effect source."""
    uses_postgres: bool = False


async def learn(target: TargetSpec, *, url: str | None = None, ready_timeout_s: float = 30.0) -> Facts:
    """Start the target (or reach ``url``), list its tools, find its stores; stop what was started."""
    if url is not None:
        headers = target_headers(target)
        readiness = await wait_ready(url, timeout_s=ready_timeout_s, protocol="auto", headers=headers)
        _require_ready(readiness, f"answer MCP at {url}", "")
        assert readiness.protocol is not None
        return Facts(readiness.protocol, await _http_tools(url, readiness.protocol, headers))
    async with _started(target, ready_timeout_s) as (facts, run_dir):
        facts.stores += _sqlite_stores(target, run_dir)
        return facts


@contextlib.asynccontextmanager
async def _started(target: TargetSpec, ready_timeout_s: float) -> AsyncIterator[tuple[Facts, Path]]:
    with tempfile.TemporaryDirectory(prefix="mcp-chaos-init-") as tmp:
        run_dir = Path(tmp) / "init"
        (run_dir / rundir.DATA).mkdir(parents=True)
        (run_dir / rundir.PODS).mkdir()
        async with contextlib.AsyncExitStack() as stack:
            urls: dict[str, str] = {}
            uses_postgres = any("{postgres_url}" in v for v in target.env.values())
            postgres: Postgres | None = None
            if uses_postgres:
                postgres = Postgres(run_dir, "mcp_chaos", free_port())
                stack.push_async_callback(postgres.stop)
                urls["postgres_url"] = await postgres.start()
            port = free_port()
            pod = make_pod(target, run_dir, port=port, name="pod-0", urls=urls)
            stack.push_async_callback(pod.stop, 5.0)
            await pod.start()
            exited = asyncio.ensure_future(pod.wait())
            stack.push_async_callback(_cancel, exited)

            def alive() -> bool:
                return not exited.done()

            if target.transport == "stdio":
                facts = await _stdio_facts(pod, run_dir, ready_timeout_s, alive)
            else:
                pod_url = f"http://127.0.0.1:{port}{target.path}"
                headers = target_headers(target)
                readiness = await wait_ready(
                    pod_url,
                    timeout_s=ready_timeout_s,
                    protocol="auto",
                    headers=headers,
                    alive=alive,
                )
                _require_ready(readiness, f"answer MCP at {pod_url}", pod.log_tail())
                assert readiness.protocol is not None
                facts = Facts(readiness.protocol, await _http_tools(pod_url, readiness.protocol, headers))
            facts.jsonl_paths = [v for v in target.env.values() if v.endswith(".jsonl")]
            facts.uses_postgres = uses_postgres
            if postgres is not None:
                facts.stores.append(Store("{postgres_url}", await _postgres_tables(postgres.url)))
            yield facts, run_dir


async def _cancel(task: asyncio.Future[int]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _require_ready(readiness: Readiness, what: str, log: str) -> None:
    if readiness.ready:
        return
    said = readiness.fatal or (readiness.last.message if readiness.last else None) or "no answer"
    exited = " (its process exited)" if readiness.exited else ""
    raise TargetNotReady(
        f"the server did not {what} within {readiness.after_s:.0f}s{exited}: {said}", details=log
    )


async def _http_tools(url: str, protocol: str, headers: Mapping[str, str]) -> list[dict[str, Any]]:
    async with McpHttpClient(url, protocol=protocol, headers=headers) as client:
        try:
            return await _list_tools(
                lambda params, rid: client.request("tools/list", params, rid, timeout=30)
            )
        finally:
            await client.end_session()


async def _stdio_facts(pod: Pod, run_dir: Path, ready_timeout_s: float, alive: Callable[[], bool]) -> Facts:
    with HistoryWriter(run_dir / rundir.HISTORY) as history:
        ready = StdioReady(history=history, key_meta=None)
        readiness = await ready.wait(pod, timeout_s=ready_timeout_s, alive=alive)
        _require_ready(readiness, "answer initialize on its stdin and stdout", pod.log_tail())
        channel: StdioChannel | None = ready.channel
        assert channel is not None
        assert readiness.protocol is not None
        try:
            tools = await _list_tools(
                lambda params, rid: channel.request("tools/list", params, rid, timeout=30)
            )
        finally:
            await ready.close()
        return Facts(readiness.protocol, tools)


async def _list_tools(request: Any) -> list[dict[str, Any]]:
    """Every page of ``tools/list``; TargetNotReady (exit 3) when the server will not list them."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for page in range(MAX_PAGES):
        res: CallResult = await request({"cursor": cursor} if cursor else {}, 1000 + page)
        if res.outcome is not Outcome.OK or not isinstance(res.result, dict):
            said = f"{res.outcome.value} {res.detail or ''} {res.message or ''}".strip()
            raise TargetNotReady(f"the server did not list its tools: {said}")
        tools += [
            t for t in res.result.get("tools", []) if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        cursor = res.result.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return tools


def _sqlite_stores(target: TargetSpec, run_dir: Path) -> list[Store]:
    """SQLite files the target's environment names in ``{data_dir}``, with their tables as it left them."""
    stores = []
    for value in target.env.values():
        if not (value.startswith("{data_dir}/") and value.endswith(SQLITE_SUFFIXES)):
            continue
        path = run_dir / rundir.DATA / value.removeprefix("{data_dir}/")
        if not path.is_file():
            continue
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            tables = {n: [c[1] for c in db.execute(f'PRAGMA table_info("{n}")')] for n in names}
        stores.append(Store(f"sqlite:///{value}", tables))
    return stores


async def _postgres_tables(url: str) -> dict[str, list[str]]:
    import psycopg

    tables: dict[str, list[str]] = {}
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn:
        cur = await conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        )
        for table, column in await cur.fetchall():
            tables.setdefault(table, []).append(column)
    return tables
