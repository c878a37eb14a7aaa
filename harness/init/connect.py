"""What ``mcp-chaos init`` learns from a live server: its protocol, its tools, the stores it writes.

The target is started the way a run starts it, through :class:`~harness.wiring.TargetWiring`
(its pod under a supervisor, the readiness check of its transport, the harness's
PostgreSQL when its environment asks for ``{postgres_url}``, the effect sink for
``{sink_url}``), in a throwaway run directory (kept when the server would not
start: the error names the server's log in it), or reached at a URL that is
already serving. Its tools are listed over whatever protocol it speaks. Stores
named in its environment (a SQLite file, the PostgreSQL database) are opened
read-only after the server has started, so the tables it created can be offered
to the effect query. Nothing is called: ``init`` makes no effect.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import rundir
from harness.client.http import McpHttpClient
from harness.client.messages import CallResult
from harness.client.readiness import wait_ready
from harness.errors import TargetError, TargetNotReady
from harness.history import HistoryWriter, Outcome
from harness.pods.factory import target_headers
from harness.scenario import Scenario, TargetSpec
from harness.wiring import TargetWiring

MAX_PAGES = 20
"""``tools/list`` pages read at most (a catalog larger than that is a finding of its own)."""
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")

Request = Callable[[dict[str, Any], int], Awaitable[CallResult]]


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
    startup_s: float | None = None
    """How long the server took to start and answer (None: reached at a URL, not started)."""


async def learn(target: TargetSpec, *, url: str | None = None, ready_timeout_s: float = 30.0) -> Facts:
    """Start the target (or reach ``url``), list its tools, find its stores; stop what was started."""
    if url is not None:
        return await _reached(url, target_headers(target), ready_timeout_s)
    scenario = probe(target, ready_timeout_s)
    tmp = Path(tempfile.mkdtemp(prefix="mcp-chaos-init-"))
    run_dir = tmp / "init"
    (run_dir / rundir.DATA).mkdir(parents=True)
    (run_dir / rundir.PODS).mkdir()
    try:
        facts = await _started(scenario, run_dir)
    except TargetError:
        raise  # the directory stays: the message names the server's log in it
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return facts


def probe(target: TargetSpec, ready_timeout_s: float) -> Scenario:
    """The smallest scenario around a target, for the wiring: the services its placeholders name, and a
    workload and an effect source that nothing uses (init calls no tool and reads no effect)."""
    texts = [*(target.command or ()), *target.env.values()]
    unused = {"jsonl": {"path": "{data_dir}/unused.jsonl"}}
    return Scenario.model_validate(
        {
            "name": "init",
            "target": {**target.model_dump(mode="json"), "ready_timeout_s": ready_timeout_s},
            "services": {"postgres": {}} if any("{postgres_url}" in t for t in texts) else {},
            "workload": {"intents": 1, "tool": "-", "arguments": {"marker": "{marker}"}},
            "audit": {"effects": {"sink": {}} if any("{sink_url}" in t for t in texts) else unused},
        }
    )


async def _started(scenario: Scenario, run_dir: Path) -> Facts:
    """Start the probe's services and pod as a run does, list the tools, read the stores; stop it all."""
    target = scenario.target
    wiring = TargetWiring(scenario, run_dir)
    async with contextlib.AsyncExitStack() as stack:
        history = stack.enter_context(HistoryWriter(run_dir / rundir.HISTORY, redactor=wiring.redactor))
        wiring.supervise(history)
        await wiring.start_services(stack)
        await wiring.start_pod(stack)
        (client,) = wiring.clients()
        stack.push_async_callback(client.aclose)
        tools = await _list_tools(
            lambda params, rid: wiring.request(client, "tools/list", params, rid, timeout=30)
        )
        facts = Facts(wiring.protocol, tools, stores=_sqlite_stores(target, run_dir))
        facts.startup_s = wiring.supervisors[0].startup_s
        facts.jsonl_paths = [v for v in target.env.values() if v.endswith(".jsonl")]
        if wiring.postgres is not None:
            facts.uses_postgres = True
            facts.stores.append(Store("{postgres_url}", await _postgres_tables(wiring.postgres.url)))
        return facts


async def _reached(url: str, headers: dict[str, str], ready_timeout_s: float) -> Facts:
    """A server already serving at ``url``: nothing to start, only its protocol and tools to learn."""
    readiness = await wait_ready(url, timeout_s=ready_timeout_s, protocol="auto", headers=headers)
    if not readiness.ready:
        said = readiness.fatal or (readiness.last.message if readiness.last else None) or "no answer"
        raise TargetNotReady(
            f"the server did not answer MCP at {url} within {readiness.after_s:.0f}s: {said}"
        )
    assert readiness.protocol is not None
    async with McpHttpClient(url, protocol=readiness.protocol, headers=headers) as client:
        try:
            tools = await _list_tools(
                lambda params, rid: client.request("tools/list", params, rid, timeout=30)
            )
        finally:
            await client.end_session()
    return Facts(readiness.protocol, tools)


async def _list_tools(request: Request) -> list[dict[str, Any]]:
    """Every page of ``tools/list``; TargetNotReady (exit 3) when the server will not list them."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for page in range(MAX_PAGES):
        res = await request({"cursor": cursor} if cursor else {}, 1000 + page)
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
