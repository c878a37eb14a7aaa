"""The conformance kit every effect source must pass (as Hypothesis's ``provider_conformance`` is for
its backends): one real store per kind, filled with known effects through the real component that
writes it (the effect sink over HTTP, the downstream proxy over HTTP and HTTPS_PROXY, PostgreSQL
over its wire, the reference target's own tool calls, files in the run's data directory), then read
every way the harness reads a source.

For each kind of :data:`harness.effects.registry.KINDS`:

- the scenario's section is dispatched to that kind (``source_of``);
- a read while the run's services are up (``read_now``: checkpoint reads, contract checks) counts
  exactly the effects written;
- a live source's final read, then the run directory read offline (what ``mcp-chaos audit`` does
  long after), counts the same;
- the auditor's table looks each marker up to its count (one above 255 too: the table keeps such
  counts apart) and names a marker no intent claimed as foreign;
- a store that was never written is an ``AuditError`` of one line, never another exception;
- where ``init`` would draft a section from the store as it sees it, that draft reads the same.

A kind with no store here fails :func:`test_every_kind_of_source_is_in_the_kit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from harness import rundir
from harness.audit.effects import load_effects
from harness.client.http import McpHttpClient
from harness.client.messages import ToolCall
from harness.effects.base import EffectSource, SeenStore
from harness.effects.registry import KINDS, drafts, source_of
from harness.errors import AuditError
from harness.history import Outcome
from harness.run.final_read import read_now
from harness.run.services.downstream import DownstreamWired
from harness.run.services.postgres import PostgresWired
from harness.run.services.sink import SinkWired
from harness.run.wiring import TargetWiring
from harness.scenario import Effects, parse_scenario
from tests.helpers.scenarios import invoice_scenario

pytestmark = pytest.mark.integration

NAMESPACE = "conf"
EFFECTS = Counter({"conf-m0000001": 1, "conf-m0000002": 2, "conf-m0000003": 257})
"""What every store is filled with: a marker once, one twice (a duplicate), one past 255."""
FOREIGN = Counter({"conf-m0000009": 1})
"""An effect of a marker no intent of the run has: the audit must name it, not count it."""
WRITTEN = EFFECTS + FOREIGN
RUN_MARKERS = sorted(EFFECTS)

Fill = Callable[[TargetWiring, Path], Awaitable[None]]


def each_effect() -> list[str]:
    return [marker for marker, n in sorted(WRITTEN.items()) for _ in range(n)]


async def fill_sqlite(wiring: TargetWiring, run_dir: Path) -> None:
    with contextlib.closing(sqlite3.connect(run_dir / rundir.DATA / "effects.db")) as db, db:
        db.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, marker TEXT)")
        db.executemany("INSERT INTO effects (marker) VALUES (?)", [(m,) for m in each_effect()])


async def fill_postgres(wiring: TargetWiring, run_dir: Path) -> None:
    import psycopg

    postgres = wiring.service(PostgresWired)
    assert postgres is not None
    async with await psycopg.AsyncConnection.connect(postgres.cluster.url, autocommit=True) as conn:
        await conn.execute("CREATE TABLE effects (id serial PRIMARY KEY, marker text)")
        async with conn.cursor() as cur:
            await cur.executemany("INSERT INTO effects (marker) VALUES (%s)", [(m,) for m in each_effect()])


async def fill_sink(wiring: TargetWiring, run_dir: Path) -> None:
    sink = wiring.service(SinkWired)
    assert sink is not None
    async with httpx.AsyncClient() as client:
        for marker in each_effect():
            (await client.post(sink.sink.url, json={"marker": marker})).raise_for_status()


async def fill_downstream(wiring: TargetWiring, run_dir: Path) -> None:
    """Through the proxy as a target would call its API: every other call over HTTPS_PROXY to a fixed
    host (TLS with the run's CA), the rest at {downstream_url}; a GET with a marker is no effect."""
    wired = wiring.service(DownstreamWired)
    assert wired is not None
    proxy = wired.proxy
    verify = ssl.create_default_context(cafile=str(proxy.ca_path))
    async with (
        httpx.AsyncClient(proxy=proxy.url, verify=verify, trust_env=False) as tunnelled,
        httpx.AsyncClient(trust_env=False) as direct,
    ):
        for i, marker in enumerate(each_effect()):
            if i % 2:
                answer = await tunnelled.post("https://api.example/v1/things", json={"ref": marker})
            else:
                answer = await direct.post(f"{proxy.url}/v1/things", json={"ref": marker})
            answer.raise_for_status()
        (await direct.get(f"{proxy.url}/v1/things/conf-m0000001")).raise_for_status()


async def fill_jsonl(wiring: TargetWiring, run_dir: Path) -> None:
    lines = b"".join(orjson.dumps({"marker": m, "n": i}) + b"\n" for i, m in enumerate(each_effect()))
    (run_dir / rundir.DATA / "effects.jsonl").write_bytes(lines)


async def fill_files(wiring: TargetWiring, run_dir: Path) -> None:
    notes = run_dir / rundir.DATA / "notes"
    notes.mkdir()
    for i, marker in enumerate(each_effect()):
        (notes / f"note-{i}.json").write_bytes(orjson.dumps({"text": f"about {marker}"}))


async def fill_by_tool_calls(wiring: TargetWiring, run_dir: Path) -> None:
    """The reference target's own create_invoice (naive: every call is an invoice), over MCP."""
    (client,) = wiring.clients()
    assert isinstance(client, McpHttpClient)
    async with client:
        for i, marker in enumerate(each_effect()):
            arguments = {"customer_id": "c", "amount_cents": 100, "memo": marker, "idempotency_key": f"k{i}"}
            res = await client.call_tool(ToolCall("create_invoice", arguments, i + 1), timeout=30)
            assert res.outcome is Outcome.OK, res


async def fill_command(wiring: TargetWiring, run_dir: Path) -> None:
    rows = "".join(f"{m},{n}\n" for m, n in sorted(WRITTEN.items()))
    (run_dir / rundir.DATA / "counts.csv").write_text("marker,effects\n" + rows)


PRINT = "import sys; sys.stdout.write(open(sys.argv[1]).read())"


@dataclass(frozen=True)
class Store:
    """A real store of one kind of source, how it is filled, and how ``init`` would see it."""

    effects: dict[str, Any]
    fill: Fill
    sections: dict[str, Any] = field(default_factory=dict)
    pod: bool = False
    """The store is the target's: its pod runs while the store is filled and read."""
    seen: SeenStore | None = None
    needs: str | None = None
    """A fixture the store needs of the machine (it skips where that is missing)."""


STORES: dict[str, Store] = {
    "sqlite": Store(
        {"sql": {"url": "sqlite:///{data_dir}/effects.db", "query": "SELECT marker FROM effects"}},
        fill_sqlite,
        seen=SeenStore("sql", "sqlite:///{data_dir}/effects.db", {"effects": ["id", "marker"]}),
    ),
    "postgres": Store(
        {
            "sql": {
                "url": "{postgres_url}",
                "query": "SELECT marker, count(*) AS effects FROM effects GROUP BY marker",
            }
        },
        fill_postgres,
        sections={"services": {"postgres": {}}},
        seen=SeenStore("sql", "{postgres_url}", {"effects": ["id", "marker"]}),
        needs="postgres_server",
    ),
    "sink": Store({"sink": {}}, fill_sink),
    "downstream": Store({"downstream": {}}, fill_downstream, sections={"services": {"downstream": {}}}),
    "jsonl": Store(
        {"jsonl": {"path": "{data_dir}/effects.jsonl"}},
        fill_jsonl,
        seen=SeenStore("jsonl", "{data_dir}/effects.jsonl"),
    ),
    "files": Store(
        {"files": {"dir": "{data_dir}/notes", "pattern": "*.json"}},
        fill_files,
        seen=SeenStore("dir", "{data_dir}/notes"),
    ),
    "tool": Store(
        {"tool": {"tool": "count_invoices", "arguments": {"memo_prefix": "{namespace}"}}},
        fill_by_tool_calls,
        pod=True,
    ),
    "command": Store(
        {"command": {"command": ["{python}", "-c", PRINT, "{data_dir}/counts.csv"]}},
        fill_command,
    ),
}


def test_every_kind_of_source_is_in_the_kit() -> None:
    assert sorted(kind.kind for kind in KINDS) == sorted(STORES)


@dataclass
class Observed:
    effects: Effects
    source: EffectSource
    now: Counter[str]
    torn: bool
    drafted: Counter[str] | None
    run_dir: Path


async def exercise(store: Store, results: Path) -> Observed:
    """Fill the store with :data:`WRITTEN` while its services run, and read it as a run would."""
    data = invoice_scenario(mode="naive", audit={"effects": store.effects}, **store.sections)
    scenario = parse_scenario(data)
    run_dir = rundir.prepare_run_dir(results, scenario)
    wiring = TargetWiring(scenario, run_dir)
    source = wiring.effects
    drafted: Counter[str] | None = None
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(wiring.history)
        wiring.supervise()
        await stack.enter_async_context(wiring.running_services())
        if store.pod:
            await stack.enter_async_context(wiring.running_pods())
        await store.fill(wiring, run_dir)
        sample = await wiring.read_effects_now(NAMESPACE)
        if store.seen is not None:
            best = min(drafts([store.seen], "marker"), key=lambda d: d.rank)
            assert best.todo is None, best
            guess = source_of(Effects.model_validate(best.section))
            drafted = (await read_now(guess, run_dir, wiring.reach(NAMESPACE))).counts
        if source.live:
            await wiring.read_live_effects(NAMESPACE)
    return Observed(scenario.audit.effects, source, sample.counts, sample.torn, drafted, run_dir)


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_source_counts_what_was_written_every_way_it_is_read(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = STORES[kind]
    if store.needs is not None:
        request.getfixturevalue(store.needs)
    seen = asyncio.run(exercise(store, tmp_path / "results"))
    assert seen.source.kind == kind  # the section is dispatched to this kind

    assert seen.now == WRITTEN  # read while the services run
    assert not seen.torn
    assert seen.source.count(seen.run_dir) == WRITTEN  # offline, after they stopped (effects.json if live)

    table = load_effects(seen.effects, seen.run_dir)
    try:
        assert table.lookup(RUN_MARKERS).tolist() == [EFFECTS[m] for m in RUN_MARKERS]
        assert table.lookup(["conf-m0000005"]).tolist() == [0]  # an intent with no effect
        assert table.foreign() == (1, sorted(FOREIGN))
    finally:
        table.close()

    if store.seen is not None:
        assert seen.drafted == WRITTEN  # what init would draft from the store reads the same


@pytest.mark.parametrize("kind", sorted(STORES))
def test_a_store_never_written_is_one_line_of_audit_error(kind: str, tmp_path: Path) -> None:
    store = STORES[kind]
    scenario = parse_scenario(invoice_scenario(audit={"effects": store.effects}, **store.sections))
    run_dir = rundir.prepare_run_dir(tmp_path, scenario)
    with pytest.raises(AuditError) as info:
        source_of(scenario.audit.effects).count(run_dir)
    assert "\n" not in info.value.message
    assert info.value.message


def test_the_kit_fails_a_source_that_miscounts(tmp_path: Path) -> None:
    """The kit can fail: a command that drops a duplicate is caught by the first of its checks."""
    dropping = Store(
        {"command": {"command": ["{python}", "-c", PRINT, "{data_dir}/counts.csv"]}},
        fill_command_dropping_a_duplicate,
    )
    seen = asyncio.run(exercise(dropping, tmp_path))
    assert seen.now != WRITTEN
    assert seen.now["conf-m0000002"] == 1


async def fill_command_dropping_a_duplicate(wiring: TargetWiring, run_dir: Path) -> None:
    rows = "".join(f"{m},{min(n, 1)}\n" for m, n in sorted(WRITTEN.items()))
    (run_dir / rundir.DATA / "counts.csv").write_text(rows)
